"""Layer 3, the outside world, one sub-package per thing adapted:

    engine/   the Pulumi engine: the Engine protocol, the worker pool and its worker processes, the process tree,
              the Automation API engine (settings, locks, run output), and the offline plan under the mock runtime
    aws/      AWS: boto3 sessions per account, the audit trail, lookups and the pre-flights built on them
    kube/     Kubernetes: informers, the Lease, status and Event writers, agents, the shared ingress's ConfigMap
    files/    files and HAProxy: YAML inputs, the rendered install, the running HAProxy's config

and a few shared helpers beside them (backoff, loop, logs, progress, facts). A sub-package uses another only
through that package's own names (its __init__), never its modules (tests/test_layers.py). Imports components/
and stacks/, never automation.service, automation.api or automation.cli."""
