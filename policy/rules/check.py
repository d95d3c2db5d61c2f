"""Running the rules: check_stack (every enabled rule over one stack), check_fleet (the rules that span stacks)."""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from policy.rules.catalog import RULES
from policy.rules.enforcement import Setting, settings
from policy.rules.routes import overlaps, shared_vpcs
from policy.rules.view import Context, Resource, Violation

def check_stack(ctx: Context, resources: Sequence[Resource],
                chosen: Mapping[str, Setting] | None = None) -> list[Violation]:
    """Every enabled rule over one stack: resource rules on each resource, stack rules once."""
    chosen = chosen or settings()
    found: list[Violation] = []
    for rule in RULES:
        setting = chosen[rule.name]
        if setting.level == "disabled":
            continue
        if rule.scope == "resource":
            found += [Violation(rule.name, r.urn, reason, setting.level)
                      for r in resources for reason in rule.check(ctx, r, setting.config)]
        else:
            found += [Violation(rule.name, urn, reason, setting.level)
                      for urn, reason in rule.check(ctx, resources, setting.config)]
    return found


def check_fleet(contexts: Iterable[Context], chosen: Mapping[str, Setting] | None = None) -> list[Violation]:
    """The rules that span stacks, over every stack of a plan: no two member CIDRs of a group overlap, and no two
    members of the fleet name one VPC."""
    chosen = chosen or settings()
    groups: dict[str, dict[str, tuple[str, ...]]] = {}
    vpcs: dict[str, str] = {}
    for ctx in contexts:
        if ctx.group is not None:
            groups.setdefault(ctx.group, {}).update({m.key: m.cidrs for m in ctx.members})
        vpcs.update({m.key: m.vpc_id for m in ctx.members})
    found: list[Violation] = []
    if (cidrs_rule := chosen["member-cidrs-disjoint"]).level != "disabled":
        found += [Violation("member-cidrs-disjoint", None, reason, cidrs_rule.level)
                  for group, cidrs in sorted(groups.items()) for reason in overlaps(cidrs, group)]
    if (vpc_rule := chosen["peerings-join-their-pair"]).level != "disabled":
        found += [Violation("peerings-join-their-pair", None, reason, vpc_rule.level) for reason in shared_vpcs(vpcs)]
    return found
