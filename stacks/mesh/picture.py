"""The mesh as a picture, the model: each group's nodes and edges, as the plan's `--format dot|mermaid`
(automation.cli.picture) and the console's SVG (stacks.mesh.svg) draw them. Pure.

One box per group, labelled with its state (topology, or the migration step); a node per cluster (name,
account, region, CIDR blocks); an edge per VPC peering while the group has peerings, and while it has attachments
a node per Transit Gateway (network account, region), an edge from each member to its region's gateway and
one between the gateways of two regions the group spans. Sorted, so the same fleet draws the same.

A large group (more than SUMMARY_MEMBERS clusters, or more than SUMMARY_LINKS links: a full mesh of 12 is 66
peerings) is drawn as a summary instead: its gateways, its counts (members, links, refused) in the box's label,
and one table of its members in join order, each with the links it owns (a peering is owned by the later
joiner, stacks.mesh; an attachment by its member) and each refused cluster with its reason. A picture with no
group says why it is empty (empty_reason).

A label's lines are joined by LINE_BREAK, the two characters backslash and n: dot reads them as a line break,
render_mermaid turns them into <br/>, Node.lines splits them.

What a viewer may see (`shown`, a test of a cluster key "namespace/name"): the picture is then built from the
shown members and refused clusters alone, as if the others were not in the group: a pair is drawn when both its
ends are shown, a gateway when a shown member attaches to it, the summary's counts, rows and places ("#N") count
shown members only and whether a group is a summary depends on them alone; a group without a shown member or
refused cluster is left out. A refused cluster's reason is then its condition reason only (MeshCIDROverlap, ...):
the sentence names the other cluster, its CIDR block or the group's numbers. `hide_accounts` leaves the network
account out of the gateways' labels (and the reasons' sentences): the only accounts left are the members' own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from stacks.mesh.membership import group_of
from stacks.mesh.plan import GroupView, MeshPlan, PairView
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL

SUMMARY_MEMBERS = 6  # clusters (members and refused) a group may have and still be drawn link by link
SUMMARY_LINKS = 15  # links (peerings, attachments, gateway peerings) likewise: a full mesh of 6
LINE_BREAK = "\\n"  # between a label's lines: dot's escape, as the text holds it (a backslash and an n)

Shown = Callable[[str], bool]  # cluster key -> may the viewer see it


@dataclass(frozen=True)
class Node:
    id: str
    label: str  # its lines joined by LINE_BREAK
    gateway: bool = False
    table: bool = False  # a summary's table of members: lines left-aligned
    member: str | None = None  # the cluster key of a member or a left-out node; None for a gateway or a table
    reason: str | None = None  # a left-out node: why the cluster was refused
    rows: tuple[str | None, ...] = ()  # a table: the cluster key each line is about (None: the header)

    @property
    def lines(self) -> list[str]:
        return self.label.split(LINE_BREAK)


@dataclass(frozen=True)
class Edge:
    a: str
    b: str
    label: str  # the link's kind: "peering", "attachment" or "TGW peering"


@dataclass(frozen=True)
class Group:
    id: str
    label: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    left_out: tuple[Node, ...]


@dataclass(frozen=True)
class _Seen:
    """A group as the viewer sees it: its shown members (join order), their pairs and its shown refused clusters."""
    key: str
    view: GroupView
    members: tuple[str, ...]
    pairs: tuple[PairView, ...]
    rejected: tuple[str, ...]
    full: bool  # no viewer and no account hidden: a refused cluster's reason says it all


class FleetLike(Protocol):
    """What empty_reason reads of a stacks.resolve.Fleet (which imports this package: named by its shape)."""
    @property
    def hub(self) -> HubConfig: ...

    @property
    def clusters(self) -> Sequence[Cluster]: ...


def _id(*parts: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", "__".join(parts))


def _seen(key: str, view: GroupView, shown: Shown | None, full: bool) -> _Seen:
    if shown is None:
        return _Seen(key, view, view.members, view.pairs, view.rejected, full)
    members = tuple(m for m in view.members if shown(m))
    kept = set(members)
    return _Seen(key, view, members, tuple(p for p in view.pairs if p.owner in kept and p.peer in kept),
                 tuple(k for k in view.rejected if shown(k)), full)


def groups(mesh: MeshPlan, *, shown: Shown | None = None, hide_accounts: bool = False) -> list[Group]:
    """Each group's nodes and edges, in group-key order (a large group's summary, and what a viewer `shown`
    sees: see the module's doc)."""
    out = []
    for key, view in sorted(mesh.groups.items()):
        seen = _seen(key, view, shown, full=shown is None and not hide_accounts)
        if shown is not None and not seen.members and not seen.rejected:
            continue
        phase = view.phase
        members = [mesh.shares[m].member for m in seen.members]
        nodes = [Node(_id(key, m.key), f"{m.key}\\n{m.target.account_id} {m.target.region}\\n{', '.join(m.cidrs)}",
                      member=m.key) for m in members]
        edges: list[Edge] = []
        gateways: dict[str, Node] = {}
        if phase.peerings:
            edges += [Edge(_id(key, p.owner), _id(key, p.peer), "peering") for p in seen.pairs]
        if phase.attachments and view.network_account is not None:
            regions = sorted({m.target.region for m in members})
            account = "" if hide_accounts else f"{view.network_account} "
            gateways = {r: Node(_id(key, "tgw", r), f"Transit Gateway\\n{account}{r}", gateway=True)
                        for r in regions}
            nodes += gateways.values()
            edges += [Edge(_id(key, m.key), gateways[m.target.region].id, "attachment") for m in members]
            edges += [Edge(gateways[a].id, gateways[b].id, "TGW peering")
                      for i, a in enumerate(regions) for b in regions[i + 1:]]
        label = f"{key}: {view.state.describe()}"
        if len(members) + len(seen.rejected) > SUMMARY_MEMBERS or len(edges) > SUMMARY_LINKS:
            out.append(_summary(seen, mesh, label, list(gateways.values()), edges))
            continue
        left_out = tuple(Node(_id(key, k), f"{k}\\n(left out)", member=k, reason=_why(mesh, k, seen.full))
                         for k in seen.rejected)
        out.append(Group(_id(key), label, tuple(nodes), tuple(sorted(edges, key=lambda e: (e.a, e.b))), left_out))
    return out


