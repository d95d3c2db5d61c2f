"""resolve_one(): roles, regions and endpoint placement, all pure."""
import pytest

from stacks.errors import InvalidSpec
from stacks.resolve import resolve_fleet
from doubles.factories import HUB_ROLE, INGRESS, cluster, hub, resolve_one, fleet


def test_cluster_provider_assumes_the_mapped_role_and_hub_uses_hub_credentials():
    inputs = resolve_one(cluster(), hub())
    assert inputs.cluster.account_id == "222222222222"
    assert inputs.cluster.role_arn == "arn:aws:iam::222222222222:role/hubwright"
    assert inputs.cluster.session_name == "hubwright-cluster-acme.prod-1"
    assert (inputs.hub.account_id, inputs.hub.role_arn) == ("111111111111", HUB_ROLE)
    assert inputs.stack == "acme.prod-1"


def test_account_without_a_role_is_refused_naming_the_field():
    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(accountID="444444444444"), hub())
    assert caught.value.reason == "AccountNotMapped"
    assert "HubCluster acme/prod-1: spec.accountID: account 444444444444 has no role" in str(caught.value)


def test_no_inventory_vpc_in_the_cluster_region_is_refused():
    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(region="ap-south-1"), hub())
    assert "spec.region" in str(caught.value) and "ap-south-1" in str(caught.value)


def test_allowed_principal_defaults_to_the_hub_role_then_to_discovery():
    assert resolve_one(cluster(), hub()).private_link.allowed_principal == HUB_ROLE
    ambient = hub(credentials={})
    assert resolve_one(cluster(), ambient).private_link.allowed_principal is None  # discovered at run time


def test_private_link_disabled_resolves_to_no_private_link():
    assert resolve_one(cluster(privateLink={"enabled": False}), hub()).private_link is None


def test_digest_ignores_generation_but_not_spec():
    a = resolve_one(cluster(), hub())
    b = resolve_one(cluster().model_copy(update={"metadata": cluster().metadata.model_copy(update={"generation": 7})}), hub())
    c = resolve_one(cluster(infraID="prod-1-new"), hub())
    assert a.digest() == b.digest() != c.digest()


def two_vpc_hub(limit=50):
    vpc = lambda i: {"region": "us-east-1", "vpcID": f"vpc-0hub{i}", "cidr": f"10.10{i}.0.0/16",
                     "subnets": [{"subnetID": f"subnet-{i}a", "availabilityZone": "us-east-1a"}]}
    return hub(endpointVPCInventory=[vpc(1), vpc(2)], privateLink={"endpointsPerVPC": limit})


def test_placement_picks_the_least_used_vpc_and_is_stable_when_others_come_and_go():
    h = two_vpc_hub()
    clusters = tuple(cluster(f"c{i}") for i in range(4))
    first = resolve_fleet(fleet(h, clusters))
    placed = {k: v.private_link.endpoint_vpc.vpc_id for k, v in first.items()}
    assert sorted(placed.values()) == ["vpc-0hub1", "vpc-0hub1", "vpc-0hub2", "vpc-0hub2"]

    # c0 leaves; the others keep their VPCs, and a newcomer fills the emptier one.
    again = resolve_fleet(fleet(h, clusters[1:] + (cluster("new"),), placements=placed))
    for key in ("acme/c1", "acme/c2", "acme/c3"):
        assert again[key].private_link.endpoint_vpc.vpc_id == placed[key]
    assert again["acme/new"].private_link.endpoint_vpc.vpc_id == placed["acme/c0"]


def test_full_vpcs_are_never_chosen():
    result = resolve_fleet(fleet(two_vpc_hub(limit=1), tuple(cluster(f"c{i}") for i in range(3))))
    errors = [v for v in result.values() if isinstance(v, InvalidSpec)]
    assert len(errors) == 1 and "already holds 1 endpoints" in str(errors[0])


def test_endpoints_that_are_not_hubwrights_use_up_the_same_quota():
    """The census's counts: a VPC holding other endpoints takes fewer of ours, and a placed endpoint stays put."""
    h = two_vpc_hub(limit=3)
    clusters = tuple(cluster(f"c{i}") for i in range(3))
    placed = resolve_fleet(fleet(h, clusters, foreign_endpoints={"vpc-0hub1": 2}))
    # Least used first, counting the other two: vpc-0hub2 takes two of ours before vpc-0hub1 takes one.
    assert [placed[c.key].private_link.endpoint_vpc.vpc_id for c in clusters] == ["vpc-0hub2", "vpc-0hub2",
                                                                               "vpc-0hub1"]
    # vpc-0hub1 fills up behind our back: c2 keeps its endpoint, and a newcomer finds no room anywhere.
    kept = {c.key: placed[c.key].private_link.endpoint_vpc.vpc_id for c in clusters}
    later = resolve_fleet(fleet(h, clusters + (cluster("new"),), placements=kept,
                                foreign_endpoints={"vpc-0hub1": 3, "vpc-0hub2": 1}))
    assert later["acme/c2"].private_link.endpoint_vpc.vpc_id == "vpc-0hub1"
    [error] = later["acme/new"].errors
    assert error.field == "spec.privateLink" and "already holds 3 endpoints" in error.reason
    assert "vpc-0hub1 4 (3 not hubwright's), vpc-0hub2 3 (1 not hubwright's)" in error.reason


def test_one_bad_cluster_does_not_block_the_others():
    result = resolve_fleet(fleet(hub(), (cluster("good"), cluster("bad", accountID="444444444444"))))
    assert result["acme/good"].private_link is not None
    assert isinstance(result["acme/bad"], InvalidSpec)


def test_a_shared_ingress_id_claimed_twice_refuses_the_younger_cluster_only():
    ingress = INGRESS
    opt_in = {"enabled": True, "clusterID": "acme.shared", "backend": "kas.c.svc:6443"}
    old = cluster("old", sharedIngress=opt_in)
    old = old.model_copy(update={"metadata": old.metadata.model_copy(update={"creation_timestamp": "2026-01-01T00:00:00Z"})})
    young = cluster("young", sharedIngress=opt_in)
    young = young.model_copy(update={"metadata": young.metadata.model_copy(update={"creation_timestamp": "2026-06-01T00:00:00Z"})})
    result = resolve_fleet(fleet(hub(sharedIngress=ingress), (young, old)))
    assert result["acme/old"].shared_ingress.cluster_id == "acme.shared"
    assert isinstance(result["acme/young"], InvalidSpec)
    assert "spec.sharedIngress.clusterID: ID 'acme.shared' is already used by HubCluster acme/old" in str(result["acme/young"])


def test_a_long_name_gets_a_default_id_cut_to_63_characters_and_kept_unique_by_a_hash():
    opt_in = {"enabled": True, "backend": "kas.x.svc:6443"}
    one = cluster("x" * 70, sharedIngress=opt_in, apiURL="https://api.x.example.com")
    two = cluster("x" * 69 + "y", sharedIngress=opt_in, apiURL="https://api.y.example.com")
    result = resolve_fleet(fleet(hub(sharedIngress=INGRESS), (one, two)))
    ids = [result[c.key].shared_ingress.cluster_id for c in (one, two)]
    assert all(len(i) == 63 and i.startswith("acme.xxx") for i in ids) and ids[0] != ids[1]
