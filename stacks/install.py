"""What a new cluster applies once it has redeemed its bootstrap token, and the rights that takes. Pure.

`GET /install/agent.json?token=...` (automation.api.bootstrap) answers with `install_response(...)`, a Kubernetes
`List`, so `curl ... | kubectl apply -f -` takes it as it is (as Lieutenant's install answer):

    {"apiVersion": "v1", "kind": "List", "items": [...],
     "cluster", "tenant", "apiURL", "expiresAt", "privateLinkEndpoint", "gitRepo", "nodeProxyWrittenBy"}
                                                                          (kubectl ignores these)

The items go to the *guest* cluster, in this order (apply them as listed):

    Namespace hubwright-agent
    ServiceAccount, ClusterRole(+Binding)   the agent reads /version and lists nodes in its own cluster
    Role(+Binding)                          it may rewrite its own Secret (the rotated hub token) and its catalog
                                            key's Secret, nothing else
    Secret hubwright-agent                 the hub token (rotated through the API), its URL, tenant, cluster,
                                            hub namespace, and this install's ID
    Secret hubwright-catalog-key           empty: the agent writes its SSH key pair there (identity, identity.pub,
                                            known_hosts: what Flux's GitRepository and Argo CD take)
    ConfigMap hubwright-catalog             the catalog repository's URL, SSH URL and known_hosts, when it has one
    Deployment hubwright-agent             `python -m automation agent`: non-root, read-only root filesystem
    ConfigMap kube-system/hubwright-apiserver-proxy   the shared-ingress node proxy, when the cluster uses it and
                                            no one else writes it (`nodeProxyWrittenBy`: a HostedCluster's guests'
                                            proxy is HyperShift's, so its answer carries none)

Three sets of hub-side rights live here as data, so deploy/, the docs and the tests read one list:
- `API_RULES`: the registry API's own ServiceAccount (a ClusterRole). Everything else the API does, it does as
  the caller. It holds `create hubclusters/facts` only to *grant* it: RBAC lets a client write a Role only with
  rights it holds itself (no `escalate`, no `bind`).
- `CONSOLE_RULES`: the web console's own ServiceAccount (a ClusterRole; components/console.py): sign-in, access
  reviews and reads for its cache. It writes nothing itself: what a viewer changes, it changes with the viewer's
  own token (no `impersonate`).
- `agent_rules(cluster)`: what an agent's token may do on the hub: push facts for its one Cluster. Nothing
  else: not `hubclusters/status` (status feeds resolution and belongs to the service), and not
  `serviceaccounts/token` (a token of any lifetime and audience): the registry API rotates its token
  (automation.api.agents), with a lifetime the hub administrator caps.

The catalog key: on its first start the agent makes an ed25519 key pair in KEY_SECRET and PUTs the public key to the
registry (automation.api.gitrepos), which makes it the catalog repository's read-only deploy key. The private key
never leaves the cluster. Each install has its own ID (`install_id`, in the agent's Secret), which the agent records
on KEY_SECRET (INSTALL_ID_ANNOTATION): a new install (a reset bootstrap token) has another ID, so the agent makes a
new key pair, and the reset already took the old key off the repository.
"""
from __future__ import annotations

from typing import Any, Mapping

import yaml

from stacks.haproxy import guest_manifests
from stacks.inputs import SharedIngressInputs
from stacks.model.cluster import Cluster
from stacks.names import CLUSTERS, GITREPOS, HUBCONFIGS, STACKRUNS, TENANTS, GROUP, SHARED_INGRESS_CONFIGMAP
from stacks.sources.families import controlling

RBAC = "rbac.authorization.k8s.io"
AGENT_NAMESPACE = "hubwright-agent"  # in the guest cluster
AGENT = "hubwright-agent"  # the guest-side ServiceAccount, roles, Secret and Deployment
SECRET_MOUNT = "/etc/hubwright-agent"
FACTS_INTERVAL = 300  # seconds between two pushes of the agent
AGENT_LABELS = {"app.kubernetes.io/name": AGENT, "app.kubernetes.io/part-of": "hubwright"}
KEY_SECRET = "hubwright-catalog-key"  # the agent's SSH key pair for its catalog repository (guest side)
CATALOG_CONFIGMAP = "hubwright-catalog"  # the catalog repository's url, sshURL and known_hosts (guest side)
CATALOG_MOUNT = "/etc/hubwright-catalog"
INSTALL_ID_ANNOTATION = f"{GROUP}/install-id"  # on KEY_SECRET: the install its key pair was made for
KEY_PUSHED_ANNOTATION = f"{GROUP}/key-pushed"  # on KEY_SECRET: the fingerprint the registry accepted

