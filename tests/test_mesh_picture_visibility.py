"""The mesh picture as a tenant sees it (stacks.mesh.picture.groups with `shown`): built from what the viewer may
see only. Attack tests: a picture drawn for a viewer of namespace acme holds no name, key, account, CIDR, VPC,
region or count of globex's members, in a small group and a summarised one, with peerings and in every Transit
Gateway phase; with hide_accounts it holds no account but the viewer's own members' (not the network account)."""
import pytest

from stacks.mesh.picture import SUMMARY_MEMBERS, Group, empty_reason, groups
from stacks.mesh.svg import render_svg
from stacks.resolve import resolve_all
from stacks.transit import GroupState, MeshStatus, migration_steps, phase_of
from doubles.factories import HUB_ACCOUNT, fleet
from tests.test_mesh import hub, local_hub, member
from tests.test_transit import tgw_member

TGW = "transitGateway"


def acme(key: str) -> bool:
    return key.startswith("acme/")


def mesh_of(h, clusters, state: GroupState | None = None):
    status = MeshStatus({"core": state}, {}, {}) if state is not None else None
    return resolve_all(fleet(h, clusters, mesh_status=status)).mesh


def everything(pictures: list[Group]) -> str:
    """All a viewer could read of the pictures: the model (ids, labels, edges, reasons) and each drawn SVG."""
    return repr(pictures) + "".join(render_svg(g, lambda key: f"/clusters/{key}") for g in pictures)


def secrets_of(clusters) -> set[str]:
    """What acme must not learn of globex's clusters: names, keys, accounts, CIDR blocks, VPCs."""
    out: set[str] = set()
    for c in clusters:
        if c.metadata.namespace == "globex":
            net = c.spec.aws.network
            out |= {c.key, c.metadata.name, c.spec.account_id, net.vpc, *net.cidrs, *net.secondary_cidrs}
    return out


def leaks(text: str, clusters) -> list[str]:
    return sorted(s for s in secrets_of(clusters) if s and s in text)


TGW_HUB = hub(mesh={"groups": {"core": {"topology": TGW}}})
TGW_STATES = list(dict.fromkeys(s for start, end in (("peering", TGW), (TGW, "peering"))
                                for s in migration_steps(start, end) if phase_of(s).attachments))  # both ways


# --------------------------------------------------------------------------- a small peering group

def test_a_small_group_shows_the_viewers_members_and_their_pairs_only():
    clusters = [member(i) for i in range(8)] + [member(9, cidr="10.0.128.0/17")]  # globex/c09 overlaps acme/c00
    mesh = mesh_of(hub(), clusters)  # acme: c00 c02 c04 c06, globex: c01 c03 c05 c07 and c09 refused
    assert mesh.groups["core"].rejected == ("globex/c09",)
    [group] = groups(mesh, shown=acme)
    assert [n.member for n in group.nodes] == ["acme/c00", "acme/c02", "acme/c04", "acme/c06"]
    assert group.left_out == ()
    assert len(group.edges) == 6 and {e.label for e in group.edges} == {"peering"}  # 4 * 3 / 2: acme's pairs
    assert group.label == "core: peering"
    assert leaks(everything([group]), clusters) == []


def test_a_refused_cluster_of_the_viewer_is_drawn_without_the_words_that_name_the_other_tenant():
    clusters = [member(i) for i in range(4)] + [member(16, cidr="10.3.128.0/17")]  # overlaps globex/c03's block
    mesh = mesh_of(hub(), clusters)
    assert "globex/c03" in str(mesh.errors["acme/c16"]) and "10.3.0.0/16" in str(mesh.errors["acme/c16"])
    [full] = groups(mesh)
    assert "globex/c03" in full.left_out[0].reason  # the hub administrator's picture says with whom
    for hide in (False, True):
        [group] = groups(mesh, shown=acme, hide_accounts=hide)
        [refused] = group.left_out
        assert (refused.member, refused.reason) == ("acme/c16", "MeshCIDROverlap")
        assert leaks(everything([group]), clusters) == []


@pytest.mark.parametrize("others", [0, 1, 4, 9])
def test_a_small_group_looks_the_same_to_the_viewer_whatever_the_other_tenant_has(others):
    """No count, order or place of the viewer's picture depends on the hidden members: it is the same picture
    with no, one, four or nine globex members (a group of 13 is a summary for the hub administrator)."""
    mine = [member(i) for i in (0, 2, 4, 6)] + [member(8, cidr="10.2.128.0/17")]  # c08 overlaps acme/c02
    theirs = [member(2 * i + 1) for i in range(others)] + [member(21, cidr="10.4.128.0/17")] * (others > 0)
    mesh = mesh_of(hub(), mine + theirs)  # globex/c21 overlaps acme/c04: refused
    alone = groups(mesh_of(hub(), mine), shown=acme, hide_accounts=True)
    assert groups(mesh, shown=acme, hide_accounts=True) == alone
    assert everything(groups(mesh, shown=acme, hide_accounts=True)) == everything(alone)
    [group] = alone
    assert not any(n.table for n in group.nodes)  # 5 clusters: drawn link by link, not as a summary
    assert leaks(everything(alone), mine + theirs) == []


