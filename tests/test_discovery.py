"""automation.adapters.aws.discovery against moto in server mode, under the generated least-privilege policies with
moto's IAM enforcement on (tests.test_aws_sessions._enforced): the service's credentials may only assume the hub
role and the cluster role of account 222222222222, whose policy is exactly docs/iam.md's.

The cluster's VPC has a secondary CIDR, tagged private and public subnets in two zones, route tables with explicit
associations and the main table, tagged node security groups and an untagged one, and the installer's NLB.
"""
from __future__ import annotations

import pytest

from automation.adapters.aws.discovery import AwsDiscovery, discover_all
from automation.adapters.aws.lookups import LookupFailed, LookupRefused
from automation.cli import iam
from stacks.network.found import FoundLoadBalancer, FoundNetwork, FoundSubnet, found_of
from stacks.network.query import NetworkQuery, query_of
from stacks.resolve import fleet_targets

from doubles.factories import cluster, fleet, hub
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _enforced, _setup_session

OTHER_ACCOUNT = "333333333333"  # globex's: a tenant acme's clusters must never reach
INFRA = "prod-1-x7k2p"
TAG = f"kubernetes.io/cluster/{INFRA}"
NOW = "2026-11-25T10:00:00Z"


def _tags(**tags: str) -> list[dict]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _spec(kind: str, **tags: str) -> list[dict]:
    return [{"ResourceType": kind, "Tags": _tags(**tags)}]


class Vpc:
    """A cluster VPC made in moto by the test (not by the code under test), in `account`."""

    def __init__(self, moto, account: str = CLUSTER_ACCOUNT, *, cidr: str = "10.7.0.0/16", secondary=(),
                 tag: str | None = "owned", infra: str = INFRA):
        self.moto, self.account = moto, account
        self.ec2 = _setup_session(moto, account).client("ec2", endpoint_url=moto.url)
        tags = {f"kubernetes.io/cluster/{infra}": tag} if tag else {}
        self.id = self.ec2.create_vpc(CidrBlock=cidr, TagSpecifications=_spec("vpc", Name=infra, **tags)
                                      if tags else [])["Vpc"]["VpcId"]
        for block in secondary:
            self.ec2.associate_vpc_cidr_block(VpcId=self.id, CidrBlock=block)
        self.main = self.ec2.describe_route_tables(Filters=[
            {"Name": "vpc-id", "Values": [self.id]}, {"Name": "association.main", "Values": ["true"]}],
        )["RouteTables"][0]["RouteTableId"]

    def subnet(self, cidr: str, zone: str, **tags: str) -> str:
        return self.ec2.create_subnet(VpcId=self.id, CidrBlock=cidr, AvailabilityZone=zone,
                                      **({"TagSpecifications": _spec("subnet", **tags)} if tags else {})
                                      )["Subnet"]["SubnetId"]

    def table_for(self, *subnets: str) -> str:
        table = self.ec2.create_route_table(VpcId=self.id)["RouteTable"]["RouteTableId"]
        for subnet in subnets:
            self.ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
        return table

    def group(self, name: str, **tags: str) -> str:
        return self.ec2.create_security_group(
            GroupName=name, Description=name, VpcId=self.id,
            **({"TagSpecifications": _spec("security-group", **tags)} if tags else {}))["GroupId"]

    def default_group(self) -> str:
        return self.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [self.id]},
                                                          {"Name": "group-name", "Values": ["default"]}]
                                                 )["SecurityGroups"][0]["GroupId"]


