"""Stack runs: the HubStackRun kind and every rule about it, pure (docs/service.md, "Runners").

With `--executor runners` the service does not run Pulumi itself. Each operation becomes a HubStackRun beside the
cluster (a transit stack's in the service's namespace), with its inputs in a Secret of the service's namespace;
a pool of runner pods claims runs, executes them and writes the result into the run's status.

    model.py    the kind: spec (what to run), status (what happened), the Secret's payload, names
    claims.py   the claim that is a runner's lease: claimable, expired, renewed, and which runner hosts still
                hold a live claim on a stack (the stale-lock rule reads it)
    order.py    which claimable run a runner takes first: fair between namespaces, oldest first
    checks.py   whether a run may reach the engine: the run, its Secret and the digest must agree
    history.py  which finished runs are deleted (--keep-runs per stack)
"""