# --------------------------------------------------------------------------- a summarised group

def summary_rows(group: Group) -> list[str]:
    [table] = [n for n in group.nodes if n.table]
    return table.lines


@pytest.mark.parametrize("others", [0, 3, 9])
def test_a_summary_counts_and_numbers_the_viewers_members_only(others):
    mine = [member(i) for i in range(0, 16, 2)] + [member(16, cidr="10.2.128.0/17")]  # 8 members, 1 refused
    theirs = [member(2 * i + 1) for i in range(others)] + [member(19, cidr="10.2.64.0/18")]  # refused: acme/c02's
    clusters = mine + theirs
    mesh = mesh_of(hub(), clusters)
    assert "globex/c19" in mesh.groups["core"].rejected
    [group] = groups(mesh, shown=acme)
    assert len(mine) > SUMMARY_MEMBERS
    assert group.label == "core: peering | 8 members, 28 links (28 peerings), 1 refused"
    rows = summary_rows(group)
    members = [r.split("  ") for r in rows[1:] if not r.startswith("refused")]
    assert [m[0] for m in members] == [str(i) for i in range(1, 9)]  # numbered among acme's, no gap for globex
    assert [m[1] for m in members] == [f"acme/c{i:02d}" for i in range(0, 16, 2)]
    assert members[-1][4] == "7 peerings with #1-#7" and members[0][4] == "0 peerings"
    assert rows[-1] == "refused  acme/c16  MeshCIDROverlap"
    assert [n.member for n in group.nodes if n.table] == [None]
    [table] = [n for n in group.nodes if n.table]
    assert table.rows == (None, *(f"acme/c{i:02d}" for i in range(0, 18, 2)))  # the cluster each line is about
    assert leaks(everything([group]), clusters) == []
    assert groups(mesh_of(hub(), mine), shown=acme) == [group]  # the same summary without globex


def test_the_summary_depends_on_the_shown_members_not_the_whole_group():
    clusters = [member(i) for i in range(14)]  # 14 members: the administrator's picture is a summary
    mesh = mesh_of(hub(), clusters)
    assert any(n.table for n in groups(mesh)[0].nodes)
    [group] = groups(mesh, shown=lambda key: key in {"acme/c00", "acme/c02", "acme/c04"})
    assert [n.member for n in group.nodes] == ["acme/c00", "acme/c02", "acme/c04"] and len(group.edges) == 3


# --------------------------------------------------------------------------- Transit Gateway phases

@pytest.mark.parametrize("state", TGW_STATES, ids=lambda s: s.describe())
def test_in_every_gateway_phase_the_viewer_sees_its_regions_gateway_without_the_network_account(state):
    mine = [tgw_member(i, stamp=i + 1) for i in (0, 4, 8)]  # acme, all in us-east-1
    theirs = [tgw_member(i, stamp=i + 1) for i in (1, 3, 5, 7)]  # globex, in us-east-1 and eu-west-1
    clusters = mine + theirs
    mesh = mesh_of(TGW_HUB, clusters, state)
    [full] = groups(mesh)
    assert {n.id for n in full.nodes if n.gateway} == {"n_core__tgw__us_east_1", "n_core__tgw__eu_west_1"}
    [group] = groups(mesh, shown=acme, hide_accounts=True)
    gateways = [n for n in group.nodes if n.gateway]
    assert [(g.id, g.member, g.lines) for g in gateways] == [("n_core__tgw__us_east_1", None,
                                                              ["Transit Gateway", "us-east-1"])]
    assert not [e for e in group.edges if e.label == "TGW peering"]  # the eu-west-1 gateway is globex's alone
    attached = sorted(e.a for e in group.edges if e.label == "attachment")
    assert attached == ["n_core__acme_c00", "n_core__acme_c04", "n_core__acme_c08"]
    drawn = mesh.groups["core"].state  # the state the plan builds for (a recorded step may move on)
    assert len([e for e in group.edges if e.label == "peering"]) == (3 if phase_of(drawn).peerings else 0)
    assert group.label == f"core: {drawn.describe()}"
    text = everything([group])
    assert leaks(text, clusters) == [] and HUB_ACCOUNT not in text and "eu-west-1" not in text
    assert HUB_ACCOUNT in everything(groups(mesh, shown=acme))  # without hide_accounts the gateway says it
    assert groups(mesh_of(TGW_HUB, mine, state), shown=acme, hide_accounts=True) == [group]


