"""automation.adapters.aws.sessions and automation.adapters.aws.lookups against moto in server mode, over real HTTP on 127.0.0.1.

The service's credentials are moto's default account (123456789012); the hub
(111111111111) and the clusters (222222222222, 333333333333) are reached only
through STS AssumeRole, and moto puts each call in the assumed role's account.
"""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from automation.cli import iam
from automation.adapters.aws import lookups
from automation.adapters.aws.sessions import AccountAccessDenied, AwsSessions, NoServiceCredentials
from automation.adapters.aws.lookups import LookupFailed
from automation.adapters.aws.preflight import Preflight
from stacks.accounts import hub_target
from stacks.errors import NeedsAttention
from stacks.mesh.routes import FoundRoute
from stacks.mesh.share import HubVpc
from stacks.model.hub import EndpointVPC
from stacks.names import MANAGED_BY, MANAGED_BY_TAG

from doubles.factories import HUB_ACCOUNT, cluster, hub, resolve_one
from tests.moto_server import DEFAULT_ACCOUNT

DISCOVERY_LOOKUPS = {"find_vpcs", "subnets_of", "route_tables_of", "security_groups_of", "find_load_balancer"}

CLUSTER_ACCOUNT = "222222222222"
REGION = "us-east-1"


def _base(key: str = "testing", secret: str = "testing") -> boto3.Session:
    return boto3.Session(aws_access_key_id=key, aws_secret_access_key=secret, region_name=REGION)


def _setup_session(moto, account: str, region: str = REGION) -> boto3.Session:
    """Test setup in another account, independent of the code under test: a raw AssumeRole."""
    sts = _base().client("sts", endpoint_url=moto.url)
    creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account}:role/setup", RoleSessionName="test-setup")["Credentials"]
    return boto3.Session(aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                         aws_session_token=creds["SessionToken"], region_name=region)


def _vpc_with_subnet(session: boto3.Session, moto, cidr: str, zone: str) -> tuple[str, str]:
    ec2 = session.client("ec2", endpoint_url=moto.url)
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr.replace("0.0/16", "1.0/24"), AvailabilityZone=zone)
    return vpc, subnet["Subnet"]["SubnetId"]


def _nlb(moto, account: str, name: str) -> str:
    session = _setup_session(moto, account)
    _, subnet = _vpc_with_subnet(session, moto, "10.1.0.0/16", "us-east-1a")
    elb = session.client("elbv2", endpoint_url=moto.url)
    made = elb.create_load_balancer(Name=name, Subnets=[subnet], Scheme="internal", Type="network")
    return made["LoadBalancers"][0]["LoadBalancerArn"]


class Clock:
    def __init__(self):
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(timezone.utc) + self.offset


@pytest.fixture
def sessions(moto):
    return AwsSessions(base=_base(), endpoint_url=moto.url)


# --- AssumeRole, then a call in the assumed account --------------------------------------

def test_assumed_session_acts_in_the_cluster_account_with_the_clusters_session_name(moto, sessions):
    inputs = resolve_one(cluster(), hub())
    identity = sessions.client(inputs.cluster, "sts", operation="test").get_caller_identity()
    assert identity["Account"] == CLUSTER_ACCOUNT
    assert identity["Arn"] == f"arn:aws:sts::{CLUSTER_ACCOUNT}:assumed-role/hubwright/hubwright-cluster-acme.prod-1"


def test_find_nlb_finds_the_installers_nlb_in_the_cluster_account_only(moto, sessions):
    arn = _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")
    _nlb(moto, "333333333333", "prod-1-x7k2p-int")  # same name, another account: must not be found instead
    inputs = resolve_one(cluster(infraID="prod-1-x7k2p"), hub())

    found = lookups.find_nlb(sessions, inputs)
    assert (found.arn, found.name) == (arn, "prod-1-x7k2p-int")
    assert f":{CLUSTER_ACCOUNT}:" in found.arn

    missing = resolve_one(cluster(infraID="other-abcde"), hub())
    with pytest.raises(LookupFailed) as caught:
        lookups.find_nlb(sessions, missing)
    assert caught.value.reason == "LoadBalancerNotFound"
    assert "other-abcde-int" in str(caught.value) and CLUSTER_ACCOUNT in str(caught.value)


