"""The declared network against what discovery found (stacks.network.merge), through resolve_all and the
service's incremental resolver: trust the cloud, not the form."""
from __future__ import annotations

from typing import Any

import pytest

from doubles.factories import cluster_doc, fleet, hub_doc
from stacks.errors import InvalidSpec
from stacks.incremental import FleetResolver
from stacks.inputs import StackInputs
from stacks.model.loading import parse
from stacks.claims import VPC_CLAIMED
from stacks.network.merge import MISMATCH, NOT_DISCOVERED, Pending
from stacks.resolve import resolve_all

ACCOUNT = "222222222222"
MESH = {"mesh": {"groups": {"prod": {"topology": "peering"}}}}


def found(vpc: str = "vpc-0c1", cidrs=("10.1.0.0/16", "10.9.0.0/16"), account: str = ACCOUNT,
          region: str = "us-east-1", **more: Any) -> dict:
    subnets = [{"subnetID": "subnet-0a1", "availabilityZone": "us-east-1a", "routeTableID": "rtb-0priv-a",
                "private": True},
               {"subnetID": "subnet-0a2", "availabilityZone": "us-east-1a", "routeTableID": "rtb-0pub"},
               {"subnetID": "subnet-0b1", "availabilityZone": "us-east-1b", "routeTableID": "rtb-0priv-b",
                "private": True}]
    doc = {"accountID": account, "region": region, "vpcID": vpc, "cidrs": list(cidrs), "subnets": subnets,
           "routeTableIDs": ["rtb-0main", "rtb-0priv-a", "rtb-0priv-b", "rtb-0pub"],
           "securityGroupIDs": ["sg-0default", "sg-0node"], "nodeSecurityGroupIDs": ["sg-0node"],
           "observedAt": "2026-11-25T10:00:00Z"}
    doc.update(more)
    return doc


def cluster(name: str = "prod-1", network: dict | None = None, status: dict | None = None,
            created: str = "2026-01-01T00:00:00Z", group: str | None = "prod", **spec: Any):
    doc = cluster_doc(name, labels={"hubwright.io/mesh": group} if group else {},
                      annotations={"hubwright.io/mesh-enabled": "true"} if group else {}, **spec)
    doc["spec"]["network"] = network if network is not None else {}
    doc["metadata"]["creationTimestamp"] = created
    if status is not None:
        doc["status"] = {"network": status}
    return parse(doc)


def resolved(*clusters, discovering: bool = True, **hub_spec: Any):
    return resolve_all(fleet(parse(hub_doc(**{**MESH, **hub_spec})), clusters, discovery=discovering)).inputs


def test_a_declared_cidr_the_vpc_does_not_have_is_refused_naming_the_vpc_and_its_real_cidrs():
    c = cluster(network={"vpcID": "vpc-0c1", "cidr": "10.7.0.0/16"}, status=found())
    refusal = resolved(c)[c.key]
    assert isinstance(refusal, InvalidSpec) and refusal.reason == MISMATCH
    assert refusal.errors[0].field == "spec.network.cidr"
    assert "CIDR 10.7.0.0/16 is not a CIDR block of VPC vpc-0c1 in account 222222222222 (us-east-1), which has " \
           "10.1.0.0/16, 10.9.0.0/16" in str(refusal)


def test_a_route_table_or_security_group_outside_the_vpc_is_refused_by_name():
    c = cluster(network={"routeTableIDs": ["rtb-0main", "rtb-0elsewhere"], "nodeSecurityGroupIDs": ["sg-0theirs"],
                         "transitSubnets": [{"subnetID": "subnet-0a1", "availabilityZone": "us-east-1b"}]},
                status=found())
    refusal = resolved(c)[c.key]
    assert isinstance(refusal, InvalidSpec)
    fields = {e.field: e.reason for e in refusal.errors}
    assert "route table rtb-0elsewhere is not in VPC vpc-0c1" in fields["spec.network.routeTableIDs[1]"]
    assert "security group sg-0theirs is not in VPC vpc-0c1" in fields["spec.network.nodeSecurityGroupIDs[0]"]
    assert "subnet-0a1 is in us-east-1a, not us-east-1b" in fields["spec.network.transitSubnets[0].availabilityZone"]


