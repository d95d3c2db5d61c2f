"""Layer 1, pure: the model and every decision (resolve, tenancy, accounts, placement, mesh, shared-ingress
routing and rendering) and the names shared by all layers. Imports no Pulumi, no AWS SDK, no Kubernetes client."""
