"""What a change does to the fleet: one offline plan (`python -m automation plan --format json`) against a
baseline plan, stack by stack and resource by resource. Pure.

- replace.py: REPLACE_ON, per AWS resource type the programs create, the inputs whose change makes the provider
  replace the resource (not update it in place); a type it does not know is an error, never an update;
- compare.py: compare_stack (resources matched by URN: add, remove, replace, update, with each changed property's
  old and new value, secrets masked), compare_mesh (the mesh groups' summaries), summary (the counts) and
  compare_plans (two whole plan documents into the diff document the renderers read).
"""
