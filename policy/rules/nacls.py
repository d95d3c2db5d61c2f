"""Network ACLs, every way AWS writes them (nacl_entries), and the rule over them: no world-open entry."""
from __future__ import annotations

from typing import Iterator

from policy.rules.cidrs import network
from policy.rules.kinds import NACL_INLINE, NACL_RULE
from policy.rules.view import Config, Context, Resource

def nacl_entries(r: Resource) -> list[tuple[str, str, str]]:
    """A network ACL's entries that allow traffic, every way AWS writes them: (direction, CIDR, rule number)."""
    p, kind = r.props, r.kind
    if kind == NACL_RULE:
        entries = [("egress" if p.get("egress") else "ingress", p.get("ruleAction"), p.get("ruleNumber"), p)]
    elif kind in NACL_INLINE:
        entries = [(direction, e.get("action"), e.get("ruleNo"), e)
                   for direction in ("ingress", "egress") for e in p.get(direction) or []]
    else:
        return []
    return [(direction, str(cidr), str(number)) for direction, action, number, e in entries
            if str(action).lower() != "deny" for cidr in (e.get("cidrBlock"), e.get("ipv6CidrBlock")) if cidr]


def no_world_nacl(_ctx: Context, r: Resource, config: Config) -> Iterator[str]:
    shortest = int(config.get("minPrefixLength", 1))
    for direction, cidr, number in nacl_entries(r):
        net = network(cidr)
        if net is None:
            yield f"{direction} rule {number}: {cidr!r} is not a CIDR"
        elif net.prefixlen < shortest:
            yield (f"{direction} rule {number} allows {cidr}: everyone" if net.prefixlen == 0 else
                   f"{direction} rule {number} allows {cidr}, broader than /{shortest} (minPrefixLength)")
