"""hubwright's policy pack (Pulumi CrossGuard): the promises of docs/security.md, checked on every plan and update.

    policy/rules/           the rules as plain functions over a neutral view of resources (no SDK); its
                            __init__.py maps its modules
    policy/__main__.py      the pack: the same rules as ResourceValidationPolicy / StackValidationPolicy,
                            loaded by the engine (`pulumi preview --policy-pack policy`, the service's runs)
    policy/PulumiPolicy.yaml

`python -m automation plan` runs policy.rules over the recorded resources of every stack and over the whole plan.
"""
