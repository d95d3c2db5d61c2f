"""The PrivateLink stack program under Pulumi's mock runtime: what `pulumi up` would register."""
import json

import pytest

from automation.adapters.engine.plan import PlanError, plan_stack
from automation.adapters.engine.standins import StandIns

from doubles.factories import HUB_ACCOUNT, HUB_ROLE, cluster, hub, resolve_one
from doubles.plans import RecordedLookups, destroy_order

SERVICE = "aws:ec2/vpcEndpointService:VpcEndpointService"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ZONE = "aws:route53/zone:Zone"
RECORD = "aws:route53/record:Record"
ASSOC = "aws:route53/zoneAssociation:ZoneAssociation"
SG = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
PROVIDER = "pulumi:providers:aws"


def plan(c=None, h=None, standins=None):
    return plan_stack(resolve_one(c or cluster(), h or hub()), standins)


def test_endpoint_service_lives_in_the_cluster_account_and_admits_only_the_hub_principal():
    p = plan()
    svc = p.one(SERVICE)
    assert (svc.account, svc.region) == ("222222222222", "us-east-1")
    assert svc.inputs["acceptanceRequired"] is False
    assert svc.inputs["allowedPrincipals"] == [HUB_ROLE]
    nlb_arn = svc.inputs["networkLoadBalancerArns"][0]
    assert nlb_arn.startswith("arn:aws:elasticloadbalancing:us-east-1:222222222222:loadbalancer/net/prod-1-x7k2p-int/")


def test_hub_side_resources_live_in_the_hub_account():
    p = plan()
    for type_ in (ENDPOINT, SG, ZONE, RECORD, ASSOC):
        for res in p.of_type(type_):
            assert (res.account, res.region) == (HUB_ACCOUNT, "us-east-1"), res.name


def test_providers_are_explicit_per_account_with_assume_role_and_account_pinning():
    p = plan()
    providers = {r.name: r for r in p.of_type(PROVIDER)}
    assert set(providers) == {"aws-111111111111-us-east-1", "aws-222222222222-us-east-1"}
    cluster_p = providers["aws-222222222222-us-east-1"].inputs
    assert json.loads(cluster_p["allowedAccountIds"]) == ["222222222222"]
    [role] = json.loads(cluster_p["assumeRoles"])
    assert role == {"roleArn": "arn:aws:iam::222222222222:role/hubwright", "sessionName": "hubwright-cluster-acme.prod-1"}
    # Every AWS resource names its provider: nothing falls back to the ambient default provider.
    for res in p.resources:
        if res.custom and res.type != PROVIDER:
            assert res.provider in {r.urn for r in providers.values()}, res.name


def test_every_child_is_parented_under_the_privatelink_component():
    p = plan()
    [top] = p.of_type("hubwright:privatelink:PrivateLink")
    by_urn = {r.urn: r for r in p.resources}
    for res in p.resources:
        if res.type in (SERVICE, ENDPOINT, ZONE, RECORD, ASSOC, SG, SG_RULE):
            chain, parent = [], res.parent
            while parent in by_urn:
                chain.append(parent)
                parent = by_urn[parent].parent
            assert top.urn in chain, res.name


