"""Layer 4, the service: watch → queue → reconcile → engine (serve.py wires it; docs/architecture.md follows
one event through it)."""
