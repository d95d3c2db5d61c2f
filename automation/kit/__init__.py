"""The controller kit: the runtime (Manager, Controller, WorkQueue, Workers, Outcome), the object view and port, the
finalizer helper and the status writer, shared by the service, the API and the runner (docs/architecture.md)."""