def test_discovers_the_hub_principal_when_none_is_configured():
    p = plan(h=hub(credentials={}))  # ambient credentials, no allowedPrincipal, no role
    # The stand-in caller is an assumed-role session; the allowed principal is the role behind it.
    assert p.one(SERVICE).inputs["allowedPrincipals"] == [f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-hub"]


def test_endpoint_uses_only_subnets_in_zones_the_service_supports_from_the_hub():
    p = plan(standins=StandIns(zones={"us-east-1": ["us-east-1a", "us-east-1c"]}))
    ep = p.one(ENDPOINT)
    assert ep.inputs["subnetIds"] == ["subnet-0a", "subnet-0c"]
    assert ep.inputs["vpcId"] == "vpc-0hub1"
    assert ep.inputs["vpcEndpointType"] == "Interface"
    assert ep.inputs["privateDnsEnabled"] is False


def test_no_subnet_in_a_supported_zone_is_a_clear_error():
    with pytest.raises(PlanError) as caught:
        plan(standins=StandIns(zones={"us-east-1": ["us-east-1f"]}))
    assert str(caught.value).startswith("acme.prod-1: no subnet of VPC vpc-0hub1 is in an availability zone")
    assert "supports (us-east-1f)" in str(caught.value)


def test_endpoint_security_group_admits_the_api_port_from_hub_and_associated_vpcs_only():
    h = hub(associatedVPCs=[{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "10.0.0.0/16"},
                            {"region": "eu-west-1", "vpcID": "vpc-0mgmteu"}])  # CIDR looked up
    lookups = RecordedLookups()
    p = plan(h=h, standins=lookups)
    rules = {r.inputs["cidrIpv4"]: r.inputs for r in p.of_type(SG_RULE)}
    assert len(rules) == 3
    assert "10.100.0.0/16" in rules and "10.0.0.0/16" in rules
    # The CIDR is looked up in the VPC's own region, through the hub provider of the endpoint's region: no
    # provider (plugin process, AssumeRole) for eu-west-1, where the stack builds nothing.
    assert ("aws:ec2/getVpc:getVpc", (HUB_ACCOUNT, "us-east-1"), "eu-west-1") in lookups.calls
    assert {p_.name for p_ in p.of_type(PROVIDER)} == {"aws-111111111111-us-east-1", "aws-222222222222-us-east-1"}
    for rule in rules.values():
        assert (rule["ipProtocol"], rule["fromPort"], rule["toPort"]) == ("tcp", 6443, 6443)
        assert rule["cidrIpv4"] != "0.0.0.0/0"


def test_private_zone_aliases_the_api_host_to_the_regional_endpoint_name():
    p = plan()
    zone, record = p.one(ZONE), p.one(RECORD)
    assert zone.inputs["name"] == "api.prod-1.example.com"
    assert zone.inputs["vpcs"] == [{"vpcId": "vpc-0hub1", "vpcRegion": "us-east-1"}]
    assert record.inputs["name"] == "api.prod-1.example.com" and record.inputs["type"] == "A"
    [alias] = record.inputs["aliases"]
    endpoint_dns = p.outputs["privateLink"]["endpointDnsName"]
    assert alias == {"name": endpoint_dns, "zoneId": "Z7HUB3ZWFQ2W0", "evaluateTargetHealth": False}
    assert "-us-east-1a." not in endpoint_dns  # regional, not zonal
    assert [a.inputs["vpcId"] for a in p.of_type(ASSOC)] == ["vpc-0mgmt"]


def test_a_record_mode_uses_the_endpoint_ips_for_partitions_without_alias():
    p = plan(h=hub(privateLink={"dnsRecordType": "ARecord"}))
    record = p.one(RECORD)
    assert "aliases" not in record.inputs
    assert record.inputs["ttl"] == 10
    assert len(record.inputs["records"]) == 3  # one ENI per subnet
    assert all(ip.startswith("10.") for ip in record.inputs["records"])


def test_destroy_removes_zone_then_endpoint_then_service():
    order = [r.type for r in destroy_order(plan())]
    assert order.index(RECORD) < order.index(ZONE) < order.index(ENDPOINT) < order.index(SERVICE)
    assert order.index(ASSOC) < order.index(ZONE)


def test_disabling_privatelink_removes_all_three():
    p = plan(c=cluster(privateLink={"enabled": False}))
    assert not [r for r in p.resources if r.type in (SERVICE, ENDPOINT, ZONE, RECORD, ASSOC)]
    assert "privateLink" not in p.outputs


def test_new_install_attempt_keeps_names_and_points_the_service_at_the_new_nlb():
    old, new = plan(), plan(c=cluster(infraID="prod-1-second"))
    assert [r.urn for r in old.resources] == [r.urn for r in new.resources]  # nothing renamed by accident
    assert new.one(SERVICE).inputs["networkLoadBalancerArns"][0].split("/")[2] == "prod-1-second-int"
    assert (old.outputs["privateLink"]["infraID"], new.outputs["privateLink"]["infraID"]) == (
        "prod-1-x7k2p", "prod-1-second")


def test_stack_outputs_name_service_endpoint_and_zone():
    out = plan().outputs["privateLink"]
    assert out["serviceId"].startswith("vpce-svc-")
    assert out["serviceName"] == f"com.amazonaws.vpce.us-east-1.{out['serviceId']}"
    assert out["endpointId"].startswith("vpce-")
    assert out["zoneId"].startswith("Z")


def test_the_same_inputs_give_the_same_plan():
    assert plan().to_json() == plan().to_json()


def test_pulumi_up_by_hand_builds_the_same_stack_as_the_plan():
    """__main__.py reads the inputs from stack config: the `pulumi up` door and the plan must agree."""
    import runpy

    import pulumi

    from automation.adapters.engine.plan import record
    from stacks.inputs import INPUTS_CONFIG_KEY

    inputs = resolve_one(cluster(), hub())

    def by_hand():
        pulumi.runtime.set_all_config({f"hubwright:{INPUTS_CONFIG_KEY}": inputs.to_config()})
        runpy.run_path("__main__.py")

    hand, planned = record(by_hand, stack=inputs.stack), plan_stack(inputs)
    assert [(r.urn, r.inputs) for r in hand.resources] == [(r.urn, r.inputs) for r in planned.resources]


def test_one_of_a_type_names_the_stack_and_the_count_when_there_is_not_exactly_one():
    p = plan()
    with pytest.raises(LookupError, match=rf"stack {p.stack}: expected one no:such:Type, found 0"):
        p.one("no:such:Type")
