"""Everything that does I/O, in three layers over components/ and stacks/ (docs/architecture.md; the "layers"
contract in pyproject.toml): automation/adapters, one sub-package per thing adapted (engine: Pulumi; aws; kube;
files: files and HAProxy); above them two independent siblings, automation/service (the controller:
watch → queue → reconcile → engine) and automation/api (the registry REST API); and on top automation/cli
(`python -m automation ...`), which starts either."""
