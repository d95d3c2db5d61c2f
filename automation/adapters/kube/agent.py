"""A cluster agent's identity on the hub: its ServiceAccount, Role and RoleBinding and token (docs/registry.md).

    grant_agent   ServiceAccount hubwright-agent-<cluster> (made afresh), a Role of stacks.install.agent_rules
                  (push facts for that one Cluster) bound to it, then a TokenRequest. All three are owned by
                  the Cluster (an ownerReference to its uid), and the ServiceAccount records that uid.
    request_token a TokenRequest for the agent's ServiceAccount: its first token, and each rotation (the registry
                  API's agent-token route, automation.api.facts): a lifetime the API chooses, the API server's
                  own audience. The agent holds no right to ask for one itself.
    revoke_agent  delete the three (those not owned by `keep`); 404s are fine. revoke_identity: the same through
                  the object port (automation/adapters/kube/objects.py), which the clusters' controller holds.
    sweep_agents  at the service's start: revoke every agent whose Cluster is gone or is a later one of the same
                  name, and record the uid on agents granted before uids were recorded (stacks.registry).

Revocation is deleting the ServiceAccount: its tokens are bound to its UID, and the API server refuses a token
whose ServiceAccount no longer exists (or exists under a new UID) once its authentication cache (10 s) has
expired. That is also why `grant_agent` makes the ServiceAccount afresh: a new install (after a reset of the
bootstrap token) replaces the previous agent, and every token that agent held stops working.

The ownerReference is what revokes an agent when nothing of ours runs: Kubernetes' garbage collector
(kube-controller-manager) deletes the three once their Cluster's uid is gone, whether the service saw the
delete or not (`blockOwnerDeletion: false`: deleting a Cluster never waits on its agent). A Cluster deleted
between the install reading it and the grant is caught by reading it again after granting.

Rights this takes (stacks.install.API_RULES): create/get/delete serviceaccounts, create/delete roles and
rolebindings, create serviceaccounts/token, get clusters, and the right the Role grants (RBAC: no `escalate`,
so the writer holds it). The service's sweep: list/patch/delete serviceaccounts, patch/delete roles and
rolebindings (components.controlplane.CLUSTER_RULES). The token is returned to the caller and never logged.
"""
from __future__ import annotations

import functools
import json
import logging
import time
from typing import Any, Callable, Mapping

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.objects import ROLEBINDINGS, ROLES, SERVICEACCOUNTS, Conflict, KubeObjects, Objects
from stacks.install import RBAC, agent_rules
from stacks.names import CLUSTER, CLUSTERS, AGENT_CLUSTER_LABEL, AGENT_CLUSTER_UID_ANNOTATION, API_VERSION, GROUP, VERSION, agent_name
from stacks.registry import agent_standing

LOG = logging.getLogger("hubwright.agent")
MANAGED_BY = "hubwright-registry"
MANAGED_LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}
RECREATE_ATTEMPTS = 5
TIMEOUT = (5, 30)  # (connect, read) seconds of every call here


class AgentGone(Exception):
    """The Cluster was deleted (or replaced by another of its name) while its agent was being granted; the
    agent was revoked again."""


def owner_reference(cluster: str, uid: str) -> dict[str, Any]:
    """The Cluster as the owner of its agent's objects: the garbage collector deletes them when its uid is gone."""
    return {"apiVersion": API_VERSION, "kind": "HubCluster", "name": cluster, "uid": uid, "controller": True,
            "blockOwnerDeletion": False}


