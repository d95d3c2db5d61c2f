"""Who owns which shared-ingress cluster ID: pure, used by resolve_fleet and the central proxy's routes."""
from __future__ import annotations

import re
from typing import Iterable

from stacks.errors import FieldError
from stacks.model import Cluster

# Safe as an HAProxy map key, backend name and log-format text.
CLUSTER_ID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}")


def id_error(cluster: Cluster) -> FieldError | None:
    """Why the cluster's shared-ingress ID (its clusterID, else its name) cannot be used, or None."""
    cluster_id = cluster.spec.shared_ingress.id_for(cluster.metadata.name)
    if CLUSTER_ID.fullmatch(cluster_id):
        return None
    return FieldError(cluster.ref, "spec.sharedIngress.clusterID",
                      f"{cluster_id!r} is not a valid ID (letters, digits, '-', '_', '.'; at most 63 characters): "
                      "set clusterID")


def claim_ids(clusters: Iterable[Cluster]) -> tuple[dict[str, Cluster], dict[str, FieldError]]:
    """Each ID of the clusters that opted in → the cluster that owns it (the oldest claimant),
    and, by cluster key, an error for every cluster whose ID is invalid or already taken."""
    claims: dict[str, list[Cluster]] = {}
    errors: dict[str, FieldError] = {}
    for cluster in clusters:
        spec = cluster.spec.shared_ingress
        if not spec.enabled:
            continue
        invalid = id_error(cluster)
        if invalid is not None:
            errors[cluster.key] = invalid
            continue
        cluster_id = spec.id_for(cluster.metadata.name)
        claims.setdefault(cluster_id, []).append(cluster)
    owners: dict[str, Cluster] = {}
    for cluster_id, claimants in sorted(claims.items()):
        claimants.sort(key=lambda c: (c.metadata.creation_timestamp or "", c.key))
        owners[cluster_id] = claimants[0]
        for other in claimants[1:]:
            errors[other.key] = FieldError(other.ref, "spec.sharedIngress.clusterID",
                                           f"ID {cluster_id!r} is already used by {claimants[0].ref}")
    return owners, errors
