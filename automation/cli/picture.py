"""The mesh as a picture: `python -m automation plan --format dot|mermaid`.

One box per group, labelled with its state (topology, or the migration step); a node per cluster (name,
account, region, CIDR blocks); an edge per VPC peering while the group has peerings, and while it has attachments
a node per Transit Gateway (network account, region), an edge from each member to its region's gateway and
one between the gateways of two regions the group spans. Pure text, sorted, so the same fleet draws the same.

A large group (more than SUMMARY_MEMBERS clusters, or more than SUMMARY_LINKS links: a full mesh of 12 is 66
peerings) is drawn as a summary instead: its gateways, its counts (members, links, refused) in the box's label,
and one table of its members in join order, each with the links it owns (a peering is owned by the later
joiner, stacks.mesh; an attachment by its member) and each refused cluster with its reason. A picture with no
group says why it is empty.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from stacks.mesh.membership import group_of
from stacks.mesh.plan import GroupView, MeshPlan
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.resolve import Fleet

SUMMARY_MEMBERS = 6  # clusters (members and refused) a group may have and still be drawn link by link
SUMMARY_LINKS = 15  # links (peerings, attachments, gateway peerings) likewise: a full mesh of 6


@dataclass(frozen=True)
class _Node:
    id: str
    label: str
    gateway: bool = False
    table: bool = False  # a summary's table of members: lines left-aligned


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
    """Each group's nodes and edges, in group-key order (a large group's summary: see the module's doc)."""
    out = []
    for key, view in sorted(mesh.groups.items()):
        phase = view.phase
        members = [mesh.shares[m].member for m in view.members]
        nodes = [_Node(_id(key, m.key), f"{m.key}\\n{m.target.account_id} {m.target.region}\\n{', '.join(m.cidrs)}")
                 for m in members]
        edges: list[_Edge] = []
        gateways: dict[str, _Node] = {}
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
        label = f"{key}: {view.state.describe()}"
        if len(members) + len(view.rejected) > SUMMARY_MEMBERS or len(edges) > SUMMARY_LINKS:
            out.append(_summary(key, view, mesh, label, list(gateways.values()), edges))
            continue
        left_out = tuple(_Node(_id(key, k), f"{k}\\n(left out)") for k in view.rejected)
        out.append(_Group(_id(key), label, tuple(nodes), tuple(sorted(
            edges, key=lambda e: (e.a, e.b))), left_out))
    return out


