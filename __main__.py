"""`pulumi up` / `pulumi preview` of one stack by hand: a cluster's, or a Transit Gateway group's transit stack.

The stack's config key `hubwright:inputs` holds its inputs as JSON (a cluster's StackInputs, or TransitInputs
marked `"kind": "transit"`); components.program.run_from_config reads it and runs the same program the
service's engine runs. The engine (automation/adapters/engine/pulumi_engine.py) sets that key on every stack
before it runs it; for a cluster's stack by hand,
`python -m automation inputs --hub HUB.yaml --clusters PATH --cluster NAMESPACE/NAME` prints it (PATH: a
Cluster YAML file or a folder of them). The whole path by hand (backend, passphrase, plugins): the README,
"`pulumi up` by hand, for one cluster".
"""
from components.program import run_from_config

run_from_config()
