"""Everything that does I/O, in two layers over components/ and stacks/ (docs/architecture.md):
automation/adapters (the engine, AWS, Kubernetes, HAProxy, files) and, above them, automation/service
(watch → queue → reconcile → engine) and automation/cli (`python -m automation ...`)."""
