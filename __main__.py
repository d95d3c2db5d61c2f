"""`pulumi up` / `pulumi preview` for one cluster's stack.

The stack's config key `hubwright:inputs` holds that cluster's StackInputs as
JSON; `python -m automation inputs --hub HUB.yaml --clusters PATH --cluster NAMESPACE/NAME`
prints it (PATH: a Cluster YAML file or a folder of them), and the service writes it for
every stack it runs. The whole path by hand (backend, passphrase, plugins): the README,
"`pulumi up` by hand, for one cluster".
"""
from components.program import run_from_config

run_from_config()
