"""The mesh as a picture: `python -m automation plan --format dot|mermaid`.

One box per group, labelled with its state (topology, or the migration step); a node per cluster (name,
account, region, CIDR); an edge per VPC peering while the group has peerings, and while it has attachments
a node per Transit Gateway (network account, region), an edge from each member to its region's gateway and
one between the gateways of two regions the group spans. Pure text, sorted, so the same fleet draws the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from stacks.mesh import MeshPlan


@dataclass(frozen=True)
class _Node:
    id: str
    label: str
    gateway: bool = False


@dataclass(frozen=True)
class _Edge:
    a: str
    b: str
    label: str


@dataclass(frozen=True)
class _Group:
    id: str
    label: str
    nodes: tuple[_Node, ...]
    edges: tuple[_Edge, ...]
    left_out: tuple[_Node, ...]


def _id(*parts: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", "__".join(parts))


def groups(mesh: MeshPlan) -> list[_Group]:
    """Each group's nodes and edges, in group-key order."""
    out = []
    for key, view in sorted(mesh.groups.items()):
        phase = view.phase
        members = [mesh.shares[m].member for m in view.members]
        nodes = [_Node(_id(key, m.key), f"{m.key}\\n{m.target.account_id} {m.target.region}\\n{m.cidr}")
                 for m in members]
        edges: list[_Edge] = []
        if phase.peerings:
            edges += [_Edge(_id(key, p.owner), _id(key, p.peer), "peering") for p in view.pairs]
        if phase.attachments and view.network_account is not None:
            regions = sorted({m.target.region for m in members})
            gateways = {r: _Node(_id(key, "tgw", r), f"Transit Gateway\\n{view.network_account} {r}", gateway=True)
                        for r in regions}
            nodes += gateways.values()
            edges += [_Edge(_id(key, m.key), gateways[m.target.region].id, "attachment") for m in members]
            edges += [_Edge(gateways[a].id, gateways[b].id, "TGW peering")
                      for i, a in enumerate(regions) for b in regions[i + 1:]]
        left_out = tuple(_Node(_id(key, k), f"{k}\\n(left out)") for k in view.rejected)
        out.append(_Group(_id(key), f"{key}: {view.state.describe()}", tuple(nodes), tuple(sorted(
            edges, key=lambda e: (e.a, e.b))), left_out))
    return out


def _quote(text: str) -> str:
    return text.replace('"', "'")


def render_dot(mesh: MeshPlan) -> str:
    lines = ["graph mesh {", "  node [shape=box, fontsize=10];"]
    for group in groups(mesh):
        lines.append(f"  subgraph cluster_{group.id} {{")
        lines.append(f'    label="{_quote(group.label)}";')
        for node in group.nodes:
            shape = ", shape=hexagon" if node.gateway else ""
            lines.append(f'    {node.id} [label="{_quote(node.label)}"{shape}];')
        for node in group.left_out:
            lines.append(f'    {node.id} [label="{_quote(node.label)}", style=dashed, color=grey];')
        for edge in group.edges:
            lines.append(f'    {edge.a} -- {edge.b} [label="{edge.label}"];')
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_mermaid(mesh: MeshPlan) -> str:
    lines = ["flowchart LR"]
    for group in groups(mesh):
        lines.append(f'  subgraph {group.id}["{_quote(group.label)}"]')
        for node in group.nodes:
            text = _quote(node.label).replace("\\n", "<br/>")
            lines.append(f'    {node.id}{{{{"{text}"}}}}' if node.gateway else f'    {node.id}["{text}"]')
        for node in group.left_out:
            lines.append(f'    {node.id}["{_quote(node.label).replace(chr(92) + "n", "<br/>")}"]:::leftout')
        for edge in group.edges:
            lines.append(f"    {edge.a} ---|{edge.label}| {edge.b}")
        lines.append("  end")
    if any(g.left_out for g in groups(mesh)):
        lines.append("  classDef leftout stroke-dasharray: 5 5,color:#888")
    return "\n".join(lines) + "\n"