def test_what_is_not_declared_is_taken_from_what_was_found_every_cidr_block_included():
    c = cluster(network={}, status=found())
    inputs = resolved(c)[c.key]
    assert isinstance(inputs, StackInputs) and inputs.mesh is not None
    member = inputs.mesh.member
    assert member.vpc_id == "vpc-0c1"
    assert member.route_table_ids == ("rtb-0main", "rtb-0priv-a", "rtb-0priv-b", "rtb-0pub")
    assert member.security_group_ids == ("sg-0node",)
    assert member.cidrs == ("10.1.0.0/16", "10.9.0.0/16")  # every block the VPC has, the primary first
    assert member.cidr_fields == ("spec.network.cidr", "status.network.cidrs[1]")  # the other: where AWS said it


def test_the_hub_administrator_may_take_only_the_private_subnets_route_tables():
    c = cluster(network={}, status=found())
    inputs = resolved(c, discovery={"routeTables": "private"})[c.key]
    assert isinstance(inputs, StackInputs) and inputs.mesh is not None
    assert inputs.mesh.member.route_table_ids == ("rtb-0priv-a", "rtb-0priv-b")


def test_a_cluster_waits_for_discovery_and_a_network_read_elsewhere_does_not_count():
    waiting = cluster("a", network={"vpcID": "vpc-0c1", "cidr": "10.1.0.0/16"}, group=None)
    moved = cluster("b", network={}, status=found(vpc="vpc-0b", account="333333333333"))
    answers = resolved(waiting, moved)
    for key in (waiting.key, moved.key):
        assert isinstance(answers[key], Pending) and answers[key].reason == NOT_DISCOVERED
    assert "waiting for discovery to read VPC vpc-0c1 in account 222222222222" in str(answers[waiting.key])
    assert "the VPC tagged kubernetes.io/cluster/b-x7k2p" in str(answers[moved.key])
    # Without a discovery (the plan without stand-ins, a service without AWS) the declared network is used as is.
    assert isinstance(resolved(waiting, discovering=False)[waiting.key], StackInputs)


def test_a_vpc_found_for_two_clusters_is_refused_for_the_younger_one():
    older = cluster("older", network={}, status=found(), created="2026-01-01T00:00:00Z")
    younger = cluster("younger", network={}, status=found(), created="2026-02-01T00:00:00Z")
    answers = resolved(younger, older)
    assert isinstance(answers[older.key], StackInputs)
    refusal = answers[younger.key]
    assert isinstance(refusal, InvalidSpec) and refusal.reason == VPC_CLAIMED
    assert "VPC vpc-0c1 is already held by HubCluster acme/older, which keeps it" in str(refusal)


def test_a_member_cidr_from_discovery_that_overlaps_another_members_is_refused_as_a_declared_one_is():
    a = cluster("a", network={}, status=found(vpc="vpc-0a", cidrs=("10.1.0.0/16",)), created="2026-01-01T00:00:00Z")
    b = cluster("b", network={}, status=found(vpc="vpc-0b", cidrs=("10.1.0.0/16",)), created="2026-02-01T00:00:00Z")
    answers = resolved(a, b)
    assert isinstance(answers[a.key], StackInputs)
    assert isinstance(answers[b.key], InvalidSpec) and "overlaps" in str(answers[b.key])
    assert answers[b.key].errors[0].field == "spec.network.cidr"


@pytest.mark.parametrize("change", ["status", "account", "remove"])
def test_the_service_resolver_gives_the_same_answer_as_a_full_resolve(change):
    hub = parse(hub_doc(**MESH))
    clusters = [cluster("a", network={}, status=found(vpc="vpc-0a", cidrs=("10.1.0.0/16",)),
                        created="2026-01-01T00:00:00Z"),
                cluster("b", network={}, status=found(vpc="vpc-0b", cidrs=("10.2.0.0/16",)),
                        created="2026-02-01T00:00:00Z"),
                cluster("c", network={}, created="2026-03-01T00:00:00Z")]
    resolver = FleetResolver.of(fleet(hub, clusters, discovery=True))
    resolver.resolve()
    if change == "status":  # c is discovered, in b's VPC: the younger claim is refused
        clusters[2] = cluster("c", network={}, status=found(vpc="vpc-0b", cidrs=("10.2.0.0/16",)),
                              created="2026-03-01T00:00:00Z")
    elif change == "account":  # b's network was read in another account: it waits again
        clusters[1] = cluster("b", network={}, status=found(vpc="vpc-0b", account="333333333333"),
                              created="2026-02-01T00:00:00Z")
    else:
        clusters = clusters[1:]
        resolver.remove("acme/a")
    for c in clusters:
        resolver.put(c)
    incremental, _ = resolver.resolve()
    assert incremental.inputs == resolve_all(fleet(hub, clusters, discovery=True)).inputs