def _cluster_vpc(moto) -> tuple[Vpc, dict]:
    """The whole cluster network of the module docstring; what discovery should find, by name."""
    vpc = Vpc(moto, secondary=["10.8.0.0/16"])
    private_a = vpc.subnet("10.7.1.0/24", "us-east-1a", **{"kubernetes.io/role/internal-elb": "1"})
    private_b = vpc.subnet("10.7.2.0/24", "us-east-1b", **{"kubernetes.io/role/internal-elb": ""})
    public_a = vpc.subnet("10.7.101.0/24", "us-east-1a", **{"kubernetes.io/role/elb": "1"})
    public_b = vpc.subnet("10.8.1.0/24", "us-east-1b", **{"kubernetes.io/role/internal-elb": "false"})
    table_a, table_b = vpc.table_for(private_a), vpc.table_for(private_b)
    capa_nodes = vpc.group("capa-nodes", **{"sigs.k8s.io/cluster-api-provider-aws/role": "node"})
    workers = vpc.group("workers", Name=f"{INFRA}-worker-sg")
    untagged = vpc.group("someone-elses")
    elb = _setup_session(moto, CLUSTER_ACCOUNT).client("elbv2", endpoint_url=moto.url)
    nlb = elb.create_load_balancer(Name=f"{INFRA}-int", Subnets=[private_a, private_b], Scheme="internal",
                                   Type="network")["LoadBalancers"][0]
    return vpc, {"private_a": private_a, "private_b": private_b, "public_a": public_a, "public_b": public_b,
                 "table_a": table_a, "table_b": table_b, "capa_nodes": capa_nodes, "workers": workers,
                 "untagged": untagged, "nlb": nlb, "default": vpc.default_group()}


def _query(vpc_id: str | None = None, *, namespace: str = "acme", privateLink: bool = True) -> NetworkQuery:
    """The query the service builds for acme/prod-1: its namespace's owner account, by the tenancy gate."""
    network = {"vpcID": vpc_id} if vpc_id else {}
    # Without PrivateLink, a mesh member: only a cluster that builds on its network is read (uses_network).
    mesh = {} if privateLink else {"labels": {"hubwright.io/mesh": "core"},
                                   "annotations": {"hubwright.io/mesh-enabled": "true"}}
    c = cluster(namespace=namespace, infraID=INFRA, network=network, privateLink={"enabled": privateLink},
                accountID=CLUSTER_ACCOUNT, **mesh)
    h = hub()
    target = fleet_targets(fleet(h, [c]))[c.key]
    query = query_of(c, target, h)  # type: ignore[arg-type]
    assert query is not None and query.target.account_id == CLUSTER_ACCOUNT
    return query


# --- what it finds ---------------------------------------------------------------------------------------------

def test_discovery_by_vpc_id_reads_the_whole_network_under_the_generated_policy(moto):
    vpc, made = _cluster_vpc(moto)
    discovery = AwsDiscovery(_enforced(moto))

    found = discovery.discover(_query(vpc.id), now=NOW)

    assert found == FoundNetwork(
        account_id=CLUSTER_ACCOUNT, region="us-east-1", vpc_id=vpc.id, cidrs=("10.7.0.0/16", "10.8.0.0/16"),
        subnets=tuple(sorted((
            FoundSubnet(subnet_id=made["private_a"], availability_zone="us-east-1a", route_table_id=made["table_a"],
                        private=True),
            FoundSubnet(subnet_id=made["private_b"], availability_zone="us-east-1b", route_table_id=made["table_b"],
                        private=True),  # the tag with an empty value, as CAPA writes it
            FoundSubnet(subnet_id=made["public_a"], availability_zone="us-east-1a", route_table_id=vpc.main),
            FoundSubnet(subnet_id=made["public_b"], availability_zone="us-east-1b", route_table_id=vpc.main),
        ), key=lambda s: s.subnet_id)),
        route_table_ids=tuple(sorted([vpc.main, made["table_a"], made["table_b"]])),
        security_group_ids=tuple(sorted([made["capa_nodes"], made["workers"], made["untagged"],
                                         made["default"]])),
        node_security_group_ids=tuple(sorted([made["capa_nodes"], made["workers"]])),
        load_balancer=FoundLoadBalancer(name=f"{INFRA}-int", arn=made["nlb"]["LoadBalancerArn"], type="network",
                                        scheme="internal", vpc_id=vpc.id),
        observed_at=NOW)
    assert found_of({"network": found.to_status()}) == found  # the wire form reads back
    assert (discovery.calls, discovery.discoveries) == (5, 1)  # VPC, subnets, tables, groups, NLB


