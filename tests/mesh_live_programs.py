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

import boto3
import pulumi
from botocore.exceptions import ClientError
from pulumi.dynamic import CreateResult, Resource, ResourceProvider

from stacks.inputs import StackInputs
from stacks.mesh.blocks import block_suffix
from stacks.mesh.share import MeshMember


class PairProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        if props.get("endpoint"):  # the peer's side: its account's API
            _create_route(props)
        else:
            (Path(props["cloud"]) / props["name"]).write_text(props["kind"])
        outs = {**props, "id": props["id"]} if props.get("id") else dict(props)
        return CreateResult(id_=props.get("id") or props["name"], outs=outs)


def _create_route(props: Mapping[str, Any]) -> None:
    sts = boto3.client("sts", endpoint_url=props["endpoint"], region_name=props["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    creds = sts.assume_role(RoleArn=props["roleArn"], RoleSessionName=props["sessionName"])["Credentials"]
    ec2 = boto3.client("ec2", endpoint_url=props["endpoint"], region_name=props["region"],
                       aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                       aws_session_token=creds["SessionToken"])
    try:
        ec2.create_route(RouteTableId=props["routeTableId"], DestinationCidrBlock=props["destinationCidrBlock"],
                         VpcPeeringConnectionId=props["vpcPeeringConnectionId"])
    except ClientError as err:  # terraform-provider-aws: "creating Route in Route Table (%s) with destination (%s): %w"
        raise RuntimeError(f"creating Route in Route Table ({props['routeTableId']}) with destination "
                           f"({props['destinationCidrBlock']}): {err}") from None


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
