"""The registry API (docs/registry.md): `python -m automation api`, a FastAPI app over the Tenant and Cluster CRDs."""