def test_the_census_counts_other_endpoints_per_inventory_vpc_in_the_hub_account(moto, sessions):
    hub_east = _setup_session(moto, HUB_ACCOUNT)
    hub_eu = _setup_session(moto, HUB_ACCOUNT, "eu-west-1")
    busy, busy_subnet = _vpc_with_subnet(hub_east, moto, "10.100.0.0/16", "us-east-1a")
    idle, _ = _vpc_with_subnet(hub_east, moto, "10.101.0.0/16", "us-east-1b")
    europe, europe_subnet = _vpc_with_subnet(hub_eu, moto, "10.110.0.0/16", "eu-west-1a")
    east_ec2, eu_ec2 = hub_east.client("ec2", endpoint_url=moto.url), hub_eu.client("ec2", endpoint_url=moto.url)
    for n in range(2):  # someone else's interface endpoints: counted
        east_ec2.create_vpc_endpoint(VpcId=busy, VpcEndpointType="Interface", SubnetIds=[busy_subnet],
                                     ServiceName=f"com.amazonaws.vpce.us-east-1.vpce-svc-{n:017d}")
    east_ec2.create_vpc_endpoint(  # hubwright's own (its providers' default tags): placement counts it already
        VpcId=busy, VpcEndpointType="Interface", SubnetIds=[busy_subnet],
        ServiceName="com.amazonaws.vpce.us-east-1.vpce-svc-00000000000000005",
        TagSpecifications=[{"ResourceType": "vpc-endpoint", "Tags": [{"Key": MANAGED_BY_TAG, "Value": MANAGED_BY}]}])
    east_ec2.create_vpc_endpoint(VpcId=busy, VpcEndpointType="Gateway", ServiceName="com.amazonaws.us-east-1.s3")
    eu_ec2.create_vpc_endpoint(VpcId=europe, VpcEndpointType="Interface", SubnetIds=[europe_subnet],
                               ServiceName="com.amazonaws.vpce.eu-west-1.vpce-svc-00000000000000009")
    # An endpoint in another account's VPC is not the hub's.
    other = _setup_session(moto, CLUSTER_ACCOUNT)
    other_vpc, other_subnet = _vpc_with_subnet(other, moto, "10.100.0.0/16", "us-east-1a")
    other.client("ec2", endpoint_url=moto.url).create_vpc_endpoint(
        VpcId=other_vpc, VpcEndpointType="Interface", SubnetIds=[other_subnet],
        ServiceName="com.amazonaws.vpce.us-east-1.vpce-svc-00000000000000007")

    inventory = [
        EndpointVPC(region=REGION, vpc_id=busy, cidr="10.100.0.0/16",
                    subnets=[{"subnetID": busy_subnet, "availabilityZone": "us-east-1a"}]),
        EndpointVPC(region=REGION, vpc_id=idle, cidr="10.101.0.0/16",
                    subnets=[{"subnetID": "subnet-0b", "availabilityZone": "us-east-1b"}]),
        EndpointVPC(region="eu-west-1", vpc_id=europe, cidr="10.110.0.0/16",
                    subnets=[{"subnetID": europe_subnet, "availabilityZone": "eu-west-1a"}]),
    ]
    counts = lookups.foreign_endpoint_counts(sessions, hub_target(hub()), inventory)
    assert counts == {busy: 2, idle: 0, europe: 1}


# --- caching and refresh -------------------------------------------------------------------

def test_credentials_are_cached_per_role_and_session_and_shared_across_regions(moto, sessions):
    inputs = resolve_one(cluster(), hub())
    for _ in range(3):
        sessions.client(inputs.cluster, "sts", operation="test").get_caller_identity()
    sessions.client(inputs.cluster.in_region("eu-west-1"), "ec2", operation="test").describe_vpcs()
    assert sessions.assume_role_calls == 1
    other = resolve_one(cluster("prod-2"), hub())  # same role, its own session name
    sessions.client(other.cluster, "sts", operation="test").get_caller_identity()
    assert sessions.assume_role_calls == 2