def _numbers(indexes: list[int]) -> str:
    """[1, 2, 3, 5] -> "#1-#3, #5": the members a row's links go to, by their place in the table."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"#{r[0]}" if len(r) == 1 else f"#{r[0]}-#{r[-1]}" for r in runs)


def _summary(key: str, view: GroupView, mesh: MeshPlan, label: str, gateways: list[_Node],
             edges: list[_Edge]) -> _Group:
    """A large group: its gateways and the links between them, its counts, and one table of its members."""
    phase = view.phase
    place = {member: i + 1 for i, member in enumerate(view.members)}  # join order: the table's "#"
    owned: dict[str, list[int]] = {m: [] for m in view.members}
    for pair in view.pairs if phase.peerings else ():
        owned[pair.owner].append(place[pair.peer])
    peerings = sum(len(v) for v in owned.values())
    attachments = len(view.members) if gateways else 0
    rows = [f"#  member  account region  CIDR  links it owns (a peering is the later joiner's)"]
    for member in view.members:
        m = mesh.shares[member].member
        links = []
        if phase.peerings:
            links.append(f"{len(owned[member])} peering{'s' if len(owned[member]) != 1 else ''}"
                         + (f" with {_numbers(owned[member])}" if owned[member] else ""))
        if gateways:
            links.append(f"attachment to the {m.target.region} gateway")
        rows.append(f"{place[member]}  {m.key}  {m.target.account_id} {m.target.region}  {', '.join(m.cidrs)}  "
                    f"{', '.join(links) or 'none'}")  # no ";" after "#N": mermaid reads "#N;" as a character code
    for refused in view.rejected:
        error = mesh.errors.get(refused)
        why = f"{error.reason}: {error.errors[0].reason}" if error is not None and error.errors else "refused"
        rows.append(f"refused  {refused}  {why}")
    between = [e for e in edges if e.label == "TGW peering"]  # the gateways' own links: one per pair of regions
    kinds = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((peerings, "peering"), (attachments, "attachment"),
                                                                  (len(between), "gateway peering")) if n]
    counts = (f"{len(view.members)} members, {peerings + attachments + len(between)} links"
              f"{' (' + ', '.join(kinds) + ')' if kinds else ''}, {len(view.rejected)} refused")
    table = _Node(_id(key, "members"), "\\n".join(rows), table=True)
    return _Group(_id(key), f"{label} | {counts}", (*gateways, table), tuple(sorted(between, key=lambda e: (e.a, e.b))),
                  ())


def empty_reason(mesh: MeshPlan | None, fleet: Fleet) -> str | None:
    """Why the picture has no group (None when it has one): no cluster asks, none opted in, or all refused."""
    if mesh is not None and any(view.members for view in mesh.groups.values()):
        return None
    if mesh is not None and mesh.groups:
        refused = sum(len(view.rejected) for view in mesh.groups.values())
        return f"no mesh member: every cluster that asked to join ({refused}) was refused (see the plan's errors)"
    labelled = [c for c in fleet.clusters if c.metadata.labels.get(MESH_LABEL)]
    if labelled and not any(group_of(c) for c in labelled):
        return (f"no mesh member opted in: {len(labelled)} cluster(s) have the label {MESH_LABEL} but not the "
                f"annotation {MESH_ENABLED_ANNOTATION} set to true")
    defined = sorted(fleet.hub.spec.mesh.groups)
    return (f"no mesh groups: no HubCluster has the label {MESH_LABEL} (and {MESH_ENABLED_ANNOTATION} set to true)"
            + (f"; the HubConfig defines {', '.join(defined)}" if defined else ""))


def _quote(text: str) -> str:
    return text.replace('"', "'")


def render_dot(mesh: MeshPlan | None, why_empty: str | None = None) -> str:
    lines = ["graph mesh {", "  node [shape=box, fontsize=10];"]
    if why_empty:
        lines.append(f'  label="{_quote(why_empty)}";')
    for group in groups(mesh) if mesh is not None else ():
        lines.append(f"  subgraph cluster_{group.id} {{")
        lines.append(f'    label="{_quote(group.label)}";')
        for node in group.nodes:
            if node.table:  # dot: "\l" ends a left-justified line
                lines.append(f'    {node.id} [label="{_quote(node.label).replace(chr(92) + "n", chr(92) + "l")}\\l", '
                             f'shape=note, fontname=monospace];')
                continue
            shape = ", shape=hexagon" if node.gateway else ""
            lines.append(f'    {node.id} [label="{_quote(node.label)}"{shape}];')
        for node in group.left_out:
            lines.append(f'    {node.id} [label="{_quote(node.label)}", style=dashed, color=grey];')
        for edge in group.edges:
            lines.append(f'    {edge.a} -- {edge.b} [label="{edge.label}"];')
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_mermaid(mesh: MeshPlan | None, why_empty: str | None = None) -> str:
    lines = ["flowchart LR"]
    if why_empty:
        lines.append(f'  empty["{_quote(why_empty)}"]')
    drawn = groups(mesh) if mesh is not None else []
    for group in drawn:
        lines.append(f'  subgraph {group.id}["{_quote(group.label)}"]')
        for node in group.nodes:
            text = _quote(node.label).replace("\\n", "<br/>")
            lines.append(f'    {node.id}{{{{"{text}"}}}}' if node.gateway else f'    {node.id}["{text}"]')
        for node in group.left_out:
            lines.append(f'    {node.id}["{_quote(node.label).replace(chr(92) + "n", "<br/>")}"]:::leftout')
        for edge in group.edges:
            lines.append(f"    {edge.a} ---|{edge.label}| {edge.b}")
        lines.append("  end")
    if any(g.left_out for g in drawn):
        lines.append("  classDef leftout stroke-dasharray: 5 5,color:#888")
    return "\n".join(lines) + "\n"
