"""The mesh resources one stack owns (its MeshShare), across accounts and regions.

    Mesh (hubwright:mesh:Mesh)                    one per member stack
    ├── SecurityGroup "hubwright-mesh-<stack>"     "dedicated" mode only: this member's own group
    ├── TransitLink (components.transit)            Transit Gateway phases: this member's attachment
    └── MeshPeering (hubwright:mesh:MeshPeering)  one per pair this stack owns, named from the pair
        ├── VpcPeeringConnection                    while the group's phase has peerings: requester here
        ├── VpcPeeringConnectionAccepter            the peer's account/region (the peer's provider)
        ├── Route ×(route tables of both members × the other's blocks)  to each CIDR block of the other
        │                                           member, via the peering or via the gateway of the table's
        │                                           region (`routes_via`); none via a gateway with
        │                                           summaryCIDRs (TransitLink's cover it), and none whose
        │                                           target is not made yet (stacks.mesh.routes.pair_routes)
        └── SecurityGroupIngressRule ×(groups × rules of both members × the other's blocks)  from the other
                                                    member's CIDR blocks only

A route or rule for a member's primary block has the name it had before members had several; one for another
block adds the block to it (stacks.mesh.blocks.block_suffix).

A route keeps its name whichever its target, so moving a group between topologies updates each route's
target in place (no moment without a route). In peering phases routes and rules depend on the peering and
the accepter, so `pulumi destroy` (or the pair leaving the share) removes them first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_aws as aws

from components.providers import invoke_opts
from components.transit import TransitLink
from stacks.mesh.blocks import block_suffix
from stacks.mesh.labels import rule_label
from stacks.mesh.routes import PlannedRoute, pair_routes
from stacks.mesh.share import MeshMember, MeshPair, MeshShare


@dataclass(frozen=True)
class MeshProviders:
    own: aws.Provider | None  # this member's account and region; None when it builds nothing there
    peers: Mapping[str, aws.Provider]  # peer cluster key → its account and region

    def own_side(self, stack: str) -> aws.Provider:
        """The member's own provider, which stacks.inputs.stack_targets gives whenever anything is built there
        (never the ambient default provider)."""
        if self.own is None:
            raise ValueError(f"stack {stack}: stacks.inputs.stack_targets gives no provider for its mesh side")
        return self.own


def _side(member: MeshMember) -> dict[str, Any]:
    side: dict[str, Any] = {"cluster": member.key, "vpcId": member.vpc_id, "cidr": member.cidrs[0],
                            "account": member.target.account_id, "region": member.target.region}
    if len(member.cidrs) > 1:
        side["secondaryCidrs"] = list(member.cidrs[1:])
    return side


def _target(route: PlannedRoute, link: pulumi.Input[str] | None) -> tuple[str, str, pulumi.Input[str]]:
    """Where a pair route points, as (Route argument, output key, ID): the gateway of its table's region, or the
    pair's peering through its accepter (`link`, None when the phase has no peerings)."""
    if route.via == "transitGateway" and route.gateway is not None:
        return "transit_gateway_id", "transitGatewayId", route.gateway
    if route.via == "peering" and link is not None:
        return "vpc_peering_connection_id", "peeringId", link
    raise ValueError(f"mesh pair {route.pair}: its route in {route.table} to {route.cidr} has no {route.via} target "
                     f"yet, and stacks.mesh.routes.pair_routes lists only routes that have one")