@pytest.mark.parametrize("value", ["owned", "shared"])
def test_discovery_by_the_installers_tag_finds_the_vpc_tagged_owned_or_shared(moto, value):
    vpc = Vpc(moto, tag=value)
    Vpc(moto, cidr="10.9.0.0/16", infra="another-abcde")  # another cluster's VPC in the same account
    found = AwsDiscovery(_enforced(moto)).discover(_query(privateLink=False), now=NOW)
    assert (found.vpc_id, found.cidrs) == (vpc.id, ("10.7.0.0/16",))
    assert found.load_balancer is None


def test_a_missing_load_balancer_is_found_missing_not_an_error(moto):
    vpc = Vpc(moto)
    found = AwsDiscovery(_enforced(moto)).discover(_query(vpc.id), now=NOW)
    assert found.vpc_id == vpc.id and found.load_balancer is None  # the merge decides what that means


def test_two_vpcs_carrying_the_installers_tag_are_refused_naming_both(moto):
    first, second = Vpc(moto), Vpc(moto, cidr="10.9.0.0/16", tag="shared")
    with pytest.raises(LookupRefused) as caught:
        AwsDiscovery(_enforced(moto)).discover(_query(), now=NOW)
    assert caught.value.reason == "VpcAmbiguous"
    message = str(caught.value)
    assert first.id in message and second.id in message and TAG in message and CLUSTER_ACCOUNT in message
    assert "spec.network.vpcID" in message


def test_no_vpc_is_a_lookup_failure_retried_not_a_refusal(moto):
    discovery = AwsDiscovery(_enforced(moto))
    with pytest.raises(LookupFailed) as caught:
        discovery.discover(_query(), now=NOW)
    assert caught.value.reason == "VpcNotFound" and not isinstance(caught.value, LookupRefused)
    assert TAG in str(caught.value) and CLUSTER_ACCOUNT in str(caught.value)
    with pytest.raises(LookupFailed) as by_id:
        discovery.discover(_query("vpc-0123456789abcdef0"), now=NOW)
    assert by_id.value.reason == "VpcNotFound" and "vpc-0123456789abcdef0" in str(by_id.value)


def test_a_policy_without_describe_subnets_is_refused_access_denied(moto):
    """The control: enforcement is on, so the generated policy is what lets discovery read subnets."""
    vpc = Vpc(moto)
    without = [a for a in iam.actions("cluster") if a != "ec2:DescribeSubnets"]
    with pytest.raises(LookupRefused) as caught:
        AwsDiscovery(_enforced(moto, cluster_actions=without)).discover(_query(vpc.id), now=NOW)
    assert caught.value.reason == "AccessDenied" and "subnets" in str(caught.value)


def test_an_account_whose_role_cannot_be_assumed_is_refused_with_the_sessions_reason(moto):
    """globex's account 333333333333: the controller may not assume its role (not in its policy)."""
    c = cluster("eu-1", namespace="globex", accountID=OTHER_ACCOUNT, infraID=INFRA, network={})
    h = hub()
    query = query_of(c, fleet_targets(fleet(h, [c]))[c.key], h)  # type: ignore[arg-type]
    assert query is not None
    with pytest.raises(LookupRefused) as caught:
        AwsDiscovery(_enforced(moto)).discover(query, now=NOW)
    assert caught.value.reason == "AssumeRoleFailed"
    assert f"arn:aws:iam::{OTHER_ACCOUNT}:role/hubwright" in str(caught.value)


# --- attacks: a query never leaves its target's account ---------------------------------------------------------

def test_a_vpc_id_of_another_account_is_not_found_in_the_clusters_account(moto):
    """acme (owner of 222222222222) names globex's VPC: discovery looks in 222222222222 only and finds nothing;
    globex's VPC, its CIDR and its tables are never read."""
    theirs = Vpc(moto, OTHER_ACCOUNT, cidr="10.50.0.0/16")
    theirs.table_for(theirs.subnet("10.50.1.0/24", "us-east-1a"))
    discovery = AwsDiscovery(_enforced(moto))
    with pytest.raises(LookupFailed) as caught:
        discovery.discover(_query(theirs.id), now=NOW)
    assert caught.value.reason == "VpcNotFound"
    assert f"no VPC {theirs.id} in account {CLUSTER_ACCOUNT}" in str(caught.value)
    assert "10.50.0.0/16" not in str(caught.value)


