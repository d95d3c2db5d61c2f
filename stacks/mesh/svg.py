"""One mesh group as a standalone SVG document, for the console: render_svg draws stacks.mesh.picture's Group.
Pure, and deterministic: the same group draws the same bytes.

Layout: the group's label on top; its members on a circle (a rounded box each, its label's lines as text), its
Transit Gateways (hexagons) in a row at the circle's centre, a line per link under the boxes (its <title> says the
link's kind and ends); a summary's table below, one text row per line; the clusters left out in a row at the
bottom, dashed, with the reason they were refused. The viewBox is the content's extent.

A member, a left-out cluster and a table's row about a cluster are a link (`<a href>`, SVG 2, focusable) when
`href(cluster key)` gives a URL: its cluster's page. Accessible: the root is role="group" (not "img", which would hide its links from a screen reader), labelled by its <title>
and described by its <desc>. For a console whose CSP is `style-src 'self'` (no 'unsafe-inline'): no style
attribute or element, no script; presentation attributes (fill, stroke, font-size) and classes only. Every text
and attribute value is XML-escaped, and characters XML 1.0 forbids are dropped, so any name parses.
"""
from __future__ import annotations

import html
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Callable

from stacks.mesh.picture import Edge, Group, Node

FONT = 12  # px, the nodes' text (monospace: a character's width is known)
CHAR = 7.4  # px, the width of one character at FONT (0.6em, and a little room)
LINE = 15  # px between two lines' baselines
PAD = 8  # px between a box's edge and its text
GAP = 28  # px between two boxes
MARGIN = 12  # px around the content
TITLE_FONT = 14
REASON_WIDTH = 48  # characters per line of a left-out cluster's reason
CELL_GAP = 2  # characters between two columns of a table
CELL_WIDTH = 72  # characters: a table row's last cell wraps past it

KINDS = {"peering": "VPC peering", "attachment": "Transit Gateway attachment",
         "TGW peering": "Transit Gateway peering"}
STROKES = {"peering": ("steelblue", "1.5"), "attachment": ("darkgoldenrod", "1.5"),
           "TGW peering": ("darkgoldenrod", "3")}

Href = Callable[[str], str | None]  # cluster key -> the URL of its page, or None

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _esc(text: str) -> str:
    """Text or an attribute value as XML: & < > " ' escaped, characters XML 1.0 does not allow dropped."""
    return html.escape(_NOT_XML.sub("", text), quote=True)


def _n(value: float) -> str:
    """A coordinate: one decimal at most, never "-0"."""
    text = f"{round(value, 1) + 0.0:.1f}"
    text = text[:-2] if text.endswith(".0") else text
    return "0" if text == "-0" else text


