"""`plan --format dot|mermaid`: each mesh group drawn from the plan, and the README's picture kept current."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from automation.cli.picture import render_dot, render_mermaid
from stacks.resolve import resolve_all
from stacks.transit import GroupState, MeshStatus
from tests.factories import fleet
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


@pytest.mark.parametrize("fmt,parse", [("mermaid", mermaid_graph), ("dot", dot_graph)])
def test_a_peering_group_is_a_node_per_cluster_and_an_edge_per_pair(fmt, parse):
    text = cli("--hub", "examples/mesh/hub.yaml", "--clusters", "examples/mesh/clusters", "--format", fmt)
    declared, edges = parse(text)
    assert len(declared) == 4 and len(edges) == 6  # 4 members, 4 * 3 / 2 pairs
    assert {label for _, label, _ in edges} == {"peering"}
    assert all(a in declared and b in declared for a, _, b in edges)  # every edge's ends are drawn
    assert "payments: peering" in text
    assert "222222222222 us-east-1" in text and "333333333333 eu-west-1" in text and "10.13.0.0/16" in text


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


def test_the_readme_picture_is_what_the_command_draws():
    readme = (ROOT / "README.md").read_text()
    [block] = re.findall(r"```mermaid\n(.*?)```", readme, re.S)
    assert block == cli("--hub", "examples/transit/hub.yaml", "--clusters", "examples/transit/clusters",
                        "--format", "mermaid")
