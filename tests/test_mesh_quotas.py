"""The mesh quota pre-flight against moto in server mode: what is already in a member's VPC counts too."""
from __future__ import annotations

import pytest

from automation.adapters.aws.mesh_quotas import MeshQuotaPreflight, look, problems
from stacks.errors import NeedsAttention
from stacks.inputs import StackInputs
from stacks.resolve import resolve_all
from stacks.transit import MeshStatus, TransitOutputs, TransitRegionOutputs
from doubles.factories import fleet
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _setup_session, sessions  # noqa: F401 - fixture
from tests.test_mesh import hub, member


@pytest.fixture
def vpc(moto):
    """In the member's account: a VPC, a route table with 3 routes of its own, a SG with 2 rules of its own."""
    session = _setup_session(moto, CLUSTER_ACCOUNT)
    ec2 = session.client("ec2", endpoint_url=moto.url)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    for cidr in ("0.0.0.0/0", "192.168.0.0/24", "192.168.1.0/24"):
        ec2.create_route(RouteTableId=table, DestinationCidrBlock=cidr, GatewayId=gateway)
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="10.1.0.0/16", GatewayId=gateway)  # the mesh's CIDR
    sg = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "192.168.0.0/24"}]},
        {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "192.168.0.0/24"}]},
        {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "10.1.0.0/16", "Description": "hubwright mesh core: from x"}]},
    ])
    return {"ec2": ec2, "vpc": vpc, "table": table, "sg": sg}


def inputs(vpc, *, mesh: dict | None = None, members: int = 2, topology: str = "peering") -> StackInputs:
    """Member c00 (in the moto VPC) and members-1 peers, in a group core with `mesh` settings."""
    h = hub(mesh={**(mesh or {}), "groups": {"core": {"topology": topology}}})
    subnets = [{"subnetID": "subnet-0a", "availabilityZone": "us-east-1a"}]
    first = member(0, account=CLUSTER_ACCOUNT, vpcID=vpc["vpc"], routeTableIDs=[vpc["table"]],
                   nodeSecurityGroupIDs=[vpc["sg"]], transitSubnets=subnets)
    peers = [member(i, transitSubnets=subnets) for i in range(1, members)]
    status = MeshStatus({}, {f"_tgw_111111111111": TransitOutputs(regions={
        r: TransitRegionOutputs(transit_gateway_id="tgw-0group") for r in ("us-east-1", "eu-west-1")})}, {})
    resolved = resolve_all(fleet(h, (first, *peers), mesh_status=status))
    return resolved.inputs["acme/c00"]


def no_lists(ids):
    """The sizes of the prefix lists the tables route to (MeshQuotaPreflight reads them): the fixture has none."""
    raise AssertionError(f"no route to a prefix list was expected, found {sorted(ids)}")


def test_only_what_is_not_the_meshs_is_counted(vpc):
    found = look(vpc["ec2"], inputs(vpc).mesh, no_lists)
    assert found.routes == {vpc["table"]: 3}  # local and the mesh's 10.1.0.0/16 left out
    assert found.rules == {vpc["sg"]: 2}  # the "hubwright mesh" rule left out
    assert found.other_attachments == 0


def test_under_the_quotas_the_guard_passes(vpc, sessions):  # noqa: F811
    assert MeshQuotaPreflight(sessions)(None, inputs(vpc)) is None


def test_routes_already_in_a_table_count_against_routes_per_table_with_the_numbers(vpc, sessions):  # noqa: F811
    desired = inputs(vpc, mesh={"routesPerTable": 4}, members=3)  # 3 there + 2 peers = 5 > 4
    with pytest.raises(NeedsAttention) as caught:
        MeshQuotaPreflight(sessions)(None, desired)
    assert caught.value.reason == "MeshLimitExceeded"
    assert f"route table {vpc['table']} would hold 5 routes: 3 already there + 2 from mesh group core; " \
           f"routesPerTable is 4" in str(caught.value)


def test_rules_already_on_a_group_count_against_rules_per_security_group(vpc):
    share = inputs(vpc, mesh={"accountQuotas": {CLUSTER_ACCOUNT: {"rulesPerSecurityGroup": 3}}}, members=3).mesh
    assert problems(share, look(vpc["ec2"], share, no_lists)) == [
        f"security group {vpc['sg']} would hold 4 inbound rules: 2 already there + 2 from mesh group core; "
        f"rulesPerSecurityGroup is 3"]


def test_attachments_to_other_gateways_count_against_transit_gateways_per_vpc(vpc):
    ec2 = vpc["ec2"]
    subnet = ec2.create_subnet(VpcId=vpc["vpc"], CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")
    other = ec2.create_transit_gateway(Description="someone else's")["TransitGateway"]["TransitGatewayId"]
    ec2.create_transit_gateway_vpc_attachment(TransitGatewayId=other, VpcId=vpc["vpc"],
                                              SubnetIds=[subnet["Subnet"]["SubnetId"]])
    share = inputs(vpc, mesh={"transitGatewaysPerVPC": 1}, topology="transitGateway").mesh
    found = look(ec2, share, no_lists)
    assert found.other_attachments == 1
    assert problems(share, found) == [
        f"VPC {vpc['vpc']} would have 2 Transit Gateway attachments: 1 to other gateways + mesh group core's; "
        f"transitGatewaysPerVPC is 1"]
    assert problems(inputs(vpc, topology="transitGateway").mesh, found) == []  # the default 5


def test_a_route_to_a_prefix_list_counts_at_the_lists_max_entries(vpc, sessions):  # noqa: F811
    """AWS counts a route to a customer-managed prefix list at the list's MaxEntries against routes per table,
    however many entries it holds now; a gateway endpoint's route to an AWS-managed list (which has no MaxEntries)
    counts 1, the weight AWS gives the S3 and DynamoDB lists."""
    ec2 = vpc["ec2"]
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpnGatewayId=vgw, VpcId=vpc["vpc"])
    made = ec2.create_managed_prefix_list(PrefixListName="on-premises", AddressFamily="IPv4", MaxEntries=20,
                                          Entries=[{"Cidr": "172.20.0.0/16", "Description": "data centre"}])
    ec2.create_route(RouteTableId=vpc["table"], DestinationPrefixListId=made["PrefixList"]["PrefixListId"],
                     GatewayId=vgw)
    ec2.create_vpc_endpoint(VpcId=vpc["vpc"], ServiceName="com.amazonaws.us-east-1.s3", VpcEndpointType="Gateway",
                            RouteTableIds=[vpc["table"]])
    desired = inputs(vpc, mesh={"routesPerTable": 25}, members=3)  # 3 + 20 + 1 there, + 2 peers = 26 > 25
    with pytest.raises(NeedsAttention) as caught:
        MeshQuotaPreflight(sessions)(None, desired)
    assert caught.value.reason == "MeshLimitExceeded"
    assert f"route table {vpc['table']} would hold 26 routes: 24 already there + 2 from mesh group core; " \
           f"routesPerTable is 25" in str(caught.value)
    assert MeshQuotaPreflight(sessions)(None, inputs(vpc, mesh={"routesPerTable": 26}, members=3)) is None
