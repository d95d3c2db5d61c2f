"""Which input changes make the AWS provider replace a resource rather than update it in place. Pure.

Where the table comes from: pulumi-aws (requirements.txt pins 7.51.1) is bridged from the Terraform AWS provider
(v6), and the bridge asks the Terraform resource for its diff: an attribute marked `ForceNew: true` in the resource's
schema (a `RequiresReplace()` plan modifier in the resources written with the plugin framework, such as
aws_vpc_security_group_ingress_rule) comes back to the Pulumi engine as a replace. REPLACE_ON lists those
attributes, under their Pulumi (camelCase) names, for every custom resource type the stack programs create
(components/privatelink.py, components/mesh.py, components/transit.py, components/providers.py). It is
transcribed by hand from the provider's source (internal/service/{ec2,ram,route53}/…): check it when the pin moves.

Where the provider decides at diff time, REPLACE_WHEN holds the condition: an aws_ec2_transit_gateway whose
defaultRouteTableAssociation or defaultRouteTablePropagation goes from "disable" to "enable" is replaced (the
schema's CustomizeDiff, customdiff.ForceNewIfChange), the other way is an update. (Its amazonSideAsn is updated in
place since the provider's v4.36: ModifyTransitGateway takes it; it is no longer ForceNew.)

An explicit provider (pulumi:providers:aws) whose region or allowedAccountIds change is replaced, and with it every
resource it manages. An AWS resource's own `region` input (pulumi-aws v7 takes one on every resource; the programs
set none, their providers say where) forces a replace too: nothing moves to another region in place.

A type missing from the table is an error: forces_replace raises UnknownType naming it, so a resource type added to
a program cannot silently read as an in-place update; give it an entry (an empty set when none of its inputs forces
a replace). Component resources (hubwright:…) have no inputs of their own and are never replaced by a provider: they
need no entry.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

COMPONENT_PREFIX = "hubwright:"  # the programs' component resources: no provider, no inputs
AWS_REGION_INPUT = "region"  # on any aws: resource, where it lives: a change is a replace


def _table(entries: dict[str, tuple[str, ...]]) -> Mapping[str, frozenset[str]]:
    return MappingProxyType({type_: frozenset(props) for type_, props in entries.items()})


REPLACE_ON: Mapping[str, frozenset[str]] = _table({
    # components/privatelink.py, components/mesh.py
    "aws:ec2/route:Route": (
        "routeTableId", "destinationCidrBlock", "destinationIpv6CidrBlock", "destinationPrefixListId"),
    "aws:ec2/securityGroup:SecurityGroup": ("name", "namePrefix", "description", "vpcId"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("vpcId", "serviceName", "vpcEndpointType", "serviceRegion"),
    "aws:ec2/vpcEndpointService:VpcEndpointService": (),
    "aws:ec2/vpcPeeringConnection:VpcPeeringConnection": ("peerOwnerId", "peerRegion", "peerVpcId", "vpcId"),
    "aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter": ("vpcPeeringConnectionId",),
    "aws:route53/record:Record": ("zoneId", "name"),
    "aws:route53/zone:Zone": ("name", "delegationSetId"),
    "aws:route53/zoneAssociation:ZoneAssociation": ("vpcId", "vpcRegion", "zoneId"),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ("securityGroupId",),
    # components/transit.py
    "aws:ec2transitgateway/peeringAttachment:PeeringAttachment": (
        "peerAccountId", "peerRegion", "peerTransitGatewayId", "transitGatewayId"),
    "aws:ec2transitgateway/peeringAttachmentAccepter:PeeringAttachmentAccepter": ("transitGatewayAttachmentId",),
    "aws:ec2transitgateway/route:Route": (
        "destinationCidrBlock", "transitGatewayAttachmentId", "transitGatewayRouteTableId", "blackhole"),
    "aws:ec2transitgateway/routeTable:RouteTable": ("transitGatewayId",),
    "aws:ec2transitgateway/routeTableAssociation:RouteTableAssociation": (
        "transitGatewayAttachmentId", "transitGatewayRouteTableId"),
    "aws:ec2transitgateway/transitGateway:TransitGateway": ("multicastSupport",),  # and REPLACE_WHEN's two
    "aws:ec2transitgateway/vpcAttachment:VpcAttachment": ("transitGatewayId", "vpcId"),
    "aws:ec2transitgateway/vpcAttachmentAccepter:VpcAttachmentAccepter": ("transitGatewayAttachmentId",),
    "aws:ram/principalAssociation:PrincipalAssociation": ("principal", "resourceShareArn"),
    "aws:ram/resourceAssociation:ResourceAssociation": ("resourceArn", "resourceShareArn"),
    "aws:ram/resourceShare:ResourceShare": ("permissionArns",),
    "aws:ram/resourceShareAccepter:ResourceShareAccepter": ("shareArn",),
    # components/providers.py
    "pulumi:providers:aws": ("region", "allowedAccountIds"),
})


def _disable_to_enable(old: Any, new: Any) -> bool:
    """The transit gateway's default route table flags: "enable" when not given (the provider's default)."""
    return (old or "enable") == "disable" and (new or "enable") == "enable"


REPLACE_WHEN: Mapping[str, Mapping[str, Callable[[Any, Any], bool]]] = MappingProxyType({
    "aws:ec2transitgateway/transitGateway:TransitGateway": MappingProxyType({
        "defaultRouteTableAssociation": _disable_to_enable,
        "defaultRouteTablePropagation": _disable_to_enable,
    }),
})


class UnknownType(KeyError):
    """A resource type REPLACE_ON has no entry for: whether a change replaces it is not known."""

    def __init__(self, type_: str):
        super().__init__(type_)
        self.type = type_

    def __str__(self) -> str:
        return (f"{self.type}: no entry in stacks.plandiff.replace.REPLACE_ON, so whether a change replaces it is "
                f"not known; add the inputs that force a replace (the provider's ForceNew attributes)")


_UNKNOWN: Any = object()  # forces_replace without the values: a conditional rule counts as a replace


def forces_replace(type_: str, prop: str, old: Any = _UNKNOWN, new: Any = _UNKNOWN) -> bool:
    """Whether a change of input `prop` (from `old` to `new`, when given) makes the provider replace a `type_`.
    Raises UnknownType for a custom resource type REPLACE_ON does not list; a component type is never replaced."""
    if type_.startswith(COMPONENT_PREFIX):
        return False
    props = REPLACE_ON.get(type_)
    if props is None:
        raise UnknownType(type_)
    if prop in props or (prop == AWS_REGION_INPUT and type_.startswith("aws:")):
        return True
    when = REPLACE_WHEN.get(type_, {}).get(prop)
    if when is None:
        return False
    return True if old is _UNKNOWN or new is _UNKNOWN else when(old, new)
