"""The mesh's CIDR pre-flight: what a member declares against what AWS says, before its stack runs.

The planner (stacks.mesh) refuses a member CIDR that overlaps a CIDR the HubConfig declares as the hub's. The
form is not the cloud, so before a member's stack runs this reads, through the accounts' own sessions:

- the member's VPC (DescribeVpcs in its account) and each owned pair's peer's VPC (in the peer's account): each
  declared CIDR block (spec.network.cidr and secondaryCIDRs) must be one of the VPC's CIDR blocks, or its peers
  would route a range the VPC does not have to it (Stalled, MeshCIDRNotInVPC, naming the block's field, looked at
  again every --stalled-recheck);
- the hub's VPCs (DescribeVpcs in the hub account): every CIDR block they have, secondary ones and those of an
  associated VPC declared without a CIDR included; a block of the member overlapping one is refused as the
  planner refuses a declared one (InvalidSpec, MeshCIDROverlap, naming both objects and both CIDRs);
- the route tables the stack's pair routes go into, the member's and each peer's (DescribeRouteTables in each
  account), for every pair route of its phase, built now or once its target exists (stacks.mesh.routes
  every_pair_route): a pair route strictly more specific than a route already there that is not the mesh's
  would take that route's traffic (longest prefix wins), so the cluster is Stalled (MeshRouteHijack) naming the
  table, both routes and the one that would lose (stacks.mesh.routes.route_hijacks decides). A route to a
  managed prefix list (GetManagedPrefixListEntries in the table's account: its own lists, lists shared with it
  through RAM, and the AWS-managed lists of gateway endpoints) is a route to each of its entries, and loses to a
  pair route as specific as an entry too (AWS ranks a CIDR route above a prefix-list route of one length); a
  list that cannot be read stalls every pair route into its table.

Nothing runs while any of these holds; refusing never touches the stack.
"""
from __future__ import annotations

from automation.adapters.aws.sessions import AwsSessions
from automation.adapters.aws.lookups import hub_vpc_cidrs, routes_in, vpc_cidrs
from stacks.errors import FieldError, NeedsAttention
from stacks.inputs import StackInputs
from stacks.names import MESH_LABEL
from stacks.mesh.blocks import PRIMARY_FIELD
from stacks.mesh.hub_cidrs import HubCidrs, hub_overlap, looked_up_cidrs, vpc_cidr_problem
from stacks.mesh.routes import every_pair_route, hijacking_routes
from stacks.mesh.share import HubVpc, MeshShare


class MeshCidrPreflight:
    """A reconcile guard (automation.service.clusters.Guard) for a member of a mesh group."""

    def __init__(self, sessions: AwsSessions):
        self.sessions = sessions

    def __call__(self, applied: StackInputs | None, desired: StackInputs) -> None:
        share = desired.mesh
        if share is None or share.limits is None:
            return
        self._vpcs(desired, share)
        self._hub(desired, share, share.limits.hub_vpcs)
        self._routes(desired, share)

    def _vpcs(self, desired: StackInputs, share: MeshShare) -> None:
        ref = f"HubCluster {desired.key}"
        for member in (share.member, *(pair.peer for pair in share.pairs)):
            blocks = vpc_cidrs(self.sessions, member.target, member.vpc_id, operation="mesh-cidrs",
                               cluster=desired.name, namespace=desired.namespace)
            found = vpc_cidr_problem(member, blocks)
            if found is None:
                continue
            field, problem = found
            if member.key == share.member.key:
                raise NeedsAttention(str(FieldError(ref, field, problem)), reason="MeshCIDRNotInVPC")
            raise NeedsAttention(str(FieldError(
                ref, f"metadata.labels[{MESH_LABEL}]",
                f"its peer HubCluster {member.key} in mesh group {share.group} declares what AWS does not say: "
                f"{problem}; no pair route to it is written until it does")), reason="MeshCIDRNotInVPC")

    def _hub(self, desired: StackInputs, share: MeshShare, vpcs: tuple[HubVpc, ...]) -> None:
        if not vpcs:
            return
        found = hub_vpc_cidrs(self.sessions, desired.hub, vpcs, operation="mesh-cidrs")
        owned = HubCidrs(looked_up_cidrs(vpcs, found))
        for cidr, field in share.member.blocks:
            refused = hub_overlap(f"HubCluster {desired.key}", cidr, owned, share.group, field=field)
            if refused is not None:
                raise refused

    def _routes(self, desired: StackInputs, share: MeshShare) -> None:
        planned = every_pair_route(share)  # the hijack check's: built now or later
        if not planned:
            return
        targets = {share.member.key: share.member.target, **{p.peer.key: p.peer.target for p in share.pairs}}
        found = {}
        for key, target in targets.items():
            tables = {route.table for route in planned if route.member == key}
            found.update(routes_in(self.sessions, target, tables, operation="mesh-routes", cluster=desired.name,
                                   namespace=desired.namespace))
        hijacks = hijacking_routes(share, found)
        if hijacks:
            # The field of the first of this member's own blocks a hijacking route leads to.
            own = dict(share.member.blocks)
            field = next((own[route.cidr] for route, _ in hijacks if route.to == share.member.key), PRIMARY_FIELD)
            raise NeedsAttention(
                f"HubCluster {desired.key}: {field}: " + "; ".join(why for _, why in hijacks)
                + ". Nothing ran: a mesh route never takes traffic from a route that is not the mesh's (declare "
                  "another CIDR, remove the route, or have the hub administrator cover its range with "
                  f"HubConfig spec.mesh.groups.{share.group}.memberCIDRs)", reason="MeshRouteHijack")
