"""`pulumi up` / `pulumi preview` for one cluster's stack.

The stack's config key `hubwright:inputs` holds that cluster's StackInputs as
JSON; `python -m automation inputs --hub HUB.yaml --cluster FILE` prints it, and
the service writes it for every stack it runs.
"""
from components.program import run_from_config

run_from_config()
