"""Mesh membership, join order, pair ownership, validation and what an event changes (pure, no Pulumi)."""
import itertools
import subprocess
import sys

import pytest

from stacks.errors import InvalidSpec
from stacks.inputs import StackInputs
from stacks.mesh.membership import group_of, pair_name
from stacks.model.loading import parse
from stacks.names import JOIN_STATUS_KEY, MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.resolve import resolve_all, resolve_fleet
from doubles import factories
from doubles.factories import cluster_doc, fleet

ACCOUNTS = ("222222222222", "333333333333")
REGIONS = ("us-east-1", "eu-west-1")


def member(i: int, *, group: str = "core", enabled: str | None = "true", label: bool = True, stamp: int | None = None,
           cidr: str | None = None, created: str | None = None, deleting: bool = False, account: str | None = None,
           **network):
    """Cluster c<i>: accounts alternate, regions alternate every two, 1 or 2 route tables, one node SG."""
    doc = cluster_doc(
        f"c{i:02d}", ("acme", "globex")[i % 2],
        labels={MESH_LABEL: group} if label else {},
        annotations={MESH_ENABLED_ANNOTATION: enabled} if enabled is not None else {},
        accountID=account or ACCOUNTS[i % 2],
        region=REGIONS[(i // 2) % 2],
        privateLink={"enabled": False},
        network={"vpcID": f"vpc-0c{i:02d}", "cidr": cidr or f"10.{i}.0.0/16",
                 "routeTableIDs": [f"rtb-0{i:02d}a", f"rtb-0{i:02d}b"][: 1 + i % 2],
                 "nodeSecurityGroupIDs": [f"sg-0{i:02d}"], **network},
    )
    doc["metadata"]["creationTimestamp"] = created or f"2025-01-01T00:{i:02d}:00Z"
    if deleting:
        doc["metadata"]["deletionTimestamp"] = "2025-06-01T00:00:00Z"
    if stamp is not None:
        doc["status"] = {JOIN_STATUS_KEY: {"group": group, "order": stamp}}
    return parse(doc)


SPANNING = ["acme", "globex"]  # the tests' groups span both tenants, as the hub administrator declared


def hub(**spec):
    """The tests' hub: groups core and edge span acme and globex (HubConfig spec.mesh.groups.G.namespaces)."""
    mesh = spec.pop("mesh", {})
    configured = mesh.get("groups", {})
    groups = {g: {"namespaces": SPANNING, **configured.get(g, {})} for g in ("core", "edge", *configured)}
    return local_hub(mesh={**mesh, "groups": groups}, **spec)


def local_hub(**spec):
    """factories.hub with its VPCs out of the members' way (10.<i>.0.0/16, tests.test_transit's 10.100-103): no
    member may overlap the hub's CIDRs."""
    if "endpointVPCInventory" not in spec:
        inventory = factories.hub_doc()["spec"]["endpointVPCInventory"]
        for vpc, cidr in zip(inventory, ("172.17.0.0/16", "172.18.0.0/16")):
            vpc["cidr"] = cidr
        spec["endpointVPCInventory"] = inventory
    spec.setdefault("associatedVPCs", [{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "172.16.0.0/16"}])
    return factories.hub(**spec)


def plan_mesh(h, clusters, **kw):
    """The mesh of a fleet whose namespaces own their accounts (doubles.factories.NAMESPACES)."""
    return resolve_all(fleet(h, clusters, **kw)).mesh


def changed_stacks(before, after):
    """Cluster keys whose share differs between two plans: the stacks whose inputs an event changes."""
    def built(share):  # what the stack builds: its limits are the preflight's, outside the digest
        return share.model_copy(update={"limits": None}) if share is not None else None

    return {key for key in set(before) | set(after) if built(before.get(key)) != built(after.get(key))}


def group(n: int, **kw):
    return [member(i, **kw) for i in range(n)]


def owned(plan) -> dict[str, str]:
    """pair name → owner key, from the shares (what the stacks will build)."""
    out = {}
    for key, share in plan.shares.items():
        for pair in share.pairs:
            assert pair.name not in out, f"pair {pair.name} built twice"
            out[pair.name] = key
    return out


def stamped(clusters, plan):
    """The clusters as they are once the service has written `plan.stamps`."""
    out = []
    for c in clusters:
        stamp = plan.stamps.get(c.key)
        out.append(c.model_copy(update={"status": {JOIN_STATUS_KEY: stamp}}) if stamp else c)
    return out


# --- membership -----------------------------------------------------------------------

@pytest.mark.parametrize("kw, expected", [
    ({}, "core"),
    ({"enabled": None}, None),  # label only
    ({"enabled": "false"}, None),
    ({"enabled": "True"}, None),  # the annotation is the string "true", as in the design
    ({"label": False}, None),  # annotation only
    ({"deleting": True}, None),
])
def test_membership_needs_the_label_and_the_annotation(kw, expected):
    assert group_of(member(1, **kw)) == expected


def test_clusters_of_other_groups_and_non_members_are_left_alone():
    plan = plan_mesh(hub(), [member(0), member(1), member(2, group="edge"), member(3, enabled="false"),
                             member(4, group="edge")])
    assert plan.groups["core"].members == ("acme/c00", "globex/c01")
    assert plan.groups["edge"].members == ("acme/c02", "acme/c04")
    assert "globex/c03" not in plan.shares


# --- one pair per pair, owned by the later joiner -----------------------------------------

@pytest.mark.parametrize("n", [2, 3, 10])
def test_every_pair_is_built_exactly_once_by_the_later_joiner(n):
    clusters = group(n)
    plan = plan_mesh(hub(), clusters)
    order = plan.groups["core"].members
    assert order == tuple(c.key for c in clusters)  # unstamped: oldest creationTimestamp first
    owners = owned(plan)
    expected = {pair_name(a.key.replace("/", "."), b.key.replace("/", ".")): b.key
                for a, b in itertools.combinations(clusters, 2)}
    assert owners == expected
    assert len(owners) == n * (n - 1) // 2
    assert {(p.name, p.owner) for p in plan.groups["core"].pairs} == set(owners.items())


def test_the_share_carries_each_peers_target_for_the_owner_to_build_its_provider():
    plan = plan_mesh(hub(), group(4))
    share = plan.share("globex/c03")  # 333333333333 eu-west-1
    peers = {p.peer.key: p.peer for p in share.pairs}
    assert set(peers) == {"acme/c00", "globex/c01", "acme/c02"}
    c02 = peers["acme/c02"]
    assert (c02.target.account_id, c02.target.region) == ("222222222222", "eu-west-1")
    assert c02.target.role_arn == "arn:aws:iam::222222222222:role/hubwright"
    assert c02.target.session_name == "hubwright-mesh-globex.c03"  # CloudTrail says which stack acted
    assert (c02.cidrs, c02.route_table_ids, c02.security_group_ids) == (("10.2.0.0/16",), ("rtb-002a",), ("sg-002",))


def test_order_and_ownership_do_not_depend_on_the_order_clusters_are_listed():
    clusters = group(6)
    assert plan_mesh(hub(), clusters).shares == plan_mesh(hub(), clusters[::-1]).shares


# --- join: one stack run -------------------------------------------------------------------

def test_a_joiner_owns_all_its_pairs_so_a_join_changes_one_stack_even_when_it_is_the_oldest_cluster():
    members = group(5)
    members = stamped(members, plan_mesh(hub(), members))  # the service has recorded their join order
    before = plan_mesh(hub(), members + [member(9, enabled="false", created="2020-01-01T00:00:00Z")])
    after = plan_mesh(hub(), members + [member(9, created="2020-01-01T00:00:00Z")])

    assert changed_stacks(before.shares, after.shares) == {"globex/c09"}
    assert {p.peer.key for p in after.share("globex/c09").pairs} == {c.key for c in members}
    assert after.stamps == {"globex/c09": {"group": "core", "order": 6}}


def test_recording_join_stamps_never_moves_a_pair():
    clusters = group(6)
    first = plan_mesh(hub(), clusters)
    assert list(first.stamps) == [c.key for c in clusters]  # written in join order
    again = plan_mesh(hub(), stamped(clusters, first))
    assert again.shares == first.shares and again.stamps == {}


def test_a_half_written_batch_of_stamps_keeps_the_order():
    clusters = group(4)
    first = plan_mesh(hub(), clusters)
    half = dict(list(first.stamps.items())[:2])
    partly = [c.model_copy(update={"status": {JOIN_STATUS_KEY: half[c.key]}}) if c.key in half else c
              for c in clusters]
    assert plan_mesh(hub(), partly).shares == first.shares


def test_a_stamp_of_another_group_counts_as_none_and_a_stale_stamp_is_reported():
    moved = member(0, group="edge").model_copy(update={"status": {JOIN_STATUS_KEY: {"group": "core", "order": 1}}})
    left = member(1, label=False).model_copy(update={"status": {JOIN_STATUS_KEY: {"group": "core", "order": 2}}})
    plan = plan_mesh(hub(), [moved, left, member(2, group="edge", stamp=1)])
    assert plan.groups["edge"].members == ("acme/c02", "acme/c00")
    assert plan.stamps == {"acme/c00": {"group": "edge", "order": 2}}
    assert set(plan.unstamp) == {"acme/c00", "globex/c01"}


# --- leave: the leaver and every later joiner ----------------------------------------------

@pytest.mark.parametrize("how", [{"label": False}, {"enabled": None}, {"deleting": True}])
@pytest.mark.parametrize("k", [0, 4, 9])
def test_a_leave_changes_the_leaver_and_every_later_joiner(how, k):
    n = 10
    clusters = group(n)
    before = plan_mesh(hub(), clusters)
    after = plan_mesh(hub(), [member(i, **how) if i == k else c for i, c in enumerate(clusters)])

    changed = changed_stacks(before.shares, after.shares)
    assert changed == {clusters[k].key} | {c.key for c in clusters[k + 1:]}
    assert len(changed) == 1 + (n - 1 - k)  # 1 + (N - position) runs, position counted from 1
    assert clusters[k].key not in after.shares
    for share in after.shares.values():  # no pair with the leaver survives anywhere
        assert clusters[k].key not in {p.peer.key for p in share.pairs}
    assert len(owned(after)) == (n - 1) * (n - 2) // 2


def test_a_peer_network_change_reaches_only_the_stacks_that_build_routes_into_it():
    clusters = group(5)
    before = plan_mesh(hub(), clusters)
    grown = member(2, routeTableIDs=["rtb-002a", "rtb-002z"])
    after = plan_mesh(hub(), [grown if c.key == grown.key else c for c in clusters])
    # c02 owns its pairs with c00 and c01; c03 and c04 own theirs with c02.
    assert changed_stacks(before.shares, after.shares) == {"acme/c02", "globex/c03", "acme/c04"}


# --- bad input and limits -------------------------------------------------------------------

def test_overlapping_cidrs_reject_the_later_member_naming_both_clusters_and_both_cidrs():
    clusters = group(3) + [member(3, cidr="10.1.128.0/17")]  # inside globex/c01's 10.1.0.0/16
    plan = plan_mesh(hub(), clusters)
    err = plan.errors["globex/c03"]
    assert err.reason == "MeshCIDROverlap"
    [e] = err.errors
    assert e.obj == "HubCluster globex/c03" and e.field == "spec.network.cidr"
    for text in ("10.1.128.0/17", "globex/c03", "10.1.0.0/16", "globex/c01"):
        assert text in e.reason
    # The existing members keep their mesh; the rejected one is in nobody's share.
    assert plan.groups["core"].members == ("acme/c00", "globex/c01", "acme/c02")
    assert plan.groups["core"].rejected == ("globex/c03",)
    assert all("globex/c03" not in {p.peer.key for p in s.pairs} for s in plan.shares.values())


def test_resolve_fleet_puts_the_overlap_on_the_cluster_and_keeps_the_others_runnable():
    clusters = (member(0), member(1, cidr="10.0.128.0/17"))
    resolved = resolve_fleet(fleet(hub(), clusters))
    assert isinstance(resolved["acme/c00"], StackInputs)
    assert isinstance(resolved["globex/c01"], InvalidSpec)
    assert "10.0.128.0/17" in str(resolved["globex/c01"]) and "10.0.0.0/16" in str(resolved["globex/c01"])
    assert "acme/c00" in str(resolved["globex/c01"])


@pytest.mark.parametrize("cidr, where, hub_cidr", [
    ("172.17.4.0/24", "HubConfig default spec.endpointVPCInventory[0] (VPC vpc-0hub1)", "172.17.0.0/16"),
    ("172.16.9.0/24", "HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmt)", "172.16.0.0/16"),
    ("192.168.0.0/16", "HubConfig default spec.mesh.reservedCIDRs[1]", "192.168.128.0/20"),
])
def test_a_member_cidr_overlapping_a_hub_cidr_is_refused_before_it_takes_a_place(cidr, where, hub_cidr):
    """A tenant declaring the hub's range would own pair routes to it in other tenants' tables (issue 31, 1)."""
    h = hub(mesh={"reservedCIDRs": ["198.18.0.0/15", "192.168.128.0/20"]})
    # The hostile member joins first; the honest one after it overlaps it, and still gets in.
    clusters = [member(0, cidr=cidr, created="2024-01-01T00:00:00Z"), member(1), member(2, cidr=cidr)]
    plan = plan_mesh(h, clusters)
    err = plan.errors["acme/c00"]
    assert err.reason == "MeshCIDROverlap"
    [e] = err.errors
    assert (e.obj, e.field) == ("HubCluster acme/c00", "spec.network.cidr")
    assert f"CIDR {cidr} of HubCluster acme/c00 overlaps CIDR {hub_cidr} of {where}, which the hub owns" in e.reason
    assert plan.groups["core"].members == ("globex/c01",)
    assert plan.errors["acme/c02"].reason == "MeshCIDROverlap"  # the same rule, whoever joins
    assert all(cidr not in s.member.cidrs and all(cidr not in p.peer.cidrs for p in s.pairs) for s in plan.shares.values())


def test_member_cidrs_bound_what_a_member_may_declare():
    h = hub(mesh={"groups": {"core": {"memberCIDRs": ["10.0.0.0/14", "10.8.0.0/16"]}}})
    plan = plan_mesh(h, [member(i) for i in range(5)] + [member(8, cidr="10.8.4.0/24")])
    assert plan.groups["core"].members == ("acme/c00", "globex/c01", "acme/c02", "globex/c03", "acme/c08")
    err = plan.errors["acme/c04"]
    assert err.reason == "MeshCIDRNotAllowed" and err.errors[0].field == "spec.network.cidr"
    assert "CIDR 10.4.0.0/16 of HubCluster acme/c04 is in none of mesh group core's memberCIDRs " \
           "(10.0.0.0/14, 10.8.0.0/16)" in str(err)
    share = plan.shares["acme/c08"]
    assert share.limits.member_cidrs == ("10.0.0.0/14", "10.8.0.0/16")
    assert [v.vpc_id for v in share.limits.hub_vpcs] == ["vpc-0hub1", "vpc-0hubeu", "vpc-0mgmt"]


def test_an_associated_vpc_without_a_cidr_is_checked_with_the_blocks_looked_up_for_it():
    from stacks.mesh.hub_cidrs import HubCidr, hub_cidrs, hub_overlap

    h = hub(associatedVPCs=[{"region": "eu-west-1", "vpcID": "vpc-0mgmteu"}])
    declared = hub_cidrs(h)
    assert [c.cidr for c in declared] == ["172.17.0.0/16", "172.18.0.0/16"]  # nothing declared for vpc-0mgmteu
    looked = hub_cidrs(h, {"vpc-0mgmteu": ["10.20.0.0/16", "100.64.0.0/16"]})
    assert looked[-2:] == (
        HubCidr(owner="HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmteu), a CIDR block of the VPC in the "
                      "hub account", cidr="10.20.0.0/16"),
        HubCidr(owner="HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmteu), a CIDR block of the VPC in the "
                      "hub account", cidr="100.64.0.0/16"))
    assert hub_overlap("HubCluster acme/c20", "10.20.0.0/16", declared, "core") is None
    refused = hub_overlap("HubCluster acme/c20", "10.20.0.0/16", looked, "core")
    assert refused.reason == "MeshCIDROverlap" and "vpc-0mgmteu" in str(refused)


@pytest.mark.parametrize("limit, field, text", [
    ({"peeringsPerVPC": 3}, "peeringsPerVPC", "4 VPC peerings on its VPC (HubConfig spec.mesh.peeringsPerVPC is 3"),
    ({"routesPerTable": 3}, "routesPerTable", "4 mesh routes in each of its route tables "
                                              "(HubConfig spec.mesh.routesPerTable is 3"),
])
def test_a_group_past_the_aws_limits_rejects_the_joiners_beyond_them_with_the_numbers(limit, field, text):
    h = hub(mesh=limit)
    plan = plan_mesh(h, group(6))
    assert plan.groups["core"].members == ("acme/c00", "globex/c01", "acme/c02", "globex/c03")
    assert set(plan.errors) == {"acme/c04", "globex/c05"}
    err = plan.errors["acme/c04"]
    assert err.reason == "MeshLimitExceeded"
    assert "mesh group core already has 4 members" in str(err) and text in str(err)
    assert "Transit Gateway" in str(err)
    assert max(len(s.pairs) for s in plan.shares.values()) == 3


def test_default_limits_admit_51_members_and_reject_the_52nd():
    plan = plan_mesh(hub(), [member(i, cidr=f"10.{i}.0.0/16") for i in range(52)])
    assert len(plan.groups["core"].members) == 51
    assert "already has 51 members; joining would need 51 VPC peerings" in str(plan.errors["globex/c51"])


def test_a_member_without_route_tables_or_node_groups_is_rejected_naming_the_field():
    plan = plan_mesh(hub(), [member(0), member(1, routeTableIDs=[], nodeSecurityGroupIDs=[])])
    fields = {e.field for e in plan.errors["globex/c01"].errors}
    assert fields == {"spec.network.routeTableIDs", "spec.network.nodeSecurityGroupIDs"}
    dedicated = hub(mesh={"groups": {"core": {"securityGroup": "dedicated"}}})
    plan = plan_mesh(dedicated, [member(0), member(1, nodeSecurityGroupIDs=[])])
    assert plan.errors == {} and plan.share("globex/c01").member.dedicated_security_group == \
        "hubwright-mesh-globex.c01"


def test_a_member_whose_account_is_not_mapped_drops_out_and_resolve_says_why():
    stranger = member(1, account="444444444444")  # globex owns 444444444444, which the role map lacks
    namespaces = {**factories.NAMESPACES, "globex": factories.owned("444444444444")}
    resolved = resolve_fleet(fleet(hub(), (member(0), stranger, member(2)), namespaces=namespaces))
    assert resolved["globex/c01"].reason == "AccountNotMapped"
    assert [p.peer.key for p in resolved["acme/c02"].mesh.pairs] == ["acme/c00"]


# --- the share inside StackInputs ----------------------------------------------------------

def test_the_share_round_trips_through_the_stack_config_and_moves_the_digest():
    resolved = resolve_fleet(fleet(hub(), tuple(group(3))))
    inputs = resolved["acme/c02"]
    back = StackInputs.from_config(inputs.to_config())
    assert back.digest() == inputs.digest() and back.mesh.limits is None  # the preflight's limits stay behind
    assert back == inputs.model_copy(update={"mesh": inputs.mesh.model_copy(update={"limits": None})})
    alone = resolve_fleet(fleet(hub(), (member(2),)))["acme/c02"]
    assert alone.mesh.pairs == () and alone.digest() != inputs.digest()


@pytest.mark.live
@pytest.mark.parametrize("first", ["stacks.mesh.share", "stacks.mesh.plan", "stacks.inputs", "stacks.accounts",
                                   "stacks.resolve"])
def test_stacks_modules_import_in_any_order(first):
    code = (f"import {first}\nfrom stacks.inputs import StackInputs\nfrom stacks.mesh.share import MeshShare\n"
            "assert StackInputs.model_fields['mesh'].annotation is not None\n"
            "print(StackInputs.model_json_schema()['properties']['mesh'] is not None)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


# --- tenancy: groups are namespace-local unless the hub spans them ---------------------------

def test_the_same_label_in_two_namespaces_makes_two_groups_that_never_peer():
    plan = plan_mesh(local_hub(), group(4))  # no declaration: acme/core and globex/core
    assert plan.groups["acme/core"].members == ("acme/c00", "acme/c02")
    assert plan.groups["globex/core"].members == ("globex/c01", "globex/c03")
    for share in plan.shares.values():
        assert {p.peer.key.split("/")[0] for p in share.pairs} <= {share.member.key.split("/")[0]}


def test_a_namespace_the_hub_did_not_list_is_refused_naming_the_group():
    h = local_hub(mesh={"groups": {"core": {"namespaces": ["acme"]}}})
    plan = plan_mesh(h, group(3))
    assert plan.groups["core"].members == ("acme/c00", "acme/c02")
    err = plan.errors["globex/c01"]
    assert err.reason == "NotInMeshGroup" and err.errors[0].field == "metadata.labels[hubwright.io/mesh]"
    assert "mesh group core spans only the namespaces" in str(err) and "globex is not one of them" in str(err)


def test_undeclaring_a_spanning_group_keeps_every_same_namespace_peering_as_it_is():
    """Join stamps and pair names do not depend on the kind of group: no same-namespace pair is replaced."""
    clusters = group(6)
    spanning = plan_mesh(hub(), clusters)
    clusters = stamped(clusters, spanning)  # the service recorded the join order under the spanning group
    spanning = plan_mesh(hub(), clusters)
    local = plan_mesh(local_hub(), clusters)
    same_ns = {name: owner for name, owner in owned(spanning).items()
               if len({side.split(".")[0] for side in name.split("+")}) == 1}
    assert same_ns and {n: o for n, o in owned(local).items()} == same_ns  # same names, same owners
    for key, share in local.shares.items():
        before = {p.name: p for p in spanning.shares[key].pairs}
        assert all(before[p.name] == p for p in share.pairs)  # each kept pair has the same inputs
    assert local.stamps == {}  # nobody is re-stamped


# --- the pre-flight's route rule (automation.adapters.aws.mesh_cidrs reads the tables; stacks.mesh decides) -------

def test_a_pair_route_beats_only_a_wider_route_that_is_not_the_meshs():
    from stacks.mesh.routes import FoundRoute, pair_routes, route_hijacks

    h = hub(mesh={"groups": {"core": {"memberCIDRs": ["10.0.0.0/12"]}}})
    clusters = [member(1, cidr="10.1.0.0/16"), member(2, cidr="10.40.9.0/24")]  # c02 joins last: owns the pair
    assert plan_mesh(h, clusters).errors["acme/c02"].reason == "MeshCIDRNotAllowed"  # outside memberCIDRs
    share = plan_mesh(hub(), clusters).shares["acme/c02"]
    routes = pair_routes(share)
    assert {(r.member, r.table, r.cidr) for r in routes} == {
        ("globex/c01", "rtb-001a", "10.40.9.0/24"), ("globex/c01", "rtb-001b", "10.40.9.0/24"),
        ("acme/c02", "rtb-002a", "10.1.0.0/16")}

    def found(*routes):
        return {"rtb-001b": tuple(FoundRoute(cidr=c, target=t) for c, t in routes)}

    assert route_hijacks(share, found(("10.40.0.0/16", "vgw-1")))  # wider, someone else's: it would lose
    assert route_hijacks(share, found(("10.0.0.0/8", "tgw-corp")))
    for harmless in (("0.0.0.0/0", "igw-1"),  # the default route: beaten by design
                     ("10.40.9.0/24", "vgw-1"),  # the same prefix: AWS refuses the duplicate, nothing is taken
                     ("10.40.9.0/28", "vgw-1"),  # narrower: it keeps winning its range
                     ("10.40.0.0/16", "local"),
                     ("10.1.0.0/16", "pcx-1"),  # the mesh's own (a member CIDR)
                     ("192.168.0.0/16", "vgw-1")):  # elsewhere
        assert route_hijacks(share, found(harmless)) == [], harmless
    # Inside memberCIDRs: the range the administrator gave the members.
    ranged = share.model_copy(update={"limits": share.limits.model_copy(update={"member_cidrs": ("10.40.0.0/16",)})})
    assert route_hijacks(ranged, found(("10.40.0.0/16", "vgw-1"))) == []
    # With summary routes on a Transit Gateway there are no pair routes to beat (the summaries are the hub's).
    from stacks.transit import TransitAttachment
    summarised = share.model_copy(update={"routes_via": "transitGateway", "attachment": TransitAttachment(
        transit_stack="_tgw_111111111111", transit_gateway_id="tgw-0", subnet_ids=("subnet-0a",),
        summary_cidrs=("10.0.0.0/8",))})
    assert pair_routes(summarised) == () and route_hijacks(summarised, found(("10.40.0.0/16", "vgw-1"))) == []


def test_the_hub_cidr_index_finds_exactly_the_overlaps_a_scan_finds():
    import ipaddress
    import random

    from stacks.mesh.hub_cidrs import HubCidr, HubCidrs

    rng = random.Random(31)

    def cidr():
        prefix = rng.choice((8, 12, 16, 20, 24, 28))
        net = ipaddress.ip_network(f"10.{rng.randrange(4)}.{rng.randrange(256)}.{rng.randrange(256)}/{prefix}",
                                   strict=False)
        return str(net)

    for _ in range(200):
        owned = [HubCidr(owner=f"o{i}", cidr=cidr()) for i in range(rng.randrange(0, 12))]
        index = HubCidrs(owned)
        for _ in range(20):
            net = ipaddress.ip_network(cidr())
            scan = [c for c in owned if net.overlaps(ipaddress.ip_network(c.cidr))]
            found = index.overlapping(net)
            assert (found is None) == (not scan) and (found is None or found in scan), (net, owned, found)
