"""The synthetic fleet of `python -m bench.console`: HubClusters and Namespaces as the API server holds them, handed to
the console's cache (automation.console.cache.ConsoleCache) through the stores its informers fill.

Every object is what a settled hub's informer would list: a cluster's metadata (uid, resourceVersion, generation,
labels, annotations, finalizers; managedFields the cache drops anyway), its spec (doubles.factories.cluster_doc) and
the status the service writes (stacks.status.ClusterStatus: conditions, account, region, lastUpdate, outputs, the
mesh's join and peerings, claims). 85 % are Ready, 8 % Reconciling, 5 % Stalled, 2 % not yet looked at; a third
are in one of 5 mesh groups, peered with clusters of other namespaces. A Namespace holds its tenant's annotation
and label and the account it owns. The objects reach the cache as the informer hands them on: a list answer of
500 decoded from JSON at once (json.loads shares a page's key strings), each `apply("ADDED", raw)`.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Iterable

from automation.console.cache import ConsoleCache
from doubles.factories import cluster_doc
from stacks.names import (API_VERSION, FINALIZER, MESH_ENABLED_ANNOTATION, MESH_LABEL, OWNER_ACCOUNT_ANNOTATION,
                          TENANT_ANNOTATION, TENANT_LABEL, stack_name)

REGIONS = ("us-east-1", "eu-west-1", "us-west-2", "ap-southeast-2")
PAGE = 500  # the informer's list page (automation.adapters.kube.informer.Informer.page_size)
MESH_GROUPS = 5
STALLED = (("UpdateFailed", "hubwright: cluster {key}: the update failed: error: 1 error occurred: creating EC2 VPC "
                            "Endpoint (vpce-svc-0123456789abcdef0): InvalidServiceName: The Vpc Endpoint Service "
                            "'com.amazonaws.vpce.{region}.vpce-svc-0123456789abcdef0' does not exist"),
           ("AccountNotMapped", "spec.accountID {account}: the hub's roleAccountMap has no role for this account; "
                                "the hub administrator adds one (HubConfig spec.roleAccountMap)"),
           ("StackLocked", "the stack {stack} is locked by another update (started 2026-03-01T10:02:11Z); it is "
                           "retried when the lock is released"))


def namespace_name(k: int) -> str:
    return f"team-{k:03d}"


def tenant_name(k: int) -> str:
    return f"tenant-{k:03d}"


def account_of(k: int) -> str:
    return f"2{k:011d}"


def cluster_name(i: int) -> str:
    return f"c-{i:05d}"


def placement(i: int, namespaces: int) -> tuple[int, str, str]:
    """Cluster i's namespace number, namespace and name: spread round-robin over the namespaces."""
    k = i % namespaces
    return k, namespace_name(k), cluster_name(i)


def _hex(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def namespace_raw(k: int) -> dict[str, Any]:
    name, tenant = namespace_name(k), tenant_name(k)
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": str(uuid.UUID(_hex(name, 32))), "resourceVersion": str(1000 + k),
                         "creationTimestamp": "2026-01-05T09:00:00Z",
                         "labels": {"kubernetes.io/metadata.name": name, TENANT_LABEL: tenant},
                         "annotations": {TENANT_ANNOTATION: tenant, OWNER_ACCOUNT_ANNOTATION: account_of(k)}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def _condition(type_: str, status: str, reason: str, message: str, generation: int, when: str) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": when,
            "observedGeneration": generation}


