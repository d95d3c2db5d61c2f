"""The source families: one row per project whose cluster objects hubwright takes as HubClusters. Pure.

Everything that differs between Cluster API, Hive and HyperShift is a column here, and everything that lists
them is derived from this table: derive()'s dispatch (`part`), which objects of a plan folder are never parsed as
ours (`groups`), what the service watches and the RBAC that takes (`source`, `related`; stacks.sources.watched),
which sources an infrastructure object's change concerns (`reads`), and `--sources`' names and help
(stacks.options). A new family is its module (the part reader) and a row.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from stacks.sources import capi, hive, hypershift
from stacks.sources.kinds import (AWS_CLUSTER, AWS_MANAGED_CONTROL_PLANE, CAPI_CLUSTER, CAPI_GROUP, CLUSTER_DEPLOYMENT,
                                  HIVE_GROUP, HOSTED_CLUSTER, HOSTED_CONTROL_PLANE, HYPERSHIFT_GROUP, SourceKind,
                                  group_of)
from stacks.sources.part import PartOf, Reads


class Family(NamedTuple):
    name: str  # its --sources name
    project: str  # as people name it
    source: SourceKind  # the kind that opts in: one HubCluster per opted-in object
    related: tuple[SourceKind, ...]  # what its part reads besides (watched beside it, read-only)
    groups: tuple[str, ...]  # the project's API groups ("*.g": every subgroup of g): never parsed as ours
    part: PartOf  # how a source object's HubCluster spec is read
    reads: Reads  # which related objects a source object reads (an event on one derives it again)
    control_plane_here: bool = False  # its control plane runs on the hub: shared ingress can be derived
    # Who writes its guests' node-side API proxy (then the install answer carries none: never a second writer).
    guest_proxy_writer: str | None = None
    # Its part reads objects outside the source's namespace (HyperShift's control-plane namespace): the service
    # watches those (its related kinds, the Namespaces) in every namespace, even with --watch-namespace.
    reads_elsewhere: bool = False


FAMILIES = (
    Family("capi", "Cluster API", CAPI_CLUSTER, (AWS_CLUSTER, AWS_MANAGED_CONTROL_PLANE),
           (CAPI_GROUP, f"*.{CAPI_GROUP}"), capi.capi_part, capi.reads),
    Family("hive", "Hive", CLUSTER_DEPLOYMENT, (), (HIVE_GROUP,), hive.hive_part, hive.reads),
    Family("hypershift", "HyperShift", HOSTED_CLUSTER, (HOSTED_CONTROL_PLANE,), (HYPERSHIFT_GROUP,),
           hypershift.hypershift_part, hypershift.reads, control_plane_here=True,
           guest_proxy_writer=hypershift.GUEST_PROXY_WRITER, reads_elsewhere=True),
)
BY_NAME = {family.name: family for family in FAMILIES}
SOURCES = tuple(family.source for family in FAMILIES)
RELATED = tuple(dict.fromkeys(kind for family in FAMILIES for kind in family.related))
KINDS = (*SOURCES, *RELATED)  # every kind read: the service's informers and RBAC (docs/sources.md)


def family_of(kind: SourceKind | None) -> Family | None:
    return next((family for family in FAMILIES if family.source == kind), None)


def controlling(owner_references: Any) -> Family | None:
    """The family of the source object that controls a HubCluster (its controller ownerReference), or None."""
    for ref in owner_references if isinstance(owner_references, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            group = group_of(ref.get("apiVersion"))
            return next((f for f in FAMILIES if (f.source.group, f.source.kind) == (group, ref.get("kind"))), None)
    return None


def kind_of(doc: Mapping[str, Any]) -> SourceKind | None:
    """The kind read that `doc` is (group, version and kind all match), or None."""
    return next((kind for kind in KINDS if kind.matches(doc)), None)


def _in(group: str, groups: tuple[str, ...]) -> bool:
    return any(group == g or (g.startswith("*.") and group.endswith(g[1:])) for g in groups)


def of_source_project(doc: Mapping[str, Any]) -> bool:
    """True for any object of a source family's project, read or not (a KubeadmControlPlane, a MachineDeployment,
    a NodePool): a plan folder may hold a whole cluster's objects; none of them is ever parsed as ours."""
    group = group_of(doc.get("apiVersion"))
    return group is not None and any(_in(group, family.groups) for family in FAMILIES)


def read_elsewhere() -> tuple[SourceKind, ...]:
    """The related kinds a family reads outside its sources' namespaces: watched in every namespace."""
    return tuple(kind for family in FAMILIES if family.reads_elsewhere for kind in family.related)


def named(option: str) -> list[Family]:
    """The families `--sources` names: 'auto' every one (those served are watched), 'none' none, or a list;
    ValueError naming an unknown one."""
    option = option.strip()
    if option == "none":
        return []
    names = list(BY_NAME) if option == "auto" else [n.strip() for n in option.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"--sources: unknown {', '.join(unknown)} (known: auto, none, {', '.join(BY_NAME)})")
    return [BY_NAME[n] for n in names]


def help_text() -> str:
    """--sources' help: its names, from the table."""
    kinds = ", ".join(f"{family.project}'s {family.source.kind}" for family in FAMILIES)
    names = ", ".join(family.name for family in FAMILIES)
    return (f"other projects' cluster objects to keep HubClusters for (docs/sources.md): 'auto' watches those the "
            f"API server serves ({kinds}), 'none' none, or a comma-separated list of {names}")

