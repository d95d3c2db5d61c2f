"""`plan --format dot|mermaid`: each mesh group drawn from the plan, and docs/mesh.md's picture kept current."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from automation.cli.picture import SUMMARY_MEMBERS, empty_reason, render_dot, render_mermaid
from stacks.resolve import resolve_all
from stacks.transit import GroupState, MeshStatus
from doubles.factories import fleet
from tests.test_transit import hub, tgw_member

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "automation", "plan", *args], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def mermaid_graph(text: str) -> tuple[set[str], list[tuple[str, str, str]]]:
    declared = set(re.findall(r"^\s+(n_\w+)(?:\[|\{\{)", text, re.M))
    edges = re.findall(r"^\s+(n_\w+) ---\|([^|]+)\| (n_\w+)$", text, re.M)
    return declared, [(a, label, b) for a, label, b in edges]


def dot_graph(text: str) -> tuple[set[str], list[tuple[str, str, str]]]:
    assert text.startswith("graph mesh {") and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    declared = set(re.findall(r"^\s+(n_\w+) \[label=", text, re.M))
    edges = re.findall(r'^\s+(n_\w+) -- (n_\w+) \[label="([^"]+)"\];$', text, re.M)
    return declared, [(a, label, b) for a, b, label in edges]


@pytest.mark.live
@pytest.mark.parametrize("fmt,parse", [("mermaid", mermaid_graph), ("dot", dot_graph)])
def test_a_peering_group_is_a_node_per_cluster_and_an_edge_per_pair(fmt, parse):
    text = cli("--hub", "examples/mesh/hub.yaml", "--clusters", "examples/mesh/clusters", "--format", fmt)
    declared, edges = parse(text)
    assert len(declared) == 4 and len(edges) == 6  # 4 members, 4 * 3 / 2 pairs
    assert {label for _, label, _ in edges} == {"peering"}
    assert all(a in declared and b in declared for a, _, b in edges)  # every edge's ends are drawn
    assert "payments: peering" in text
    assert "222222222222 us-east-1" in text and "333333333333 eu-west-1" in text and "10.13.0.0/16" in text


@pytest.mark.live
@pytest.mark.parametrize("fmt,parse", [("mermaid", mermaid_graph), ("dot", dot_graph)])
def test_a_transit_gateway_group_attaches_each_member_to_its_regions_gateway(fmt, parse):
    text = cli("--hub", "examples/transit/hub.yaml", "--clusters", "examples/transit/clusters", "--format", fmt)
    declared, edges = parse(text)
    gateways = {n for n in declared if "__tgw__" in n}
    assert gateways == {"n_core__tgw__eu_west_1", "n_core__tgw__us_east_1"}
    attachments = [(a, b) for a, label, b in edges if label == "attachment"]
    assert len(attachments) == 4 and {b for _, b in attachments} == gateways
    assert [(a, b) for a, label, b in edges if label == "TGW peering"] == \
        [("n_core__tgw__eu_west_1", "n_core__tgw__us_east_1")]
    assert not [e for e in edges if e[1] == "peering"]
    assert "Transit Gateway" in text and "444444444444 us-east-1" in text


def test_a_migrating_group_draws_both_connections_and_says_which_step():
    h = hub(mesh={"groups": {"core": {"topology": "transitGateway"}}})
    clusters = [tgw_member(i, stamp=i + 1) for i in range(3)]
    state = GroupState(topology="peering", migrating_to="transitGateway", step="routes")
    mesh = resolve_all(fleet(h, clusters, mesh_status=MeshStatus({"core": state}, {}, {}))).mesh
    declared, edges = mermaid_graph(render_mermaid(mesh))
    labels = sorted(label for _, label, _ in edges)
    assert labels.count("peering") == 3 and labels.count("attachment") == 3
    assert "core: peering -> transitGateway (step routes)" in render_dot(mesh)


def test_members_left_out_are_drawn_apart_without_edges():
    h = hub(mesh={"groups": {"core": {"topology": "transitGateway"}}})
    mesh = resolve_all(fleet(h, [tgw_member(0), tgw_member(1, cidr="10.0.0.0/16")])).mesh  # overlaps c00
    text = render_mermaid(mesh)
    assert "globex/c01<br/>(left out)" in text and ":::leftout" in text
    assert "n_core__globex_c01 ---" not in text and "--- n_core__globex_c01" not in text


@pytest.mark.live
def test_the_documented_picture_is_what_the_command_draws():
    doc = (ROOT / "docs" / "mesh.md").read_text()
    [block] = re.findall(r"```mermaid\n(.*?)```", doc, re.S)
    assert block == cli("--hub", "examples/transit/hub.yaml", "--clusters", "examples/transit/clusters",
                        "--format", "mermaid")


# --------------------------------------------------------------------------- a large group: a summary, not a hairball

def _large_peering_group():
    from tests.test_mesh import hub as mesh_hub, member

    clusters = [member(i) for i in range(12)] + [member(12, cidr="10.3.0.0/16")]  # c12 overlaps c03: refused
    built = fleet(mesh_hub(), clusters)
    return built, resolve_all(built).mesh


def _rows(text: str) -> list[str]:
    [label] = re.findall(r'n_core__members(?:\[| \[label=)"([^"]*)', text)
    return [row for row in re.split(r"<br/>|\\l", label) if row]


def _places(numbers: str) -> set[int]:
    out: set[int] = set()
    for part in numbers.split(", "):
        first, _, last = part.partition("-")
        out |= set(range(int(first.lstrip("#")), int((last or first).lstrip("#")) + 1))
    return out


@pytest.mark.parametrize("render", [render_mermaid, render_dot])
def test_a_twelve_member_group_is_a_summary_with_every_member_who_owns_each_link_and_the_refused(render):
    built, mesh = _large_peering_group()
    text = render(mesh, empty_reason(mesh, built))
    assert len(text.splitlines()) < 12  # was 13 nodes and 66 labelled edges
    assert "peering|" not in text and 'label="peering"' not in text  # no per-link edge
    assert "core: peering | 12 members, 66 links (66 peerings), 1 refused" in text
    rows = _rows(text)
    view = mesh.groups["core"]
    members = [r.split("  ") for r in rows[1:] if not r.startswith("refused")]
    assert [m[1] for m in members] == list(view.members)  # every member, in join order
    place = {key: i + 1 for i, key in enumerate(view.members)}
    for number, key, _, cidr, links in members:  # each row: the peerings its member owns, by place
        owned = {place[p.peer] for p in view.pairs if p.owner == key}
        assert int(number) == place[key]
        assert _places(links.split(" with ", 1)[1]) == owned if owned else links == "0 peerings"
    assert sum(len({p for p in view.pairs if p.owner == key}) for key in view.members) == 66
    [refused] = [r for r in rows if r.startswith("refused")]
    assert "acme/c12" in refused and "MeshCIDROverlap" in refused and "10.3.0.0/16" in refused


def test_a_large_transit_gateway_group_draws_its_gateways_and_their_peering_and_a_table_not_each_attachment():
    h = hub(mesh={"groups": {"core": {"topology": "transitGateway"}}})
    mesh = resolve_all(fleet(h, [tgw_member(i, stamp=i + 1) for i in range(9)],
                             mesh_status=MeshStatus({"core": GroupState(topology="transitGateway")}, {}, {}))).mesh
    text = render_mermaid(mesh)
    declared, edges = mermaid_graph(text)
    assert {n for n in declared if "__tgw__" in n} == {"n_core__tgw__eu_west_1", "n_core__tgw__us_east_1"}
    assert edges == [("n_core__tgw__eu_west_1", "TGW peering", "n_core__tgw__us_east_1")]
    assert "9 members, 10 links (9 attachments, 1 gateway peering), 0 refused" in text
    rows = _rows(text)
    assert len(rows) == 10 and all("attachment to the " in r for r in rows[1:])


def test_a_small_group_is_still_drawn_link_by_link():
    from tests.test_mesh import hub as mesh_hub, member

    mesh = resolve_all(fleet(mesh_hub(), [member(i) for i in range(SUMMARY_MEMBERS)])).mesh
    declared, edges = mermaid_graph(render_mermaid(mesh))
    assert len(edges) == SUMMARY_MEMBERS * (SUMMARY_MEMBERS - 1) // 2 and "n_core__members" not in declared


# --------------------------------------------------------------------------- an empty picture says why

@pytest.mark.live
@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_an_empty_picture_says_there_are_no_mesh_groups(fmt):
    text = cli("--hub", "examples/hub.yaml", "--clusters", "examples/clusters", "--format", fmt)
    assert "no mesh groups: no HubCluster has the label hubwright.io/mesh" in text


def test_an_empty_picture_says_no_member_opted_in():
    from tests.test_mesh import hub as mesh_hub, member

    built = fleet(mesh_hub(), [member(0, enabled=None), member(1, enabled="false")])
    mesh = resolve_all(built).mesh
    reason = empty_reason(mesh, built)
    assert reason.startswith("no mesh member opted in: 2 cluster(s) have the label hubwright.io/mesh")
    assert reason in render_mermaid(mesh, reason) and reason in render_dot(mesh, reason)


def test_an_empty_picture_says_every_member_was_refused():
    from tests.test_mesh import hub as mesh_hub, member

    built = fleet(mesh_hub(mesh={"groups": {"core": {"memberCIDRs": ["192.168.0.0/16"]}}}),
                  [member(0), member(1)])
    mesh = resolve_all(built).mesh
    assert empty_reason(mesh, built) == \
        "no mesh member: every cluster that asked to join (2) was refused (see the plan's errors)"
    text = render_dot(mesh, empty_reason(mesh, built))
    assert "(left out)" in text and "was refused" in text