# The registry API's own ServiceAccount, cluster-wide (docs/registry.md; deploy/ grants exactly these).
API_RULES: tuple[dict[str, Any], ...] = (
    # find a cluster by its token's label, read its tokenLifetime, set the label on a (re)issue
    {"apiGroups": [GROUP], "resources": [CLUSTERS], "verbs": ["get", "list", "patch"]},
    # status.bootstrapToken (issue, mark used atomically) and status.facts (the latest pushed facts)
    {"apiGroups": [GROUP], "resources": [f"{CLUSTERS}/status"], "verbs": ["patch"]},
    # held only to grant it to agents: RBAC refuses a Role carrying rights its writer does not hold
    {"apiGroups": [GROUP], "resources": [f"{CLUSTERS}/facts"], "verbs": ["create"]},
    {"apiGroups": [GROUP], "resources": [TENANTS], "verbs": ["get", "list"]},  # tenant <-> namespace
    {"apiGroups": [GROUP], "resources": [HUBCONFIGS], "verbs": ["get"]},  # the shared ingress's address
    # an install answer's catalog repository (url, sshURL, host keys), read from its HubGitRepo's status
    {"apiGroups": [GROUP], "resources": [GITREPOS], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},  # tenant and allowed-backends annotations
    # the routes the service publishes: an install gets its node proxy's config only for a cluster routed to it
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [SHARED_INGRESS_CONFIGMAP], "verbs": ["get"]},
    # the agent's ServiceAccount (deleting it revokes every token it was given; get: the Cluster uid it records)
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create", "get", "delete"]},
    # the agent's first token and each rotation (automation.api.agents): the agent itself may not ask for one
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    # get: read before a delete conditional on who owns it (a Cluster deleted during an install)
    {"apiGroups": [RBAC], "resources": ["roles", "rolebindings"], "verbs": ["create", "get", "delete"]},
)

# The web console's own ServiceAccount, cluster-wide (components/console.py grants exactly these). No secrets, no
# write but the two reviews, no impersonate: what a viewer changes goes with the viewer's own token, RBAC decides.
CONSOLE_RULES: tuple[dict[str, Any], ...] = (
    # sign-in: whose token a viewer gave (a TokenReview answers with the user and groups, or not authenticated)
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    # what each viewer may see and do: a SubjectAccessReview per viewer, namespace, resource and verb (cached)
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    # its informer cache: the fleet, each cluster's runs and the hub's config (shown only as far as a review allows)
    {"apiGroups": [GROUP], "resources": [CLUSTERS, STACKRUNS, HUBCONFIGS], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},  # the tenant of a namespace
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},  # a cluster's recent Events
)
# ... and in the service's namespace (a Role): the role-map ConfigMap, which the mesh page resolves the fleet with
# (its account-to-role entries are never shown to a viewer)
CONSOLE_NAMESPACE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
)


def agent_rules(cluster: str) -> list[dict[str, Any]]:
    """The hub Role of a cluster's agent (in the cluster's namespace): push its facts, nothing else."""
    return [
        {"apiGroups": [GROUP], "resources": [f"{CLUSTERS}/facts"], "resourceNames": [cluster], "verbs": ["create"]},
    ]


def private_link_endpoint(cluster: Cluster) -> str | None:
    """The DNS name of the hub's interface endpoint to the cluster's API, once its stack has made one."""
    if not cluster.spec.private_link.enabled:
        return None
    outputs = (cluster.status or {}).get("outputs")
    endpoint = outputs.get("endpoint") if isinstance(outputs, Mapping) else None
    return endpoint if isinstance(endpoint, str) and endpoint else None


def node_proxy_config_map(node_proxy: SharedIngressInputs) -> dict[str, Any]:
    """The shared-ingress node proxy's ConfigMap, the same one the cluster's stack outputs (stacks.haproxy)."""
    return yaml.safe_load(guest_manifests(node_proxy)["configMap"])


