"""The policy rules as plain functions: a stack's resources and its inputs in, violations out. No SDK.

The same functions run in three places (docs/security.md, "Guarantees the policy pack checks"):
    python -m automation plan --policy ...   over the mock runtime's recorded resources, and the whole plan
    the service's `up` and `preview`         the engine loads policy/ (policy/__main__.py) as a policy pack
    pulumi preview --policy-pack policy      by hand

This package exports nothing itself: import each name from the module that defines it.
    view.py             what the rules read and say: Context.of(inputs) (what the stack's inputs allow: accounts,
                        the hub account, the API port and hub CIDRs, the mesh members with their VPCs, route tables
                        and gateways), Resource (one resource as the engine or the plan shows it: URN, type, props,
                        its provider), Violation, Rule (a name, its scope: one resource or one stack, and its check)
    kinds.py            the AWS resource types the rules check; kind_of (a dynamic resource named after one)
    cidrs.py            CIDR arithmetic the checks share
    endpoints.py        the checks, one module per kind of resource: endpoint services,
    security_groups.py  security-group rules (every way AWS writes them),
    nacls.py            network ACLs,
    providers.py        providers and their accounts,
    routes.py           VPC routes and peerings (stack scope),
    transit.py          a transit stack's RAM share and Transit Gateway routes (stack scope)
    catalog.py          RULES: every check with its name, description, scope and config; BY_NAME
    enforcement.py      settings(): each rule's level and config from a pack config (Setting)
    check.py            check_stack(): every rule over one stack;  check_fleet(): the rules that span stacks

A check reads `props` with `get` and indexing only: in the pack, props are Pulumi's proxy, which raises on a value
the engine does not know yet (a preview), so the rule says it cannot run and runs at `up` instead.
"""
