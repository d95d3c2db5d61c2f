"""The AWS resource types the rules check, and kind_of: the type a resource is checked as."""
from __future__ import annotations

import re

ENDPOINT_SERVICE = "aws:ec2/vpcEndpointService:VpcEndpointService"
ENDPOINT_PRINCIPAL = "aws:ec2/vpcEndpointServiceAllowedPrinciple:VpcEndpointServiceAllowedPrinciple"
NACL_RULE = "aws:ec2/networkAclRule:NetworkAclRule"
NACL_INLINE = ("aws:ec2/networkAcl:NetworkAcl", "aws:ec2/defaultNetworkAcl:DefaultNetworkAcl")
RAM_PRINCIPAL = "aws:ram/principalAssociation:PrincipalAssociation"
TGW_ROUTE = "aws:ec2transitgateway/route:Route"
TGW_TABLE = "aws:ec2transitgateway/routeTable:RouteTable"
TGW_PEERING = ("aws:ec2transitgateway/peeringAttachment:PeeringAttachment",
               "aws:ec2transitgateway/peeringAttachmentAccepter:PeeringAttachmentAccepter")
ROUTE = "aws:ec2/route:Route"
PEERING = "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"
AWS_PROVIDER = "pulumi:providers:aws"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SG_INLINE = ("aws:ec2/securityGroup:SecurityGroup", "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
API_SIDE = "hubwright:privatelink:HubEndpoint$"  # in a URN: a child of the hub's endpoint (its security group)
ROUTE_TARGETS = ("gatewayId", "natGatewayId", "networkInterfaceId", "vpcEndpointId", "egressOnlyGatewayId",
                 "localGatewayId", "carrierGatewayId", "coreNetworkArn")  # a route's targets other than these two
_DYNAMIC = re.compile(r"pulumi-python:dynamic/(?P<module>\w+):(?P<name>\w+)")


def kind_of(type_: str) -> str:
    """The AWS type a resource is checked as. A dynamic resource named after an AWS type (`class X(Resource,
    module="ec2", name="VpcEndpointService")`) is checked as that type: a program that makes AWS calls from a
    dynamic provider stays covered, and the live test imitates a violation without the AWS plugin."""
    m = _DYNAMIC.fullmatch(type_)
    if m is None:
        return type_
    name = m["name"]
    return f"aws:{m['module']}/{name[:1].lower()}{name[1:]}:{name}"