def test_credentials_are_refreshed_before_they_expire(moto):
    clock = Clock()
    sessions = AwsSessions(base=_base(), endpoint_url=moto.url, clock=clock)
    h = hub(credentials={"roleARN": "arn:aws:iam::111111111111:role/hubwright-hub", "sessionDurationSeconds": 900})
    target = resolve_one(cluster(), h).cluster
    session = sessions.session(target, operation="test")
    first = session.get_credentials().get_frozen_credentials().access_key

    clock.offset = timedelta(seconds=600)  # 300 s left: outside the refresh windows (225 s / 150 s)
    sessions.client(target, "sts", operation="test").get_caller_identity()
    assert sessions.assume_role_calls == 1

    clock.offset = timedelta(seconds=800)  # 100 s left: must refresh before the call
    identity = sessions.client(target, "sts", operation="test").get_caller_identity()
    assert sessions.assume_role_calls == 2
    assert session.get_credentials().get_frozen_credentials().access_key != first
    assert identity["Account"] == CLUSTER_ACCOUNT


# --- ambient credentials, endpoint override ---------------------------------------------------

def test_ambient_credentials_are_used_only_in_their_own_account(moto, sessions):
    own = hub_target(hub(accountID=DEFAULT_ACCOUNT, credentials={}, roleAccountMap={}))
    assert sessions.client(own, "sts", operation="test").get_caller_identity()["Account"] == DEFAULT_ACCOUNT
    assert sessions.assume_role_calls == 0

    elsewhere = hub_target(hub(credentials={}))
    with pytest.raises(AccountAccessDenied) as caught:
        sessions.session(elsewhere, operation="test")
    assert caught.value.reason == "WrongAccount"
    assert f"in account {DEFAULT_ACCOUNT}, not {HUB_ACCOUNT}" in str(caught.value)


def test_endpoint_url_comes_from_the_environment(moto):
    sessions = AwsSessions.from_env({"HUBWRIGHT_AWS_ENDPOINT_URL": moto.url}, base=_base())
    assert sessions.endpoint_url == moto.url
    target = resolve_one(cluster(), hub()).cluster
    assert sessions.client(target, "sts", operation="test").get_caller_identity()["Account"] == CLUSTER_ACCOUNT


# --- audit and logs ----------------------------------------------------------------------------

def test_every_session_logs_one_audit_line_and_no_credentials(moto, caplog):
    inputs = resolve_one(cluster(), hub())
    caplog.set_level(logging.DEBUG)  # as a service run with --log-level=debug would
    sessions = AwsSessions(base=_base(), endpoint_url=moto.url)
    session = sessions.session(inputs.cluster, operation="find-nlb", cluster="prod-1", namespace="acme")
    sessions.client(inputs.cluster, "ec2", operation="find-nlb", cluster="prod-1", namespace="acme").describe_vpcs()
    secret = session.get_credentials().get_frozen_credentials()

    audit = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hubwright.audit"]
    assert len(audit) == 2
    assert audit[0] == {
        "event": "account_pivot", "cluster": "prod-1", "namespace": "acme", "account_id": CLUSTER_ACCOUNT,
        "region": REGION, "role_arn": "arn:aws:iam::222222222222:role/hubwright",
        "session_name": "hubwright-cluster-acme.prod-1", "operation": "find-nlb", "stack": None,
    }
    text = caplog.text
    assert secret.secret_key not in text and secret.token not in text
    assert "assumed role arn:aws:iam::222222222222:role/hubwright" in text  # the pivot itself is logged


def test_without_the_guard_botocore_debug_would_leak_credentials(moto, caplog):
    """The control for the test above: the guard is what keeps secrets out."""
    botocore_logger = logging.getLogger("botocore")
    saved = botocore_logger.level
    try:
        botocore_logger.setLevel(logging.DEBUG)
        caplog.set_level(logging.DEBUG)
        sessions = AwsSessions(base=_base(), endpoint_url=moto.url, guard_logs=False)
        session = sessions.session(resolve_one(cluster(), hub()).cluster, operation="test")
        assert session.get_credentials().get_frozen_credentials().secret_key in caplog.text
    finally:
        botocore_logger.setLevel(saved)