@pytest.mark.parametrize("state", TGW_STATES, ids=lambda s: s.describe())
def test_a_summarised_gateway_group_counts_the_viewers_attachments_only(state):
    mine = [tgw_member(i, stamp=i + 1) for i in range(0, 16, 2)]  # 8 acme members in both regions
    theirs = [tgw_member(i, stamp=i + 1) for i in range(1, 12, 2)]
    clusters = mine + theirs
    mesh = mesh_of(TGW_HUB, clusters, state)
    [group] = groups(mesh, shown=acme, hide_accounts=True)
    drawn = mesh.groups["core"].state
    peerings = phase_of(drawn).peerings
    kinds = ("28 peerings, " if peerings else "") + "8 attachments, 1 gateway peering"
    assert group.label == f"core: {drawn.describe()} | 8 members, {37 if peerings else 9} links ({kinds}), 0 refused"
    assert [g.lines for g in group.nodes if g.gateway] == [["Transit Gateway", "eu-west-1"],
                                                           ["Transit Gateway", "us-east-1"]]
    text = everything([group])
    assert leaks(text, clusters) == [] and HUB_ACCOUNT not in text
    assert groups(mesh_of(TGW_HUB, mine, state), shown=acme, hide_accounts=True) == [group]


def test_with_hide_accounts_the_only_accounts_are_the_shown_members_own():
    clusters = [tgw_member(i, stamp=i + 1) for i in range(6)] + [tgw_member(6, cidr="10.0.0.0/16")]
    mesh = mesh_of(TGW_HUB, clusters, GroupState(topology=TGW))
    for picture in (groups(mesh, hide_accounts=True), groups(mesh, shown=acme, hide_accounts=True)):
        text = everything(picture)
        assert HUB_ACCOUNT not in text and "Transit Gateway" in text
    text = everything(groups(mesh, shown=acme, hide_accounts=True))
    assert "222222222222" in text and "333333333333" not in text


# --------------------------------------------------------------------------- groups the viewer has no part in

def test_a_group_with_nothing_the_viewer_may_see_is_left_out():
    mesh = mesh_of(local_hub(), [member(i) for i in range(6)])  # namespace-local: acme/core and globex/core
    assert [g.label for g in groups(mesh)] == ["acme/core: peering", "globex/core: peering"]
    pictures = groups(mesh, shown=acme)
    assert [g.label for g in pictures] == ["acme/core: peering"]
    assert "globex" not in everything(pictures)
    assert groups(mesh, shown=lambda key: False) == []


def test_a_group_where_the_viewer_has_only_a_refused_cluster_is_drawn_with_it():
    clusters = [member(1), member(3), member(4, cidr="10.1.0.0/24")]  # acme/c04 overlaps globex/c01
    [group] = groups(mesh_of(hub(), clusters), shown=acme)
    assert group.nodes == () and group.edges == ()
    assert [(n.member, n.reason) for n in group.left_out] == [("acme/c04", "MeshCIDROverlap")]
    assert leaks(everything([group]), clusters) == []


def test_why_the_viewers_picture_is_empty_counts_the_viewers_clusters_only():
    h = hub(mesh={"groups": {"core": {"memberCIDRs": ["10.1.0.0/16", "10.3.0.0/16"]}}})
    built = fleet(h, [member(i) for i in range(4)] + [member(5, cidr="10.1.0.0/24")])  # acme's outside memberCIDRs
    mesh = resolve_all(built).mesh
    assert len(mesh.groups["core"].rejected) == 3 and empty_reason(mesh, built) is None
    assert empty_reason(mesh, built, shown=acme) == \
        "no mesh member: every cluster that asked to join (2) was refused (see the plan's errors)"
    assert empty_reason(mesh, built, shown=lambda key: False) == \
        "no mesh groups: no HubCluster has the label hubwright.io/mesh (and hubwright.io/mesh-enabled set to true)"
    assert "the HubConfig defines core" in empty_reason(None, fleet(h, []))  # the administrator's is told


# --------------------------------------------------------------------------- each node names its cluster

def test_member_and_left_out_nodes_name_their_cluster_gateways_and_tables_none():
    clusters = [tgw_member(i, stamp=i + 1) for i in range(3)] + [tgw_member(3, cidr="10.0.0.0/16")]
    [group] = groups(mesh_of(TGW_HUB, clusters, GroupState(topology=TGW)))
    assert [n.member for n in group.nodes if not n.gateway] == ["acme/c00", "globex/c01", "acme/c02"]
    assert {n.member for n in group.nodes if n.gateway} == {None}
    assert [n.member for n in group.left_out] == ["globex/c03"]
    assert group.left_out[0].reason.startswith("MeshCIDROverlap: ")
    [summary] = groups(mesh_of(hub(), [member(i) for i in range(8)]))
    assert [n.member for n in summary.nodes] == [None]