def status_raw(i: int, namespace: str, name: str, account: str, region: str, generation: int,
               group: str | None, namespaces: int, *, version: int = 0) -> dict[str, Any] | None:
    """The status the service writes for cluster i (None: one it has not looked at yet); `version` changes the
    last run's time and message (a status change for the live-update measurement)."""
    kind = i % 100
    if kind >= 98:
        return None
    stack, key = stack_name(namespace, name), f"{namespace}/{name}"
    minute = (i + version) % 60
    started, ended = f"2026-03-01T10:{minute:02d}:05Z", f"2026-03-01T10:{minute:02d}:{41 + i % 17:02d}Z"
    run = f"{name}-up-{generation}-{_hex(f'{key}{version}', 5)}"
    if kind < 85:  # Ready
        conditions = [_condition("Ready", "True", "Succeeded", f"the stack {stack} is up to date with generation "
                                 f"{generation} (run {run}, {version} changes since)", generation, ended),
                      _condition("Reconciling", "False", "Succeeded", "", generation, ended),
                      _condition("Stalled", "False", "Succeeded", "", generation, ended)]
        last = {"operation": "up", "result": "Succeeded", "startTime": started, "endTime": ended,
                "message": f"the spec changed (generation {generation}); 2 resources updated", "cause": "Spec",
                "changes": {"same": 41, "update": 2}, "run": run}
    elif kind < 93:  # Reconciling: a run in flight
        conditions = [_condition("Ready", "False", "Progressing", f"running up of {stack} (run {run})", generation,
                                 started),
                      _condition("Reconciling", "True", "Progressing", f"running up of {stack}", generation, started),
                      _condition("Stalled", "False", "Progressing", "", generation, started)]
        last = {"operation": "up", "result": "Running", "startTime": started, "cause": "Spec", "run": run,
                "message": f"the spec changed (generation {generation})", "progress": {"done": 17, "planned": 43}}
    else:  # Stalled
        reason, text = STALLED[i % len(STALLED)]
        message = text.format(key=key, region=region, account=account, stack=stack)
        conditions = [_condition("Ready", "False", reason, message, generation, ended),
                      _condition("Reconciling", "False", reason, "", generation, ended),
                      _condition("Stalled", "True", reason, message, generation, ended)]
        last = {"operation": "up", "result": "Failed", "startTime": started, "endTime": ended, "cause": "Retry",
                "message": message, "changes": {"same": 39, "update": 1}, "run": run}
    drift_checked = i % 3 != 0
    if drift_checked:
        drifted = i % 41 == 0
        conditions.append(_condition("DriftDetected", "True" if drifted else "False",
                                     "DriftDetected" if drifted else "NoDrift",
                                     "1 resource differs from the stack: aws:ec2/securityGroup:SecurityGroup "
                                     f"{name}-nodes (ingress)" if drifted else "", generation, ended))
    vpce = _hex(f"vpce{key}", 17)
    outputs: dict[str, Any] = {
        "endpoint": f"vpce-0{vpce}-{_hex(key, 8)}.vpce-svc-0{_hex(f'svc{key}', 16)}.{region}.vpce.amazonaws.com",
        "endpointID": f"vpce-0{vpce}", "endpointVPC": "vpc-0hub1",
        "serviceName": f"com.amazonaws.vpce.{region}.vpce-svc-0{_hex(f'svc{key}', 16)}",
        "zoneID": f"Z0{_hex(f'zone{key}', 19).upper()}", "infraID": f"{name}-x7k2p"}
    status: dict[str, Any] = {
        "observedGeneration": generation, "stack": stack, "account": account, "region": region,
        "inputsHash": hashlib.sha256(f"{key}{generation}".encode()).hexdigest(), "conditions": conditions,
        "lastUpdate": last, "outputs": outputs,
        "claims": {"vpcID": f"vpc-0{_hex(name, 12)}", "infraID": f"{account}/{name}-x7k2p",
                   "apiHost": f"api.{name}.example.com", "account": account}}
    if drift_checked:
        status["lastDriftCheck"] = ended
    if group is not None:
        status["meshJoin"] = {"group": group, "order": i // (namespaces * MESH_GROUPS)}
        # Its peers joined earlier, in other namespaces of its group (the same namespace number modulo MESH_GROUPS).
        peers = [i - 3 * MESH_GROUPS * d for d in (1, 2) if i - 3 * MESH_GROUPS * d >= 0]
        outputs["peerings"] = [
            {"name": f"{stack}+{stack_name(namespace_name(p % namespaces), cluster_name(p))}",
             "id": f"pcx-0{_hex(f'{i}+{p}', 16)}", "state": "active"} for p in peers]
    return status


def cluster_raw(i: int, namespaces: int, *, version: int = 0) -> dict[str, Any]:
    """HubCluster i as the API server lists it (status included)."""
    k, namespace, name = placement(i, namespaces)
    account, region = account_of(k), REGIONS[(i // namespaces) % len(REGIONS)]
    in_mesh = i % 3 == 0
    group = f"mesh-{k % MESH_GROUPS}" if in_mesh else None
    labels = {"app.kubernetes.io/managed-by": "hubwright", "environment": ("prod", "staging", "dev")[i % 3]}
    annotations = {"hubwright.io/owner": f"{tenant_name(k)}@example.com"}
    if group is not None:
        labels[MESH_LABEL] = group
        annotations[MESH_ENABLED_ANNOTATION] = "true"
    generation = 1 + i % 7
    raw = cluster_doc(name, namespace, labels=labels, annotations=annotations, accountID=account, region=region)
    raw["metadata"].update({"uid": str(uuid.UUID(_hex(f"{namespace}/{name}", 32))),
                            "resourceVersion": str(100000 + i + version), "generation": generation,
                            "creationTimestamp": "2026-02-01T08:00:00Z", "finalizers": [FINALIZER],
                            "managedFields": managed_fields()})
    status = status_raw(i, namespace, name, account, region, generation, group, namespaces, version=version)
    if status is not None:
        raw["status"] = status
    return raw


def managed_fields() -> list[dict[str, Any]]:
    """What the API server records of who wrote which fields (the console drops it: cache.SLIM)."""
    return [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": API_VERSION,
             "time": "2026-02-01T08:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:hubwright.io/owner": {}},
                                         "f:labels": {".": {}, "f:environment": {}}},
                          "f:spec": {".": {}, "f:accountID": {}, "f:apiURL": {}, "f:infraID": {}, "f:network": {},
                                     "f:privateLink": {}, "f:region": {}}}},
            {"manager": "hubwright", "operation": "Update", "apiVersion": API_VERSION,
             "time": "2026-03-01T10:00:41Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:account": {}, "f:conditions": {}, "f:lastUpdate": {},
                                       "f:observedGeneration": {}, "f:outputs": {}, "f:region": {}, "f:stack": {}}}}]


def encoded(clusters: int, namespaces: int, *, skip: frozenset[int] = frozenset()) -> list[tuple[str, bytes]]:
    """The namespaces' and the clusters' list answers, a page of PAGE objects each, as the API server sends them:
    [(kind, JSON bytes)], the namespaces first."""
    out: list[tuple[str, bytes]] = []
    for kind, raws in (("namespaces", [namespace_raw(k) for k in range(namespaces)]),
                       ("clusters", [cluster_raw(i, namespaces) for i in range(clusters) if i not in skip])):
        for start in range(0, len(raws), PAGE):
            out.append((kind, json.dumps({"items": raws[start:start + PAGE]}).encode()))
    return out


def fill(cache: ConsoleCache, answers: Iterable[tuple[str, bytes]]) -> int:
    """The list answers into the cache as its informers take them: each page decoded, each object
    `apply("ADDED", raw)` to its kind's store. The clusters applied."""
    count = 0
    for kind, body in answers:
        store = cache.namespaces if kind == "namespaces" else cache.clusters
        for raw in json.loads(body)["items"]:
            store.apply("ADDED", raw)
            count += kind == "clusters"
    return count