# --- refusals and least privilege under moto's IAM enforcement --------------------------------

def _enforced(moto, cluster_actions: list[str] | None = None) -> AwsSessions:
    """Roles and the controller as docs/iam.md sets them up, then IAM enforcement on."""
    hub_role = f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-hub"
    cluster_role = f"arn:aws:iam::{CLUSTER_ACCOUNT}:role/hubwright"
    iam_default = _base().client("iam", endpoint_url=moto.url)
    iam_default.create_user(UserName="hubwright-controller")
    controller = f"arn:aws:iam::{DEFAULT_ACCOUNT}:user/hubwright-controller"
    iam_default.put_user_policy(UserName="hubwright-controller", PolicyName="assume",
                                PolicyDocument=json.dumps(iam.controller_policy([hub_role, cluster_role])))
    key = iam_default.create_access_key(UserName="hubwright-controller")["AccessKey"]
    policy = iam.cluster_role_policy()
    if cluster_actions is not None:
        policy["Statement"][0]["Action"] = cluster_actions
    for account, name, document in ((HUB_ACCOUNT, "hubwright-hub", iam.hub_role_policy()),
                                    (CLUSTER_ACCOUNT, "hubwright", policy)):
        client = _setup_session(moto, account).client("iam", endpoint_url=moto.url)
        client.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(iam.trust_policy(controller)))
        client.put_role_policy(RoleName=name, PolicyName="hubwright", PolicyDocument=json.dumps(document))
    moto.enforce_iam()
    return AwsSessions(base=_base(key["AccessKeyId"], key["SecretAccessKey"]), endpoint_url=moto.url)


def test_assume_role_refusal_is_account_access_denied_with_a_reason(moto):
    sessions = _enforced(moto)
    unmapped = resolve_one(cluster(accountID="333333333333"), hub()).cluster  # the controller may not assume it
    with pytest.raises(AccountAccessDenied) as caught:
        sessions.client(unmapped, "elbv2", operation="find-nlb")
    assert caught.value.reason == "AssumeRoleFailed"
    message = str(caught.value)
    assert "arn:aws:iam::333333333333:role/hubwright" in message and "AccessDenied" in message
    assert "session hubwright-cluster-acme.prod-1" in message


def test_lookups_succeed_with_exactly_the_generated_policies(moto):
    _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")
    hub_vpc, subnet = _vpc_with_subnet(_setup_session(moto, HUB_ACCOUNT), moto, "10.100.0.0/16", "us-east-1a")
    ec2 = _setup_session(moto, CLUSTER_ACCOUNT).client("ec2", endpoint_url=moto.url)
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpnGatewayId=vgw, VpcId=vpc)
    listed = ec2.create_managed_prefix_list(PrefixListName="on-premises", AddressFamily="IPv4", MaxEntries=5,
                                            Entries=[{"Cidr": "10.40.0.0/16"}])["PrefixList"]["PrefixListId"]
    ec2.create_route(RouteTableId=table, DestinationPrefixListId=listed, GatewayId=vgw)
    sessions = _enforced(moto)
    inputs = resolve_one(cluster(infraID="prod-1-x7k2p"), hub())

    assert lookups.find_nlb(sessions, inputs).name == "prod-1-x7k2p-int"
    inventory = [EndpointVPC(region=REGION, vpc_id=hub_vpc, cidr="10.100.0.0/16",
                             subnets=[{"subnetID": subnet, "availabilityZone": "us-east-1a"}])]
    assert lookups.foreign_endpoint_counts(sessions, inputs.hub, inventory) == {hub_vpc: 0}
    hub_vpcs = [HubVpc(owner="HubConfig default spec.associatedVPCs[0]", region=REGION, vpc_id=hub_vpc)]
    assert lookups.hub_vpc_cidrs(sessions, inputs.hub, hub_vpcs) == {hub_vpc: ("10.100.0.0/16",)}
    assert lookups.vpc_cidrs(sessions, inputs.cluster, vpc) == ("10.7.0.0/16",)
    assert lookups.routes_in(sessions, inputs.cluster, [table]) == {table: (
        FoundRoute(cidr="10.7.0.0/16", target="local"),
        FoundRoute(cidr="10.40.0.0/16", target=vgw, prefix_list=listed))}  # through prefix_list_entries
    assert lookups.prefix_list_sizes(sessions, inputs.cluster, [listed]) == {listed: 5}
    # each is exercised here; discovery's (find_vpcs, subnets_of, ...) under the same policies in test_discovery.py
    assert set(lookups.all_lookups()) == {"find_nlb", "foreign_endpoint_counts", "hub_vpc_cidrs", "vpc_cidrs",
                                          "routes_in", "prefix_list_entries", "prefix_list_sizes",
                                          *DISCOVERY_LOOKUPS}


