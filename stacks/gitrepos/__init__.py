"""The registry's Git repositories (docs/registry.md "Git repositories"), pure: the HubGitRepo kind (model.py), the
public keys it accepts (keys.py), the HubGitRepos a Tenant's templates make (templates.py) and what the controller
does to a forge to make it match (plan.py). No SDK, no I/O: automation/adapters/forge/ talks to the forges and
automation/service/gitrepos.py runs the controller.
"""