class MeshPeering(pulumi.ComponentResource):
    """One pair: the peering, its acceptance, and both members' routes and ingress rules."""

    def __init__(self, name: str, *, share: MeshShare, pair: MeshPair,
                 owner_groups: Sequence[tuple[str, pulumi.Input[str]]], providers: tuple[aws.Provider, aws.Provider],
                 opts: pulumi.ResourceOptions | None = None):
        # The type says "peering" for the URNs' sake: existing stacks keep every resource when a group moves.
        super().__init__("hubwright:mesh:MeshPeering", name, None, opts)
        group, owner, rules = share.group, share.member, share.rules
        peer = pair.peer
        own_provider, peer_provider = providers
        tags = {"Name": pair.name, "hubwright.io/mesh-group": group}
        self.peering: aws.ec2.VpcPeeringConnection | None = None
        self.accepter: aws.ec2.VpcPeeringConnectionAccepter | None = None
        after: list[pulumi.Resource] = []
        link: pulumi.Input[str] | None = None
        if share.peerings:
            self.peering, self.accepter = self._peer(name, owner, peer, tags, own_provider, peer_provider)
            # Through the accepter's output: nothing routes over a peering that is not accepted yet.
            link = self.accepter.vpc_peering_connection_id
            after = [self.peering, self.accepter]
        routes = [route for route in pair_routes(share) if route.pair == pair.name]  # the ones built now

        self.routes: list[dict[str, Any]] = []
        self.ingress: list[dict[str, Any]] = []
        peer_groups = self._peer_groups(peer, peer_provider)
        for member, other, provider, groups in (
            (owner, peer, own_provider, owner_groups),
            (peer, owner, peer_provider, peer_groups),
        ):
            child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=after)
            for route in (r for r in routes if r.member == member.key):
                argument, key, value = _target(route, link)
                aws.ec2.Route(
                    f"{name}-{route.table}{block_suffix(other.cidrs, route.cidr)}",
                    route_table_id=route.table,
                    destination_cidr_block=route.cidr,
                    opts=child,
                    **{argument: value},
                )
                self.routes.append({"cluster": member.key, "routeTableId": route.table, "destination": route.cidr,
                                    key: value})
            for label, group_id in groups:
                for rule in rules:
                    ports = {} if rule.protocol == "-1" else {"from_port": rule.from_port, "to_port": rule.to_port}
                    for cidr in other.cidrs:
                        aws.vpc.SecurityGroupIngressRule(
                            f"{name}-{label}-{rule_label(rule)}{block_suffix(other.cidrs, cidr)}",
                            security_group_id=group_id,
                            ip_protocol=rule.protocol,
                            cidr_ipv4=cidr,
                            description=f"hubwright mesh {group}: from {other.key}",
                            tags=tags,  # Name: the pair (the description says from whom); fits 256
                            opts=child,
                            **ports,
                        )
                        entry: dict[str, Any] = {"cluster": member.key, "securityGroupId": group_id, "source": cidr,
                                 "protocol": rule.protocol}
                        if ports:
                            entry.update(fromPort=rule.from_port, toPort=rule.to_port)
                        self.ingress.append(entry)

        self.outputs = {
            "name": pair.name,
            "id": self.peering.id if self.peering is not None else None,
            "state": self.accepter.accept_status if self.accepter is not None else None,
            "requester": _side(owner),
            "accepter": _side(peer),
            "routes": self.routes,
            "ingress": self.ingress,
        }
        self.register_outputs(self.outputs)

    def _peer(self, name: str, owner: MeshMember, peer: MeshMember, tags: dict[str, str],
              own_provider: aws.Provider, peer_provider: aws.Provider) -> tuple[aws.ec2.VpcPeeringConnection,
                                                                                aws.ec2.VpcPeeringConnectionAccepter]:
        """The peering and its acceptance."""
        peering = aws.ec2.VpcPeeringConnection(
            name,
            vpc_id=owner.vpc_id,
            peer_vpc_id=peer.vpc_id,
            peer_owner_id=peer.target.account_id,
            peer_region=peer.target.region,
            tags={**tags, "hubwright.io/side": "requester"},
            opts=pulumi.ResourceOptions(parent=self, provider=own_provider),
        )
        accepter = aws.ec2.VpcPeeringConnectionAccepter(
            f"{name}-accept",
            vpc_peering_connection_id=peering.id,
            auto_accept=True,
            tags={**tags, "hubwright.io/side": "accepter"},
            opts=pulumi.ResourceOptions(parent=self, provider=peer_provider),
        )
        return peering, accepter

    def _peer_groups(self, peer: MeshMember, provider: aws.Provider) -> list[tuple[str, pulumi.Input[str]]]:
        if peer.dedicated_security_group is None:
            return [(sg, sg) for sg in peer.security_group_ids]
        # The peer's own stack made it (the peer joined first); look it up by name in the peer's VPC.
        found = aws.ec2.get_security_group_output(name=peer.dedicated_security_group, vpc_id=peer.vpc_id,
                                                  opts=invoke_opts(self, provider))
        return [(f"{peer.stack}-mesh-sg", found.id)]


class Mesh(pulumi.ComponentResource):
    """This stack's share of one mesh group."""

    def __init__(self, name: str, share: MeshShare, providers: MeshProviders,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:mesh:Mesh", name, None, opts)
        member = share.member
        self.security_group: aws.ec2.SecurityGroup | None = None
        if member.dedicated_security_group is not None:
            self.security_group = aws.ec2.SecurityGroup(
                member.dedicated_security_group,  # the resource name is the AWS name: peers look it up by it
                name=member.dedicated_security_group,
                vpc_id=member.vpc_id,
                description=f"hubwright: mesh group {share.group}, traffic from peer clusters",
                tags={"Name": member.dedicated_security_group, "hubwright.io/mesh-group": share.group},
                opts=pulumi.ResourceOptions(parent=self, provider=providers.own_side(name)),
            )
            own_groups = [(f"{member.stack}-mesh-sg", self.security_group.id)]
        else:
            own_groups = [(sg, sg) for sg in member.security_group_ids]

        self.peerings = [
            MeshPeering(
                f"mesh-{pair.name}",
                share=share,
                pair=pair,
                owner_groups=own_groups,
                providers=(providers.own_side(name), providers.peers[pair.peer.key]),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for pair in share.pairs
        ]
        self.transit: TransitLink | None = None
        if share.attachment is not None:
            self.transit = TransitLink(f"{name}-tgw", group=share.group, member=member, attachment=share.attachment,
                                       provider=providers.own_side(name), opts=pulumi.ResourceOptions(parent=self))
        self.outputs = {
            "group": share.group,
            "member": member.key,
            # This member and the peers whose pairs this stack owns; the whole group is stacks.mesh.plan.plan_mesh.
            "members": [_side(member), *(_side(pair.peer) for pair in share.pairs)],
            "securityGroupId": self.security_group.id if self.security_group is not None else None,
            "peerings": [p.outputs for p in self.peerings if p.peering is not None],
            "routes": [*(route for p in self.peerings for route in p.routes),
                       *(self.transit.routes if self.transit is not None else ())],
            "transitAttachment": self.transit.attachment.id if self.transit is not None else None,
        }
        self.register_outputs(self.outputs)