def install_response(cluster: Cluster, *, tenant: str, api_url: str, agent_image: str, agent_token: str,
                     expires_at: str, node_proxy: SharedIngressInputs | None = None,
                     interval: int = FACTS_INTERVAL, install_id: str | None = None,
                     git_repo: Mapping[str, Any] | None = None,
                     node_proxy_writer: str | None = None) -> dict[str, Any]:
    """The install endpoint's answer for `cluster` (metadata.namespace is its hub namespace). The agent rotates
    its token before `expires_at` through the registry API (`api_url`). With an `install_id`, the agent keeps an SSH
    key pair for its catalog repository (KEY_SECRET); `git_repo` (catalog_repo: url, sshURL, hostKeys) is that
    repository, when it has one already. `node_proxy_writer`: who else writes the guests' node proxy (then the
    answer carries none, and says who does)."""
    namespace, name = cluster.metadata.namespace or "default", cluster.metadata.name
    manifests = agent_manifests(namespace=namespace, cluster=name, tenant=tenant, api_url=api_url,
                                image=agent_image, token=agent_token, interval=interval, install_id=install_id)
    if git_repo is not None:
        manifests.append(catalog_config_map(git_repo))
    if node_proxy is not None:
        manifests.append(node_proxy_config_map(node_proxy))
    return {
        "apiVersion": "v1",
        "kind": "List",
        "cluster": name,
        "tenant": tenant,
        "apiURL": api_url,
        "expiresAt": expires_at,
        "privateLinkEndpoint": private_link_endpoint(cluster),
        "gitRepo": dict(git_repo) if git_repo is not None else None,
        "nodeProxyWrittenBy": node_proxy_writer or ("hubwright" if node_proxy is not None else None),
        "items": manifests,
    }


def node_proxy_writer(cluster: Cluster, doc: Mapping[str, Any]) -> str | None:
    """Who writes the node-side proxy of the cluster's guests when it is not hubwright (its spec.sharedIngress
    nodeProxy External): the project of the source that controls its HubCluster `doc` (HyperShift), else None."""
    if cluster.spec.shared_ingress.node_proxy != "External":
        return None
    meta = doc.get("metadata")
    family = controlling(meta.get("ownerReferences") if isinstance(meta, Mapping) else None)
    writer = family.guest_proxy_writer if family is not None else None
    return writer or "another writer (spec.sharedIngress.nodeProxy: External)"


def catalog_repo(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What an install tells the agent of its catalog repository, from the HubGitRepo's status: {url, sshURL,
    hostKeys}, or None until the repository has an SSH URL."""
    status = status if isinstance(status, Mapping) else {}
    ssh_url = status.get("sshURL")
    if not isinstance(ssh_url, str) or not ssh_url:
        return None
    host_keys = [line for line in status.get("hostKeys") or [] if isinstance(line, str) and line]
    url = status.get("url")
    return {"url": url if isinstance(url, str) else None, "sshURL": ssh_url, "hostKeys": host_keys}


def catalog_config_map(git_repo: Mapping[str, Any]) -> dict[str, Any]:
    """The catalog repository's ConfigMap in the guest cluster (mounted into the agent at CATALOG_MOUNT)."""
    known_hosts = "".join(f"{line}\n" for line in git_repo.get("hostKeys") or [])
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CATALOG_CONFIGMAP, "namespace": AGENT_NAMESPACE, "labels": dict(AGENT_LABELS)},
            "data": {"url": git_repo.get("url") or "", "sshURL": git_repo["sshURL"], "known_hosts": known_hosts}}


