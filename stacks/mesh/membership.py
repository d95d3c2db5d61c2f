"""Mesh membership and order (stacks.mesh): which group a cluster asks for and is in, its join stamp and
place, pair names, which groups plan together, and a group's rules. Pure."""
from __future__ import annotations

from typing import Mapping

from stacks.errors import InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig, MeshGroup, MeshRule
from stacks.names import JOIN_STATUS_KEY, MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.tenancy import cluster_namespace
from stacks.transit import MeshStatus

NOT_IN_MESH_GROUP = "NotInMeshGroup"

ALL_TRAFFIC = MeshRule(protocol="-1", from_port=0, to_port=0)


# --- membership and order ---------------------------------------------------------------

def group_of(cluster: Cluster) -> str | None:
    """The group the cluster asks to be in: label AND annotation, and not being deleted."""
    meta = cluster.metadata
    return asked_group(meta.labels, meta.annotations, bool(meta.deletion_timestamp))


def asked_group(labels: Mapping[str, str], annotations: Mapping[str, str], deleting: bool) -> str | None:
    """group_of's rule on an object's metadata as it comes (the console reads objects it does not parse)."""
    group = labels.get(MESH_LABEL)
    if not group or annotations.get(MESH_ENABLED_ANNOTATION) != "true" or deleting:
        return None
    return group


def join_stamp(cluster: Cluster, group: str) -> int | None:
    """The recorded join order in `group`, if the service has written one for that group."""
    stamp = (cluster.status or {}).get(JOIN_STATUS_KEY)
    if isinstance(stamp, dict) and stamp.get("group") == group and isinstance(stamp.get("order"), int):
        return stamp["order"]
    return None


def join_key(cluster: Cluster, group: str, held: frozenset[str] = frozenset()) -> tuple:
    """Sort key of the join order: stamped members by stamp; then the members `held` names (the offline plan's:
    the clusters its baseline planned, stacks.resolve.Fleet.held) before the rest, so a joiner in a Git
    repository, whose files carry no timestamps or stamps, comes after the members already there; then oldest
    first, then by key."""
    stamp = join_stamp(cluster, group)
    if stamp is not None:
        return (0, stamp, "", cluster.key)
    return (1, 0 if cluster.key in held else 1, cluster.metadata.creation_timestamp or "", cluster.key)


def pair_name(a_stack: str, b_stack: str) -> str:
    """Stable whichever side asks: '+' cannot occur in a namespace or a name."""
    return "+".join(sorted((a_stack, b_stack)))


def key_in(namespace: str, group: str, hub: HubConfig) -> str | None:
    """Which group `group` is in `namespace`: shared ("G"), namespace-local ("ns/G"), or None (the hub spans G
    across namespaces and `namespace` is not one of them)."""
    config = hub.spec.mesh.groups.get(group)
    if config is None or config.namespaces is None:
        return f"{namespace}/{group}"
    return group if namespace in config.namespaces else None


def group_key(cluster: Cluster, group: str, hub: HubConfig) -> str | InvalidSpec:
    """Which group `group` is for this cluster: shared ("G"), namespace-local ("ns/G"), or refused."""
    namespace = cluster_namespace(cluster)
    key = key_in(namespace, group, hub)
    if key is not None:
        return key
    return InvalidSpec.one(
        cluster.ref, f"metadata.labels[{MESH_LABEL}]",
        f"mesh group {group} spans only the namespaces the hub administrator listed (HubConfig "
        f"spec.mesh.groups.{group}.namespaces), and {namespace} is not one of them", condition=NOT_IN_MESH_GROUP)


def membership(cluster: Cluster, hub: HubConfig) -> tuple[str | InvalidSpec | None, bool]:
    """(the key of the group the cluster is in, the refusal of the one it asks for, or None; whether it holds a
    join stamp of a group it is not in, which must go)."""
    group = group_of(cluster)
    key = group_key(cluster, group, hub) if group is not None else None
    stamp = (cluster.status or {}).get(JOIN_STATUS_KEY)
    stale = bool(stamp) and (group is None or not isinstance(key, str) or join_stamp(cluster, group) is None)
    return key, stale


def mesh_view(cluster: Cluster) -> tuple:
    """Everything plan_mesh reads of a cluster besides its target (its key, name and namespace are fixed): two
    versions with equal views plan alike."""
    meta = cluster.metadata
    return (meta.labels.get(MESH_LABEL), meta.annotations.get(MESH_ENABLED_ANNOTATION), bool(meta.deletion_timestamp),
            meta.creation_timestamp, (cluster.status or {}).get(JOIN_STATUS_KEY), cluster.spec.network)


def coupling(hub: HubConfig, key: str, status: MeshStatus) -> str:
    """Groups that plan_mesh plans together: those that may use a Transit Gateway share their network account's
    gateways (route tables, ASN, per-gateway quotas, one transit stack); a peering group stands alone."""
    config = hub.spec.mesh.groups.get(key.rsplit("/", 1)[-1], MeshGroup())
    recorded = status.groups.get(key)
    gateway = config.topology != "peering" or (
        recorded is not None and "transitGateway" in (recorded.topology, recorded.migrating_to))
    return f"network:{config.transit_gateway.account_id or hub.spec.account_id}" if gateway else f"group:{key}"


def dedicated_group_name(stack: str) -> str:
    return f"hubwright-mesh-{stack}"


def group_rules(config: MeshGroup) -> tuple[MeshRule, ...]:
    return tuple(config.rules) or (ALL_TRAFFIC,)
