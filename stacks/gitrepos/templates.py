"""The HubGitRepos a HubTenant's templates make (as Lieutenant's Tenant and Cluster templates do), pure.

- The tenant's own repository: HubGitRepo `tenant-<tenant>` in the tenant's namespace, path <owner>/<tenant>,
  owned by the HubTenant (cluster-scoped owners may own namespaced objects).
- Each HubCluster's catalog: HubGitRepo `cluster-<cluster>` beside it, path <owner>/<tenant>.<cluster>, owned by the
  HubCluster. A tenant's name has no dot (it is a namespace name), so <tenant>.<cluster> never names two pairs.
  Its deploy keys are the template's and, once the cluster's agent pushed one, the agent's key, read only
  (stacks.names.AGENT_DEPLOY_KEY).

Both carry ownerReferences, so a HubTenant or HubCluster taken away takes its HubGitRepo with it; the repository
itself then follows the HubGitRepo's deletionPolicy.
"""
from __future__ import annotations

from typing import Any, Mapping

from stacks.gitrepos.model import DeployKey, GitRepoTemplate
from stacks.names import (AGENT_CLUSTER_LABEL, AGENT_DEPLOY_KEY, API_VERSION, CLUSTER, GITREPO, GITREPO_ROLE_LABEL,
                          TENANT, TENANT_LABEL)

Manifest = dict[str, Any]
TENANT_ROLE, CLUSTER_ROLE = "tenant", "cluster"


def tenant_repo_name(tenant: str) -> str:
    """The HubGitRepo of a tenant's own repository."""
    return f"tenant-{tenant}"


def cluster_repo_name(cluster: str) -> str:
    """The HubGitRepo of a cluster's catalog repository."""
    return f"cluster-{cluster}"


def tenant_repo_path(template: GitRepoTemplate, tenant: str) -> str:
    return f"{template.owner}/{tenant}"


def cluster_repo_path(template: GitRepoTemplate, tenant: str, cluster: str) -> str:
    return f"{template.owner}/{tenant}.{cluster}"


def _owner(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": False}


def _spec(template: GitRepoTemplate, path: str, display_name: str | None, deploy_keys: list[DeployKey]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "forge": template.forge, "apiURL": template.api_url,
        "credentialsSecretRef": template.credentials_secret_ref.model_dump(by_alias=True),
        "path": path, "description": template.description,
        "deployKeys": [key.model_dump(by_alias=True) for key in deploy_keys],
        "deletionPolicy": template.deletion_policy,
        "templateFiles": dict(template.template_files),
    }
    name = template.display_name or display_name
    if name:
        spec["displayName"] = name
    return spec


def tenant_repo(template: GitRepoTemplate, *, tenant: str, tenant_uid: str, namespace: str,
                display_name: str | None) -> Manifest:
    """The HubGitRepo of the tenant's own repository."""
    return {
        "apiVersion": API_VERSION, "kind": GITREPO.kind,
        "metadata": {"name": tenant_repo_name(tenant), "namespace": namespace,
                     "labels": {TENANT_LABEL: tenant, GITREPO_ROLE_LABEL: TENANT_ROLE},
                     "ownerReferences": [_owner(TENANT.kind, tenant, tenant_uid)]},
        "spec": _spec(template, tenant_repo_path(template, tenant), display_name, list(template.deploy_keys)),
    }


def cluster_repo(template: GitRepoTemplate, *, tenant: str, namespace: str, cluster: str, cluster_uid: str,
                 display_name: str | None, agent_key: str | None) -> Manifest:
    """The HubGitRepo of a cluster's catalog; `agent_key`: the public key its agent pushed (None: none yet)."""
    deploy_keys = [key for key in template.deploy_keys if key.name != AGENT_DEPLOY_KEY]
    if agent_key:
        deploy_keys.append(DeployKey(name=AGENT_DEPLOY_KEY, public_key=agent_key, write=False))
    return {
        "apiVersion": API_VERSION, "kind": GITREPO.kind,
        "metadata": {"name": cluster_repo_name(cluster), "namespace": namespace,
                     "labels": {TENANT_LABEL: tenant, AGENT_CLUSTER_LABEL: cluster, GITREPO_ROLE_LABEL: CLUSTER_ROLE},
                     "ownerReferences": [_owner(CLUSTER.kind, cluster, cluster_uid)]},
        "spec": _spec(template, cluster_repo_path(template, tenant, cluster), display_name, deploy_keys),
    }


def agent_key_of(cluster_status: Mapping[str, Any] | None) -> str | None:
    """The public key a cluster's agent pushed (HubCluster status.agentKey.publicKey), None without one."""
    held = (cluster_status or {}).get("agentKey") or {}
    key = held.get("publicKey") if isinstance(held, Mapping) else None
    return key if isinstance(key, str) and key else None
