"""Security-group rules, every way AWS writes them (sg_rules), and the rules over them: no world-open CIDR, mesh ingress
from member CIDRs only, the API endpoint's port from the hub's VPCs only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from policy.rules.cidrs import network, within
from policy.rules.kinds import API_SIDE, SG_EGRESS, SG_INGRESS, SG_INLINE, SG_RULE
from policy.rules.view import Config, Context, Resource

@dataclass(frozen=True)
class SgRule:
    direction: str  # ingress | egress
    cidrs: tuple[str, ...]
    others: tuple[str, ...]  # sources that are not CIDRs: security groups, prefix lists, the group itself
    protocol: str
    from_port: Any
    to_port: Any


def sg_rules(r: Resource) -> list[SgRule]:
    p, kind = r.props, r.kind
    if kind == SG_RULE:
        return [_sg_rule(str(p.get("type")), p, p.get("protocol"),
                         [*(p.get("cidrBlocks") or []), *(p.get("ipv6CidrBlocks") or [])],
                         _others(p.get("sourceSecurityGroupId"), p.get("prefixListIds"), p.get("self")))]
    if kind in (SG_INGRESS, SG_EGRESS):
        return [_sg_rule("ingress" if kind == SG_INGRESS else "egress", p, p.get("ipProtocol"),
                         [c for c in (p.get("cidrIpv4"), p.get("cidrIpv6")) if c],
                         _others(p.get("referencedSecurityGroupId"), [p.get("prefixListId")], False))]
    if kind in SG_INLINE:
        return [_sg_rule(direction, rule, rule.get("protocol"),
                         [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])],
                         _others(rule.get("securityGroups"), rule.get("prefixListIds"), rule.get("self")))
                for direction in ("ingress", "egress") for rule in p.get(direction) or []]
    return []


def _others(groups: Any, prefix_lists: Any, itself: Any) -> list[str]:
    """The sources of a rule that are not CIDRs."""
    groups = [groups] if isinstance(groups, str) else list(groups or [])
    return [*(f"security group {g}" for g in groups if g), *(f"prefix list {x}" for x in prefix_lists or [] if x),
            *(["the group itself"] if itself else [])]


def _sg_rule(direction: str, p: Mapping[str, Any], protocol: Any, cidrs: list, others: list) -> SgRule:
    return SgRule(direction, tuple(str(c) for c in cidrs), tuple(others), str(protocol).lower(),
                  p.get("fromPort"), p.get("toPort"))



def no_world_cidr(_ctx: Context, r: Resource, config: Config) -> Iterator[str]:
    shortest = int(config.get("minPrefixLength", 1))
    for rule in sg_rules(r):
        for cidr in rule.cidrs:
            net = network(cidr)
            if net is None:
                yield f"{rule.direction} {cidr!r} is not a CIDR"
            elif net.prefixlen < shortest:
                yield (f"{rule.direction} {cidr} admits everyone" if net.prefixlen == 0 else
                       f"{rule.direction} {cidr} is broader than /{shortest} (minPrefixLength)")


def mesh_ingress_from_members(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if API_SIDE in r.urn:
        return
    cidrs = [c for m in ctx.members for c in m.cidrs]
    for rule in sg_rules(r):
        if rule.direction != "ingress":
            continue
        for other in rule.others:
            yield f"ingress from {other}: a mesh rule admits member CIDRs only"
        for cidr in rule.cidrs:
            if not cidrs:
                yield f"ingress from {cidr}: stack {ctx.stack} is in no mesh group, so it has no member CIDRs"
            elif not within(cidr, cidrs):
                yield f"ingress from {cidr}, which is not a CIDR of mesh group {ctx.group} ({', '.join(cidrs)})"


def api_port_from_hub(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if API_SIDE not in r.urn:
        return
    for rule in sg_rules(r):
        if rule.direction != "ingress":
            continue
        ports = (rule.protocol in ("tcp", "6") and rule.from_port == ctx.api_port == rule.to_port)
        if not ports:
            yield (f"ingress {rule.protocol} {rule.from_port}-{rule.to_port}: the API endpoint admits tcp "
                   f"{ctx.api_port} only")
        for other in rule.others:
            yield f"ingress from {other}: the API endpoint admits hub VPC CIDRs only"
        for cidr in rule.cidrs:
            if within(cidr, ctx.api_cidrs) or _looked_up(ctx, r, cidr):
                continue
            yield (f"ingress from {cidr}, which is neither the endpoint VPC's nor an associated VPC's CIDR "
                   f"({', '.join(ctx.api_cidrs) or 'none'})")


def _looked_up(ctx: Context, r: Resource, cidr: str) -> bool:
    """An associated VPC whose CIDR the program looks up in the hub account: the pack cannot look it up, so the
    rule must be named for that VPC and its CIDR be a VPC's size (/16 to /28)."""
    net = network(cidr)
    return (net is not None and net.version == 4 and 16 <= net.prefixlen <= 28
            and any(r.name.endswith(f"-from-{vpc}") for vpc in ctx.lookup_vpcs))
