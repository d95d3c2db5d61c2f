"""Running the rules: check_stack (every enabled rule over one stack), check_fleet (the rules that span stacks)."""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from policy.rules.catalog import RULES
from policy.rules.enforcement import Setting, settings
from policy.rules.routes import overlaps
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
    """The rules that span stacks, over every stack of a plan: no two member CIDRs of a group overlap."""
    setting = (chosen or settings())["member-cidrs-disjoint"]
    if setting.level == "disabled":
        return []
    groups: dict[str, dict[str, tuple[str, ...]]] = {}
    for ctx in contexts:
        if ctx.group is not None:
            groups.setdefault(ctx.group, {}).update({m.key: m.cidrs for m in ctx.members})
    return [Violation("member-cidrs-disjoint", None, reason, setting.level)
            for group, cidrs in sorted(groups.items()) for reason in overlaps(cidrs, group)]