def _why(mesh: MeshPlan, key: str, full: bool) -> str:
    """Why a cluster was refused: its condition reason, and with `full` the first error's sentence."""
    error = mesh.errors.get(key)
    if error is None:
        return "refused"
    if not full:
        return error.reason
    return f"{error.reason}: {error.errors[0].reason}" if error.errors else "refused"


def _numbers(indexes: list[int]) -> str:
    """[1, 2, 3, 5] -> "#1-#3, #5": the members a row's links go to, by their place in the table."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"#{r[0]}" if len(r) == 1 else f"#{r[0]}-#{r[-1]}" for r in runs)


def _summary(seen: _Seen, mesh: MeshPlan, label: str, gateways: list[Node], edges: list[Edge]) -> Group:
    """A large group: its gateways and the links between them, its counts, and one table of its members."""
    key, phase = seen.key, seen.view.phase
    place = {member: i + 1 for i, member in enumerate(seen.members)}  # join order: the table's "#"
    owned: dict[str, list[int]] = {m: [] for m in seen.members}
    for pair in seen.pairs if phase.peerings else ():
        owned[pair.owner].append(place[pair.peer])
    peerings = sum(len(v) for v in owned.values())
    attachments = len(seen.members) if gateways else 0
    rows = [f"#  member  account region  CIDR  links it owns (a peering is the later joiner's)"]
    for member in seen.members:
        m = mesh.shares[member].member
        links = []
        if phase.peerings:
            links.append(f"{len(owned[member])} peering{'s' if len(owned[member]) != 1 else ''}"
                         + (f" with {_numbers(owned[member])}" if owned[member] else ""))
        if gateways:
            links.append(f"attachment to the {m.target.region} gateway")
        rows.append(f"{place[member]}  {m.key}  {m.target.account_id} {m.target.region}  {', '.join(m.cidrs)}  "
                    f"{', '.join(links) or 'none'}")  # no ";" after "#N": mermaid reads "#N;" as a character code
    for refused in seen.rejected:
        rows.append(f"refused  {refused}  {_why(mesh, refused, seen.full)}")
    between = [e for e in edges if e.label == "TGW peering"]  # the gateways' own links: one per pair of regions
    kinds = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((peerings, "peering"), (attachments, "attachment"),
                                                                  (len(between), "gateway peering")) if n]
    counts = (f"{len(seen.members)} members, {peerings + attachments + len(between)} links"
              f"{' (' + ', '.join(kinds) + ')' if kinds else ''}, {len(seen.rejected)} refused")
    table = Node(_id(key, "members"), LINE_BREAK.join(rows), table=True,
                 rows=(None, *seen.members, *seen.rejected))
    return Group(_id(key), f"{label} | {counts}", (*gateways, table), tuple(sorted(between, key=lambda e: (e.a, e.b))),
                 ())


def empty_reason(mesh: MeshPlan | None, fleet: FleetLike, *, shown: Shown | None = None) -> str | None:
    """Why the picture has no group (None when it has one): no cluster asks, none opted in, or all refused. With
    `shown`, why the viewer's picture has none: its clusters alone are counted (and the HubConfig's groups are not
    listed)."""
    def see(key: str) -> bool:
        return shown is None or shown(key)

    views = list(mesh.groups.values()) if mesh is not None else []
    if any(see(m) for view in views for m in view.members):
        return None
    refused = sum(1 for view in views for k in view.rejected if see(k))
    if refused if shown is not None else views:
        return f"no mesh member: every cluster that asked to join ({refused}) was refused (see the plan's errors)"
    labelled = [c for c in fleet.clusters if c.metadata.labels.get(MESH_LABEL) and see(c.key)]
    if labelled and not any(group_of(c) for c in labelled):
        return (f"no mesh member opted in: {len(labelled)} cluster(s) have the label {MESH_LABEL} but not the "
                f"annotation {MESH_ENABLED_ANNOTATION} set to true")
    defined = sorted(fleet.hub.spec.mesh.groups) if shown is None else []
    return (f"no mesh groups: no HubCluster has the label {MESH_LABEL} (and {MESH_ENABLED_ANNOTATION} set to true)"
            + (f"; the HubConfig defines {', '.join(defined)}" if defined else ""))