def _class(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@dataclass(frozen=True)
class _Line:
    row: int  # the table's line (Node.lines) it draws, or wraps
    cells: tuple[tuple[int, str], ...]  # (the column's start, in characters; the text)


@dataclass(frozen=True)
class _Box:
    node: Node
    kind: str  # member, gateway, table, left-out
    lines: tuple[str, ...]
    x: float  # centre
    y: float
    w: float
    h: float
    grid: tuple[_Line, ...] = ()  # a table's lines as drawn

    def moved(self, dx: float, dy: float) -> _Box:
        return _Box(self.node, self.kind, self.lines, self.x + dx, self.y + dy, self.w, self.h, self.grid)

    @property
    def left(self) -> float:
        return self.x - self.w / 2

    @property
    def top(self) -> float:
        return self.y - self.h / 2


def _lines(node: Node) -> tuple[str, ...]:
    """The node's lines (picture.LINE_BREAK; a real newline breaks a line too), and a left-out node's reason."""
    lines = [part for line in node.lines for part in line.split("\n")]
    if node.reason:
        lines += textwrap.wrap(node.reason, REASON_WIDTH) or [node.reason]
    return tuple(lines)


def _grid(lines: tuple[str, ...]) -> tuple[_Line, ...]:
    """A table's lines in columns (SVG text collapses the two spaces between a row's cells): a column is as wide as
    its widest cell that is not a row's last; a last cell longer than CELL_WIDTH wraps under itself."""
    rows = [line.split("  ") for line in lines]
    widths: dict[int, int] = {}
    for cells in rows:
        for c, cell in enumerate(cells[:-1]):
            widths[c] = max(widths.get(c, 0), len(cell))
    starts = [0]
    for c in range(len(widths)):
        starts.append(starts[-1] + widths[c] + CELL_GAP)
    out: list[_Line] = []
    for i, cells in enumerate(rows):
        last = textwrap.wrap(cells[-1], CELL_WIDTH) or [cells[-1]]
        out.append(_Line(i, (*zip(starts, cells[:-1]), (starts[len(cells) - 1], last[0]))))
        out += [_Line(i, ((starts[len(cells) - 1], more),)) for more in last[1:]]
    return tuple(out)


def _box(node: Node, kind: str) -> _Box:
    lines = _lines(node)
    grid = _grid(lines) if kind == "table" else ()
    chars = max((at + len(text) for line in grid for at, text in line.cells), default=0) if grid else \
        max((len(line) for line in lines), default=0)
    w = chars * CHAR + 2 * PAD
    h = max(len(grid), len(lines)) * LINE + 2 * PAD - (LINE - FONT)
    if kind == "gateway":  # room for the hexagon's points
        w += h * 0.6
    return _Box(node, kind, lines, 0.0, 0.0, w, h, grid)


def _layout(group: Group) -> list[_Box]:
    """Every node's box, centred on the circle's centre (0, 0): members around, gateways in the middle, then the
    tables and the left-out row below."""
    members = [_box(n, "member") for n in group.nodes if not n.gateway and not n.table]
    gateways = [_box(n, "gateway") for n in group.nodes if n.gateway]
    boxes: list[_Box] = []
    row_w = sum(g.w for g in gateways) + GAP * max(len(gateways) - 1, 0)
    row_h = max((g.h for g in gateways), default=0.0)
    x = -row_w / 2
    for g in gateways:
        boxes.append(g.moved(x + g.w / 2, 0))
        x += g.w + GAP
    if members:
        w, h, n = max(m.w for m in members), max(m.h for m in members), len(members)
        radius = math.hypot(w + GAP, h + GAP) / (2 * math.sin(math.pi / n)) if n > 1 else 0.0
        if gateways:
            radius = max(radius, math.hypot((row_w + w) / 2 + GAP, (row_h + h) / 2 + GAP))
        for i, m in enumerate(members):
            angle = -math.pi / 2 + 2 * math.pi * i / n
            boxes.append(m.moved(radius * math.cos(angle), radius * math.sin(angle)))
    bottom = max((b.y + b.h / 2 for b in boxes), default=-GAP)
    for table in (_box(n, "table") for n in group.nodes if n.table):
        boxes.append(table.moved(0, bottom + GAP + table.h / 2))
        bottom += GAP + table.h
    left_out = [_box(n, "left-out") for n in group.left_out]
    x = -(sum(b.w for b in left_out) + GAP * max(len(left_out) - 1, 0)) / 2
    for b in left_out:
        boxes.append(b.moved(x + b.w / 2, bottom + GAP + b.h / 2))
        x += b.w + GAP
    return boxes


def _text_lines(box: _Box, centred: bool, fill: str) -> str:
    x = box.x if centred else box.left + PAD
    anchor = ' text-anchor="middle"' if centred else ""
    spans = "".join(f'<tspan x="{_n(x)}" y="{_n(box.top + PAD + FONT + i * LINE)}">{_esc(line)}</tspan>'
                    for i, line in enumerate(box.lines))
    return f'<text fill="{fill}"{anchor}>{spans}</text>'


def _link(url: str | None, key: str, inner: str) -> str:
    if url is None:
        return inner
    return (f'<a href="{_esc(url)}" tabindex="0" class="cluster-link"><title>{_esc(f"Open cluster {key}")}</title>'
            f"{inner}</a>")


def _node(box: _Box, href: Href) -> str:
    x0, y0, x1, y1 = box.left, box.top, box.left + box.w, box.top + box.h
    rect = f'x="{_n(x0)}" y="{_n(y0)}" width="{_n(box.w)}" height="{_n(box.h)}"'
    if box.kind == "gateway":
        inset = box.h * 0.3
        points = " ".join(f"{_n(px)},{_n(py)}" for px, py in (
            (x0 + inset, y0), (x1 - inset, y0), (x1, box.y), (x1 - inset, y1), (x0 + inset, y1), (x0, box.y)))
        return (f'<g class="node gateway"><polygon points="{points}" fill="lightyellow" stroke="darkgoldenrod" '
                f'stroke-width="1.5"/>{_text_lines(box, True, "black")}</g>')
    if box.kind == "table":
        rows: dict[int, list[str]] = {}
        for n, line in enumerate(box.grid):
            bold = ' font-weight="bold"' if line.row == 0 else ""  # the header
            spans = "".join(f'<tspan x="{_n(x0 + PAD + at * CHAR)}">{_esc(text)}</tspan>' for at, text in line.cells)
            rows.setdefault(line.row, []).append(
                f'<text y="{_n(y0 + PAD + FONT + n * LINE)}" fill="black"{bold}>{spans}</text>')
        texts = []
        for i, row in rows.items():
            key = box.node.rows[i] if i < len(box.node.rows) else None
            texts.append(_link(href(key), key, "".join(row)) if key is not None else "".join(row))
        return (f'<g class="node table"><rect {rect} rx="2" ry="2" fill="whitesmoke" stroke="gray"/>'
                f'{"".join(texts)}</g>')
    dashed = box.kind == "left-out"
    stroke = 'stroke="gray" stroke-dasharray="5 4"' if dashed else 'stroke="steelblue"'
    shape = f'<rect {rect} rx="6" ry="6" fill="white" {stroke} stroke-width="1.5"/>'
    inner = f'<g class="node {box.kind}">{shape}{_text_lines(box, True, "dimgray" if dashed else "black")}</g>'
    key = box.node.member
    return _link(href(key), key, inner) if key is not None else inner


def _name(node: Node) -> str:
    return node.member or " ".join(_lines(node))


def _edge(edge: Edge, at: dict[str, _Box]) -> str:
    a, b = at.get(edge.a), at.get(edge.b)
    if a is None or b is None:
        return ""
    stroke, width = STROKES.get(edge.label, ("gray", "1.5"))
    title = f"{KINDS.get(edge.label, edge.label)}: {_name(a.node)} to {_name(b.node)}"
    return (f'<line class="edge {_class(edge.label)}" x1="{_n(a.x)}" y1="{_n(a.y)}" x2="{_n(b.x)}" y2="{_n(b.y)}" '
            f'stroke="{stroke}" stroke-width="{width}"><title>{_esc(title)}</title></line>')


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _description(group: Group) -> str:
    """What the picture shows, in words (the root's <desc>)."""
    members = [n.member or n.lines[0] for n in group.nodes if not n.gateway and not n.table]
    gateways = [" ".join(n.lines) for n in group.nodes if n.gateway]
    parts = [f"Mesh group {group.label}."]
    if members:
        parts.append(f"{_plural(len(members), 'member')}: {', '.join(members)}.")
    if gateways:
        parts.append(f"{', '.join(gateways)}.")
    kinds: dict[str, int] = {}
    for edge in group.edges:
        kinds[edge.label] = kinds.get(edge.label, 0) + 1
    if kinds:
        parts.append(f"Links: {', '.join(_plural(n, KINDS.get(k, k)) for k, n in sorted(kinds.items()))}.")
    if any(n.table for n in group.nodes):
        parts.append("The members are listed in a table, each with the links it owns.")
    if group.left_out:
        refused = [f"{_name(n)} ({n.reason or 'refused'})" for n in group.left_out]
        parts.append(f"Left out: {', '.join(refused)}.")
    return " ".join(parts)


def render_svg(group: Group, href: Href) -> str:
    """The group as one SVG document; `href(cluster key)`: the URL of its cluster's page, or None (no link)."""
    boxes = _layout(group)
    title_w = len(group.label) * TITLE_FONT * 0.62
    top = min((b.top for b in boxes), default=0.0) - GAP - TITLE_FONT  # the label's row above the drawing
    left = min((b.left for b in boxes), default=0.0)  # the label starts where the drawing does
    right = max([b.left + b.w for b in boxes] + [left + title_w])
    bottom = max([b.top + b.h for b in boxes] + [top + TITLE_FONT + 4])
    dx, dy = MARGIN - left, MARGIN - top
    boxes = [b.moved(dx, dy) for b in boxes]
    width, height = right - left + 2 * MARGIN, bottom - top + 2 * MARGIN
    at = {b.node.id: b for b in boxes}
    ident = re.sub(r"[^A-Za-z0-9_-]", "_", group.id)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(width)} {_n(height)}" width="{_n(width)}" '
           f'height="{_n(height)}" role="group" aria-labelledby="{ident}-title" aria-describedby="{ident}-desc" '
           f'class="mesh-group" font-family="monospace" font-size="{FONT}">',
           f'<title id="{ident}-title">{_esc(f"Mesh group {group.label}")}</title>',
           f'<desc id="{ident}-desc">{_esc(_description(group))}</desc>',
           f'<text class="group-label" x="{_n(MARGIN)}" y="{_n(MARGIN + TITLE_FONT)}" font-size="{TITLE_FONT}" '
           f'font-weight="bold" fill="black">{_esc(group.label)}</text>',
           '<g class="edges">', *(e for e in (_edge(edge, at) for edge in group.edges) if e), "</g>",
           '<g class="nodes">', *(_node(b, href) for b in boxes), "</g>",
           "</svg>"]
    return "\n".join(out) + "\n"