def test_the_installers_tag_in_another_account_decides_nothing(moto):
    """globex tags a VPC of its own account with acme's cluster tag: acme's discovery neither finds it (no VPC of
    its own yet) nor counts it as a second claimant (when acme's VPC exists)."""
    Vpc(moto, OTHER_ACCOUNT, cidr="10.50.0.0/16", tag="owned")
    discovery = AwsDiscovery(_enforced(moto))
    with pytest.raises(LookupFailed) as caught:
        discovery.discover(_query(), now=NOW)
    assert caught.value.reason == "VpcNotFound" and not isinstance(caught.value, LookupRefused)

    moto.relax_iam()  # the test makes acme's VPC, then enforcement again
    ours = Vpc(moto, tag="shared")
    moto.enforce_iam()
    found = discovery.discover(_query(), now=NOW)
    assert (found.account_id, found.vpc_id, found.cidrs) == (CLUSTER_ACCOUNT, ours.id, ("10.7.0.0/16",))


# --- drift: what changed in the account is found at the next discovery ---------------------------------------------

def test_a_route_table_added_is_found_by_the_next_discovery(moto):
    vpc, made = _cluster_vpc(moto)
    discovery = AwsDiscovery(_enforced(moto))
    query = _query(vpc.id)
    before = discovery.discover(query, now=NOW)

    moto.relax_iam()  # someone adds a private subnet in a third zone, with its own route table
    subnet = vpc.subnet("10.7.3.0/24", "us-east-1c", **{"kubernetes.io/role/internal-elb": "1"})
    table = vpc.table_for(subnet)
    moto.enforce_iam()
    after = discovery.discover(query, now="2026-11-25T10:10:00Z")

    assert table not in before.route_table_ids and table in after.route_table_ids
    assert FoundSubnet(subnet_id=subnet, availability_zone="us-east-1c", route_table_id=table, private=True) \
        in after.subnets
    assert not after.same_as(before)
    assert after.model_copy(update={"route_table_ids": before.route_table_ids, "subnets": before.subnets,
                                    "observed_at": NOW}) == before  # nothing else changed
    assert (discovery.calls, discovery.discoveries) == (10, 2)  # the same five calls each time


def test_discover_all_reports_each_clusters_network_or_why_not(moto):
    vpc, _ = _cluster_vpc(moto)
    discovery = AwsDiscovery(_enforced(moto))
    found = _query(vpc.id)
    missing = _query("vpc-0123456789abcdef0").model_copy(update={"key": "acme/prod-2"})
    results = discover_all(discovery, [found, missing], now=NOW, workers=2)
    assert list(results) == ["acme/prod-1", "acme/prod-2"]
    assert isinstance(results["acme/prod-1"], FoundNetwork) and results["acme/prod-1"].vpc_id == vpc.id
    assert isinstance(results["acme/prod-2"], LookupFailed) and results["acme/prod-2"].reason == "VpcNotFound"


def test_one_discovery_is_one_audit_line_per_account_not_one_per_call(moto, caplog):
    """The trial: each attempt wrote about 9 audit lines, most of them the same pivot again (one per client the
    lookups built: VPC, subnets, tables, groups, NLB). The audit says each pivot once per operation: one line here,
    and the next discovery its own line again."""
    import json
    import logging
    vpc, _ = _cluster_vpc(moto)
    discovery = AwsDiscovery(_enforced(moto))
    with caplog.at_level(logging.INFO, logger="hubwright.audit"):
        discovery.discover(_query(vpc.id), now=NOW)
        discovery.discover(_query(vpc.id), now=NOW)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hubwright.audit"]
    assert [(line["operation"], line["account_id"], line["cluster"]) for line in lines] == \
        [("discover", CLUSTER_ACCOUNT, "prod-1")] * 2
    assert discovery.calls == 10  # the calls themselves are all made
