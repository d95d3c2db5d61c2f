"""A cluster agent's identity on the hub: its ServiceAccount, Role, RoleBinding and token (docs/registry.md).

    grant_agent   ServiceAccount clusternet-agent-<cluster> (made afresh), a Role of stacks.install.agent_rules
                  (push facts for that one Cluster, renew its own token) bound to it, then a TokenRequest.
    revoke_agent  delete the three; 404s are fine.

Revocation is deleting the ServiceAccount: its tokens are bound to its UID, and the API server refuses a token
whose ServiceAccount no longer exists (or exists under a new UID) once its authentication cache (10 s) has
expired. That is also why `grant_agent` makes the ServiceAccount afresh: a new install (after a reset of the
bootstrap token) replaces the previous agent, and every token that agent held stops working.

Rights this takes (stacks.install.API_RULES): create/delete serviceaccounts, roles and rolebindings, create
serviceaccounts/token, and the two rights the Role grants (RBAC: no `escalate`, so the writer holds them).
The token is returned to the caller and never logged.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.install import RBAC, agent_rules
from stacks.names import GROUP, agent_name

MANAGED_LABELS = {"app.kubernetes.io/managed-by": "clusternet-registry"}
RECREATE_ATTEMPTS = 5


def grant_agent(api_client: client.ApiClient, namespace: str, cluster: str, seconds: int) -> tuple[str, str]:
    """(token, expiry as RFC 3339 UTC) for a fresh agent ServiceAccount of `cluster`, allowed only its rules."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    name = agent_name(cluster)
    meta = {"name": name, "labels": {**MANAGED_LABELS, f"{GROUP}/cluster": cluster}}
    _fresh(lambda: core.create_namespaced_service_account(namespace, {"metadata": meta}),
           lambda: core.delete_namespaced_service_account(name, namespace))
    _fresh(lambda: rbac.create_namespaced_role(namespace, {"metadata": meta, "rules": agent_rules(cluster)}),
           lambda: rbac.delete_namespaced_role(name, namespace))
    _fresh(lambda: rbac.create_namespaced_role_binding(namespace, {
        "metadata": meta, "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
           lambda: rbac.delete_namespaced_role_binding(name, namespace))
    return request_token(core, namespace, name, seconds)


def request_token(core: client.CoreV1Api, namespace: str, name: str, seconds: int) -> tuple[str, str]:
    """(token, expiry) of a TokenRequest. Read raw: the client logs every body it parses at DEBUG level, and
    this one holds a token."""
    raw = core.create_namespaced_service_account_token(name, namespace, {"spec": {"expirationSeconds": seconds}},
                                                       _preload_content=False)
    status = json.loads(raw.data)["status"]
    return status["token"], status["expirationTimestamp"]  # a metav1.Time: RFC 3339 in UTC ("...Z") already


def revoke_agent(api_client: client.ApiClient, namespace: str, cluster: str) -> None:
    """Delete the agent's RoleBinding, Role and ServiceAccount (and so its tokens); gone already is fine."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    name = agent_name(cluster)
    for delete in (rbac.delete_namespaced_role_binding, rbac.delete_namespaced_role,
                   core.delete_namespaced_service_account):
        _ignore_missing(lambda: delete(name, namespace))


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


def _ignore_missing(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as exc:
        if exc.status != 404:
            raise