def agent_manifests(*, namespace: str, cluster: str, tenant: str, api_url: str, image: str, token: str,
                    interval: int = FACTS_INTERVAL, install_id: str | None = None) -> list[dict[str, Any]]:
    """The facts agent in the guest cluster: its namespace, guest-side rights, Secret and Deployment; with an
    `install_id`, also the (empty) Secret of its catalog key pair and the right to write that one Secret."""
    meta = {"name": AGENT, "namespace": AGENT_NAMESPACE, "labels": dict(AGENT_LABELS)}
    secret = {"token": token, "apiURL": api_url, "tenant": tenant, "cluster": cluster, "namespace": namespace}
    secrets_rules = [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [AGENT], "verbs": ["get", "patch"]}]
    key_secret: list[dict[str, Any]] = []
    if install_id is not None:
        secret["installID"] = install_id
        # Kubernetes cannot limit `create` to a name, so the install makes the Secret and the agent only patches it
        secrets_rules.append({"apiGroups": [""], "resources": ["secrets"], "resourceNames": [KEY_SECRET],
                              "verbs": ["get", "patch"]})
        key_secret.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
            "name": KEY_SECRET, "namespace": AGENT_NAMESPACE, "labels": dict(AGENT_LABELS)}})
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE, "labels": dict(AGENT_LABELS)}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": _cluster_meta(),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": _cluster_meta(),
         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": AGENT}, "subjects": [_subject()]},
        # the rotated hub token is written back here, so a restarted agent starts with a live one; the catalog key
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": secrets_rules},
        {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": AGENT}, "subjects": [_subject()]},
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": secret},
        *key_secret,
        agent_deployment(image, interval=interval, catalog_key=install_id is not None),
    ]


def agent_deployment(image: str, *, interval: int = FACTS_INTERVAL, catalog_key: bool = False) -> dict[str, Any]:
    """One agent pod (Recreate: never two pushing at once). Its settings come from the Secret; with `catalog_key`
    it keeps the catalog key pair in KEY_SECRET and reads the catalog's known_hosts from CATALOG_CONFIGMAP."""

    def from_secret(key: str) -> dict[str, Any]:
        return {"valueFrom": {"secretKeyRef": {"name": AGENT, "key": key}}}

    env = [{"name": "HUBWRIGHT_API_URL", **from_secret("apiURL")},
           {"name": "HUBWRIGHT_TENANT", **from_secret("tenant")},
           {"name": "HUBWRIGHT_CLUSTER", **from_secret("cluster")},
           {"name": "HUBWRIGHT_HUB_NAMESPACE", **from_secret("namespace")},
           {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]
    args = ["python", "-m", "automation", "agent",
            "--api", "$(HUBWRIGHT_API_URL)", "--tenant", "$(HUBWRIGHT_TENANT)",
            "--namespace", "$(HUBWRIGHT_HUB_NAMESPACE)", "--cluster", "$(HUBWRIGHT_CLUSTER)",
            "--token-file", f"{SECRET_MOUNT}/token", "--interval", str(interval),
            "--secret", f"{AGENT_NAMESPACE}/{AGENT}"]
    mounts = [{"name": "hub", "mountPath": SECRET_MOUNT, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "hub", "secret": {"secretName": AGENT, "defaultMode": 0o440}}]
    if catalog_key:
        env.insert(4, {"name": "HUBWRIGHT_INSTALL_ID", **from_secret("installID")})
        args += ["--install-id", "$(HUBWRIGHT_INSTALL_ID)", "--key-secret", f"{AGENT_NAMESPACE}/{KEY_SECRET}",
                 "--known-hosts-file", f"{CATALOG_MOUNT}/known_hosts"]
        mounts.append({"name": "catalog", "mountPath": CATALOG_MOUNT, "readOnly": True})
        # optional: a cluster installed before its catalog repository was made has no such ConfigMap (yet)
        volumes.append({"name": "catalog", "configMap": {"name": CATALOG_CONFIGMAP, "optional": True}})
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": AGENT, "namespace": AGENT_NAMESPACE, "labels": dict(AGENT_LABELS)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": AGENT}},
            "template": {
                "metadata": {"labels": dict(AGENT_LABELS)},
                "spec": {
                    "serviceAccountName": AGENT,
                    "automountServiceAccountToken": True,  # the guest's API: /version and nodes
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                        "fsGroup": 65532,  # the Secret's files: group-readable by the agent
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "agent",
                        "image": image,
                        "args": args,
                        "env": env,
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                                      "limits": {"cpu": "200m", "memory": "192Mi"}},
                        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }


def _cluster_meta() -> dict[str, Any]:
    return {"name": AGENT, "labels": dict(AGENT_LABELS)}


def _subject() -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": AGENT, "namespace": AGENT_NAMESPACE}
