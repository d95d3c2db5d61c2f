"""What the offline plan may take from a live hub (`plan --hub-state`): the records the service keeps so that the
fleet's order holds, and nothing else. Pure.

Of each HubCluster the hub holds, two status fields are read: `status.meshJoin` (its join stamp: the mesh's join
order, stacks.mesh.membership.join_key) and `status.claims` (what the fleet's admission granted it, stacks.claims).
A cluster's own file wins where it carries either; a hub cluster that is not in the files is ignored (the files are
the fleet being planned). Everything else of the hub, specs included, is dropped as it is read, so a pull-request
job that is given the state learns nothing more from it than the order.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from stacks.errors import FieldError, InvalidSpec
from stacks.names import CLAIMS_STATUS_KEY, CLUSTER, GROUP, JOIN_STATUS_KEY
from stacks.resolve import Fleet

RECORDS = (JOIN_STATUS_KEY, CLAIMS_STATUS_KEY)
LIVE = "kube"  # `--hub-state kube`: the live hub, through the kubeconfig (anything else names a file)


def records_of(items: Iterable[Mapping[str, Any]], *, where: str) -> dict[str, dict[str, Any]]:
    """namespace/name -> the records (RECORDS) of each HubCluster in `items` (a HubClusterList's, as `kubectl get
    hubclusters -A -o json` prints it, or the API's list); InvalidSpec naming `where` for what is not one."""
    out: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(meta, Mapping) or item.get("kind") not in (None, CLUSTER.kind) or \
                not str(item.get("apiVersion", GROUP)).startswith(GROUP):
            raise InvalidSpec([FieldError(where, f"items[{i}]", f"not a {CLUSTER.kind} (kind {item.get('kind')!r}, "
                                                                 f"apiVersion {item.get('apiVersion')!r})")])
        found = item.get("status")
        status: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        kept = {key: status[key] for key in RECORDS if isinstance(status.get(key), Mapping)}
        if kept:
            out[f"{meta.get('namespace')}/{meta.get('name')}"] = kept
    return out


def with_records(fleet: Fleet, records: Mapping[str, Mapping[str, Any]]) -> tuple[Fleet, int]:
    """The fleet with each cluster's missing records taken from the hub's; how many clusters took one."""
    taken = 0
    clusters = []
    for cluster in fleet.clusters:
        hub = records.get(cluster.key) or {}
        status = dict(cluster.status or {})
        missing = {key: value for key, value in hub.items() if key not in status}
        if missing:
            taken += 1
            cluster = cluster.model_copy(update={"status": {**status, **missing}})
        clusters.append(cluster)
    return dataclasses.replace(fleet, clusters=tuple(clusters)), taken
