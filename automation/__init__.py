"""The service and the CLI: watch → queue → reconcile → engine; plan; ingress render."""