def grant_agent(api_client: client.ApiClient, namespace: str, cluster: str, uid: str,
                seconds: int) -> tuple[str, str]:
    """(token, expiry as RFC 3339 UTC) for a fresh agent ServiceAccount of the Cluster `cluster` whose uid is
    `uid`, allowed only its rules. AgentGone when that Cluster is not there any more once the three are made."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    name = agent_name(cluster)
    meta = {"name": name, "labels": {**MANAGED_LABELS, AGENT_CLUSTER_LABEL: cluster},
            "ownerReferences": [owner_reference(cluster, uid)]}
    account = {**meta, "annotations": {AGENT_CLUSTER_UID_ANNOTATION: uid}}
    _fresh(lambda: core.create_namespaced_service_account(namespace, {"metadata": account}, _request_timeout=TIMEOUT),
           lambda: core.delete_namespaced_service_account(name, namespace, _request_timeout=TIMEOUT))
    _fresh(lambda: rbac.create_namespaced_role(namespace, {"metadata": meta, "rules": agent_rules(cluster)},
                                               _request_timeout=TIMEOUT),
           lambda: rbac.delete_namespaced_role(name, namespace, _request_timeout=TIMEOUT))
    _fresh(lambda: rbac.create_namespaced_role_binding(namespace, {
        "metadata": meta, "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}, _request_timeout=TIMEOUT),
           lambda: rbac.delete_namespaced_role_binding(name, namespace, _request_timeout=TIMEOUT))
    now = cluster_uid(api_client, namespace, cluster)
    if now != uid:  # deleted (or deleted and made again) since the caller read it
        revoke_agent(api_client, namespace, cluster, keep=now)
        raise AgentGone(f"HubCluster {namespace}/{cluster} was deleted while its agent was being granted")
    return request_token(core, namespace, name, seconds)


def cluster_uid(api_client: client.ApiClient, namespace: str, cluster: str) -> str | None:
    """The uid of the Cluster of that name now, or None when there is none."""
    try:
        found = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, CLUSTERS, cluster, _request_timeout=TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found["metadata"]["uid"]


def recorded_uid(api_client: client.ApiClient, namespace: str, cluster: str) -> str | None:
    """The Cluster uid the agent's ServiceAccount records (None: no such ServiceAccount, or none recorded)."""
    try:
        raw = client.CoreV1Api(api_client).read_namespaced_service_account(
            agent_name(cluster), namespace, _preload_content=False, _request_timeout=TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return (json.loads(raw.data)["metadata"].get("annotations") or {}).get(AGENT_CLUSTER_UID_ANNOTATION)


def request_token(core: client.CoreV1Api, namespace: str, name: str, seconds: int) -> tuple[str, str]:
    """(token, expiry) of a TokenRequest with the API server's own audience. Read raw: the client logs every
    body it parses at DEBUG level, and this one holds a token."""
    raw = core.create_namespaced_service_account_token(name, namespace, {"spec": {"expirationSeconds": seconds}},
                                                       _preload_content=False, _request_timeout=TIMEOUT)
    status = json.loads(raw.data)["status"]
    return status["token"], status["expirationTimestamp"]  # a metav1.Time: RFC 3339 in UTC ("...Z") already


# An agent's identity, in the order it is revoked: the binding first, so no token keeps a right meanwhile.
AGENT_KINDS = (ROLEBINDINGS, ROLES, SERVICEACCOUNTS)


def revoke_agent(api_client: client.ApiClient, namespace: str, cluster: str, *, keep: str | None = None) -> None:
    """`revoke_identity` through the official client."""
    revoke_identity(KubeObjects(api_client), namespace, cluster, keep=keep)


def revoke_identity(objects: Objects, namespace: str, cluster: str, *, keep: str | None = None) -> None:
    """Delete the agent's RoleBinding, Role and ServiceAccount (and so its tokens); gone already is fine.

    `keep`: a Cluster uid whose agent is spared (a concurrent install for the Cluster of that name now): only
    objects owned by another uid, or by none, are deleted, each with its own uid as a precondition."""
    name = agent_name(cluster)
    for kind in AGENT_KINDS:
        if keep is None:
            objects.delete(kind, name, namespace)
            continue
        found = objects.get(kind, name, namespace)
        if found is None or keep in _owners(found["metadata"]):
            continue
        try:
            objects.delete(kind, name, namespace, uid=found["metadata"]["uid"])
        except Conflict:
            pass  # made again since it was read: that one is not this revocation's


def sweep_agents(api_client: client.ApiClient, namespace: str | None = None) -> dict[str, list[str]]:
    """Revoke the agents whose Cluster is gone or is a later one of the same name, and record the uid (and the
    ownerReference) on agents granted before uids were recorded; `namespace`: only there. What it did, by
    "revoked" and "adopted" (namespace/cluster)."""
    core = client.CoreV1Api(api_client)
    selector = f"app.kubernetes.io/managed-by={MANAGED_BY},{AGENT_CLUSTER_LABEL}"
    if namespace is None:
        raw = core.list_service_account_for_all_namespaces(label_selector=selector, _preload_content=False,
                                                           _request_timeout=TIMEOUT)
    else:
        raw = core.list_namespaced_service_account(namespace, label_selector=selector, _preload_content=False,
                                                   _request_timeout=TIMEOUT)
    done: dict[str, list[str]] = {"revoked": [], "adopted": []}
    for account in json.loads(raw.data).get("items") or []:
        meta = account["metadata"]
        ns, cluster = meta["namespace"], meta["labels"][AGENT_CLUSTER_LABEL]
        if meta["name"] != agent_name(cluster):
            continue  # not an agent's (a label copied onto something else): not ours to judge
        try:
            found = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                GROUP, VERSION, ns, CLUSTERS, cluster, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise
            found = None
        uid = found["metadata"]["uid"] if found else None
        standing = agent_standing((meta.get("annotations") or {}).get(AGENT_CLUSTER_UID_ANNOTATION),
                                  meta.get("creationTimestamp"), uid,
                                  found["metadata"].get("creationTimestamp") if found else None)
        if standing == "orphan":
            revoke_agent(api_client, ns, cluster, keep=uid)
            done["revoked"].append(f"{ns}/{cluster}")
        elif standing == "adopt" and uid is not None:
            _adopt(api_client, ns, cluster, uid, meta["uid"])
            done["adopted"].append(f"{ns}/{cluster}")
    if done["revoked"] or done["adopted"]:
        LOG.info("facts agents swept: revoked %s; adopted %s", done["revoked"] or "none", done["adopted"] or "none")
    return done


def _adopt(api_client: client.ApiClient, namespace: str, cluster: str, uid: str, account_uid: str) -> None:
    """Record the Cluster's uid on its agent's ServiceAccount and make the Cluster the owner of the three."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    name, owners = agent_name(cluster), [owner_reference(cluster, uid)]
    _ignore_missing(lambda: core.patch_namespaced_service_account(name, namespace, {"metadata": {
        "uid": account_uid,  # this ServiceAccount, not one made again meanwhile (another uid is refused)
        "annotations": {AGENT_CLUSTER_UID_ANNOTATION: uid}, "ownerReferences": owners}},
        _request_timeout=TIMEOUT), also=(409, 422))
    for patch in (rbac.patch_namespaced_role, rbac.patch_namespaced_role_binding):
        _ignore_missing(functools.partial(patch, name, namespace, {"metadata": {"ownerReferences": owners}},
                                          _request_timeout=TIMEOUT))


def _owners(meta: Mapping[str, Any]) -> set[str]:
    """The Cluster uids an agent's object names: its ownerReferences' and its recorded annotation."""
    found = {ref.get("uid") for ref in meta.get("ownerReferences") or [] if ref.get("kind") == CLUSTER.kind}
    recorded = (meta.get("annotations") or {}).get(AGENT_CLUSTER_UID_ANNOTATION)
    return {uid for uid in (found | {recorded}) if uid}


def _fresh(create: Callable[[], Any], delete: Callable[[], Any]) -> None:
    """Create; when it exists already, delete it and create it again, so it holds exactly what we write."""
    for _ in range(RECREATE_ATTEMPTS):
        try:
            create()
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        _ignore_missing(delete)
        time.sleep(0.05)  # these kinds have no finalizers: gone at once, but a concurrent writer may be racing
    create()


def _ignore_missing(call: Callable[[], Any], also: tuple[int, ...] = ()) -> None:
    try:
        call()
    except ApiException as exc:
        if exc.status != 404 and exc.status not in also:
            raise
