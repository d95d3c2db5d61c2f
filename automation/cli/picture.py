"""The mesh as a picture: `python -m automation plan --format dot|mermaid`.

The picture's rules (a box per group, a node per cluster and per Transit Gateway, an edge per link, a large group
as a summary, why a picture is empty) are stacks.mesh.picture's, which the console's SVG (stacks.mesh.svg) draws
too; this module writes them as Graphviz dot or Mermaid text. Pure text, sorted, so the same fleet draws the same.
"""
from __future__ import annotations

from stacks.mesh.picture import SUMMARY_LINKS, SUMMARY_MEMBERS, empty_reason, groups
from stacks.mesh.plan import MeshPlan

# The model's constants and empty_reason stay importable from here (the plan command and its tests read them).
__all__ = ["SUMMARY_LINKS", "SUMMARY_MEMBERS", "empty_reason", "render_dot", "render_mermaid"]


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
