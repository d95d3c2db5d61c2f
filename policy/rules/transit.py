"""A transit stack: its RAM share names only member accounts, its gateways' route tables route only their group."""
from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from policy.rules.cidrs import within
from policy.rules.kinds import RAM_PRINCIPAL, TGW_PEERING, TGW_ROUTE, TGW_TABLE
from policy.rules.view import Config, Context, Resource
from stacks.transit import GROUP_TAG

def ram_principals(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if r.kind != RAM_PRINCIPAL:
        return
    principal = str(r.props.get("principal") or "")
    if principal not in ctx.share_principals:
        allowed = ", ".join(ctx.share_principals) or "none: it is not a transit stack with members in other accounts"
        yield (f"the share names principal {principal!r}, which is not a member account of stack {ctx.stack} "
               f"(it may name {allowed})")


def tgw_routes(ctx: Context, resources: Sequence[Resource], _config: Config) -> Iterator[tuple[str | None, str]]:
    routes = [r for r in resources if r.kind == TGW_ROUTE]
    if not routes:
        return
    tables = {str(r.props.get("id")): _group_tag(r) for r in resources if r.kind == TGW_TABLE}
    peerings = {str(r.props.get("id")): _group_tag(r) for r in resources if r.kind in TGW_PEERING}
    for r in routes:
        table, dest = str(r.props.get("transitGatewayRouteTableId")), str(r.props.get("destinationCidrBlock") or "")
        attachment = str(r.props.get("transitGatewayAttachmentId") or "")
        group = ctx.tgw_groups.get(tables.get(table) or "")
        if group is None:
            yield r.urn, f"route table {table} is not the route table of a mesh group of stack {ctx.stack}"
        elif r.props.get("blackhole") or not attachment:
            yield r.urn, f"the route to {dest} in mesh group {group.group}'s table has no attachment"
        elif attachment in group.attachments:
            cluster, cidrs = group.attachments[attachment]
            if not within(dest, cidrs):
                declared = f"CIDR is {cidrs[0]}" if len(cidrs) == 1 else f"CIDR blocks are {', '.join(cidrs)}"
                yield r.urn, (f"the route to {dest} targets {cluster}'s attachment {attachment}, whose declared "
                              f"{declared}: a member's attachment is routed only its own CIDR")
        elif peerings.get(attachment) == group.group:
            region = r.provider.props.get("region") if r.provider is not None else None
            remote = group.remotes.get(str(region), ())
            if not within(dest, remote):
                yield r.urn, (f"the route to {dest} targets mesh group {group.group}'s peering attachment "
                              f"{attachment}, but is inside no CIDR of its members outside {region} "
                              f"({', '.join(remote) or 'none'})")
        else:
            yield r.urn, (f"the route to {dest} in mesh group {group.group}'s table targets attachment {attachment}, "
                          f"which is neither a member's attachment of that group nor its peering attachment")


def _group_tag(r: Resource) -> str | None:
    tags = r.props.get("tags") or {}
    return tags.get(GROUP_TAG) if isinstance(tags, Mapping) else None
