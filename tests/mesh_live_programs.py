"""A mesh pair's resources as dynamic stand-ins, for the live test of what a failed pair run tells whom
(test_peer_disclosure_live.py).

Names, types (module and name: the policy pack checks them as the AWS types) and props are those
components.mesh.MeshPeering registers for each pair the stack owns: the peering `mesh-<pair>` (requester, the owner's
account), its accepter `mesh-<pair>-accept` (the peer's account), and a route per route table of both members to
each block of the other member, `mesh-<pair>-<table>`. The owner's side is written into a directory (its "cloud");
the peer's routes go where the AWS provider would send them, EC2 (moto's) in the peer's account reached through the
peer's role with the session name the stack's provider uses, so a failure there is the API's own error, wrapped as
the AWS provider wraps a failed CreateRoute. `peer_routes=False`: the peer's routes are left out, as a bug would
leave them, for the policy pack's `peerings-routed-both-sides` to find.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

import pulumi
from pulumi.dynamic import Resource

from doubles.providers import PairProvider
from stacks.inputs import StackInputs
from stacks.mesh.blocks import block_suffix
from stacks.mesh.share import MeshMember


class VpcPeeringConnection(Resource, module="ec2", name="VpcPeeringConnection"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(PairProvider(), name, props, opts)


class VpcPeeringConnectionAccepter(Resource, module="ec2", name="VpcPeeringConnectionAccepter"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(PairProvider(), name, props, opts)


class Route(Resource, module="ec2", name="Route"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(PairProvider(), name, props, opts)


def pair_stand_ins(inputs: StackInputs, *, cloud: str, endpoint: str, peer_routes: bool = True) -> Mapping[str, Any]:
    """The pairs `inputs` owns, as MeshPeering builds them (module docstring); `endpoint`: the peer side's EC2."""
    Path(cloud).mkdir(parents=True, exist_ok=True)
    share = inputs.mesh
    assert share is not None and share.pairs, f"{inputs.key} owns no pair"
    owner = share.member
    for pair in share.pairs:
        name, peer = f"mesh-{pair.name}", pair.peer
        pcx = "pcx-" + hashlib.sha256(pair.name.encode()).hexdigest()[:17]
        peering = VpcPeeringConnection(name, {"cloud": cloud, "kind": "peering", "name": name, "id": pcx,
                                              "vpcId": owner.vpc_id, "peerVpcId": peer.vpc_id,
                                              "peerOwnerId": peer.target.account_id,
                                              "peerRegion": peer.target.region})
        accepter = VpcPeeringConnectionAccepter(f"{name}-accept", {
            "cloud": cloud, "kind": "accepter", "name": f"{name}-accept", "vpcPeeringConnectionId": peering.id})
        after = pulumi.ResourceOptions(depends_on=[peering, accepter])
        for member, other, remote in ((owner, peer, False), (peer, owner, True)):
            if remote and not peer_routes:
                continue
            for table in member.route_table_ids:
                for cidr in other.cidrs:
                    route = f"{name}-{table}{block_suffix(other.cidrs, cidr)}"
                    Route(route, {**_side(member, remote, endpoint), "cloud": cloud, "kind": "route", "name": route,
                                  "routeTableId": table, "destinationCidrBlock": cidr,
                                  "vpcPeeringConnectionId": peering.id}, after)
    return {"cluster": inputs.key, "inputsDigest": inputs.digest()}


def _side(member: MeshMember, remote: bool, endpoint: str) -> dict[str, Any]:
    if not remote:
        return {"endpoint": ""}
    target = member.target
    return {"endpoint": endpoint, "roleArn": target.role_arn, "sessionName": target.session_name,
            "region": target.region}