def test_a_policy_missing_the_lookups_action_is_refused(moto):
    """The control for the test above: enforcement is on, so the generated policy is what allows it."""
    _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")
    without = [a for a in iam.actions("cluster") if a != "elasticloadbalancing:DescribeLoadBalancers"]
    sessions = _enforced(moto, cluster_actions=without)
    with pytest.raises(LookupFailed) as caught:
        lookups.find_nlb(sessions, resolve_one(cluster(infraID="prod-1-x7k2p"), hub()))
    assert caught.value.reason == "AccessDenied"


def test_a_role_that_may_not_read_prefix_lists_stalls_a_table_that_routes_to_one_never_passes_it(moto):
    """A cluster role made before the pre-flight read prefix lists: the table's route to a list is not skipped."""
    ec2 = _setup_session(moto, CLUSTER_ACCOUNT).client("ec2", endpoint_url=moto.url)
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Gateway",
                            RouteTableIds=[table])
    without = [a for a in iam.actions("cluster") if a != "ec2:GetManagedPrefixListEntries"]
    sessions = _enforced(moto, cluster_actions=without)
    with pytest.raises(LookupFailed) as caught:
        lookups.routes_in(sessions, resolve_one(cluster(), hub()).cluster, [table])
    assert caught.value.reason == "AccessDenied" and "reading the entries of prefix list pl-" in str(caught.value)


# --- no credentials at all: the service's identity is named, never a tenant's field --------------------

@pytest.mark.parametrize("identity", [{}, {"AWS_ROLE_ARN": f"arn:aws:iam::{DEFAULT_ACCOUNT}:role/hubwright-service",
                                           "AWS_WEB_IDENTITY_TOKEN_FILE": "/nonexistent/irsa/token"}],
                         ids=["nothing", "an-irsa-token-file-that-is-not-there"])
def test_no_credentials_at_all_say_NoCredentials_and_name_the_services_identity(moto, monkeypatch, tmp_path, identity):
    """A hub started with no AWS identity (no env, no files, no IRSA token, no instance metadata): every cluster
    said AssumeRoleFailed and blamed its own spec.accountID. Through boto3's default chain, as in the pod."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name, value in identity.items():
        monkeypatch.setenv(name, value)
    sessions = AwsSessions(endpoint_url=moto.url)  # the service's own credentials: boto3's default chain
    inputs = resolve_one(cluster(), hub())
    with pytest.raises(NeedsAttention) as stalled:
        Preflight(sessions)(None, inputs)  # the guard before every up
    message = str(stalled.value)
    assert stalled.value.reason == "NoCredentials", message
    assert "spec.accountID" not in message and "the service's AWS credentials" in message
    assert "no AWS credentials of its own" in message and "IRSA" in message
    if identity:
        assert "/nonexistent/irsa/token" in message
    # The hub's own session (placement, the census): by a role, and with none (the service's account itself)
    for target in (hub_target(hub()), hub_target(hub(accountID=DEFAULT_ACCOUNT, credentials={}, roleAccountMap={}))):
        with pytest.raises(NoServiceCredentials) as refused:
            sessions.session(target, operation="test")
        assert refused.value.reason == "NoCredentials"
