"""The hubwright service inside a Kubernetes cluster: CRDs, RBAC, state and the Deployment.

    ControlPlane (hubwright:deploy:ControlPlane)
    ├── ConfigGroup         the CRDs (generated from the pydantic models by stacks.crds)
    ├── ConfigGroup         the Tenant admission policies and the tenant-admin ClusterRole (stacks.admission)
    ├── Namespace, ServiceAccount
    ├── ClusterRole(+Binding)  clusters (+status), hubconfigs, namespaces: read; hubretainedstacks: write; events: write; tenants and
    │                          what they materialise (stacks.admission.tenant_controller_rules); agents: delete
    ├── ClusterRoles           -tenant (clusters but never their status; aggregated into edit and admin),
    │                          -viewer (clusters and status, read; aggregated into view)
    ├── Role(+Binding)         in its namespace: the role-map ConfigMap (read), its Lease (write)
    ├── PersistentVolumeClaim  state of the file:// backend (with a Pulumi Cloud or S3 backend: an emptyDir)
    ├── Secret                 the backend's keys, only when the values give them (else made by the administrator)
    ├── Deployment             `python -m automation serve`, probes on /healthz and /readyz; read-only root
    │                          filesystem: writable are only the state dir, PULUMI_HOME and /tmp. On file://
    │                          without the Secret, an init container makes the passphrase on the state volume
    ├── Service                /metrics for Prometheus
    └── with executor "runners" (docs/service.md, Runners): the service also creates HubStackRuns and their inputs
        Secrets (in its namespace), and
        ├── ServiceAccount, ClusterRole(+Binding), Role(+Binding)  -runner: runs (read), their status (write),
        │                                                          the runs' Secrets in the namespace (get, patch)
        └── Deployment -runner  `python -m automation runner`, the service's image, backend and hardening
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.pods import hardened_container
from stacks.cluster_policy import cluster_policy_manifests
from stacks.keys_policy import keys_policy_manifests
from stacks.admission import (admission_manifests, gitrepo_controller_rules, tenant_admin_clusterrole,
                              tenant_controller_rules)
from stacks.sources.watched import rules as source_rules
from stacks.deployment import PASSPHRASE_FILE, InstallValues
from stacks.names import CLUSTERS, GITREPOS, HUBCONFIGS, GROUP, RETAINEDS, STACKRUNS
from stacks.runs.admission import stackrun_policy

STATE_DIR = "/var/lib/hubwright"  # --state-dir: per-stack workspaces (and the file:// backend's state)
PULUMI_HOME = "/var/cache/pulumi"  # the CLI's workspace settings and plugin cache (the Dockerfile's ENV too)
# The init container's program: a random passphrase, made once (O_EXCL), readable by the service's uid only.
MAKE_PASSPHRASE = ("import os, secrets, sys\n"
                   "try:\n"
                   "    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\n"
                   "except FileExistsError:\n"
                   "    sys.exit(0)\n"
                   "os.write(fd, secrets.token_urlsafe(32).encode())\n"
                   "os.close(fd)\n")


@dataclass(frozen=True)
class ControlPlaneArgs:
    image: str
    crds: Sequence[Mapping[str, Any]]  # stacks.crds.crd_manifests()
    namespace: str = "hubwright-system"
    # None: the file:// backend on a volume (one replica: the volume is ReadWriteOnce).
    # "s3://bucket/prefix" or "https://api.pulumi.com": shared state, two replicas with leader election.
    backend_url: str | None = None
    state_size: str = "10Gi"
    pulumi_home_size: str = "2Gi"  # emptyDir sizeLimit
    tmp_size: str = "1Gi"  # emptyDir sizeLimit
    passphrase_secret: str = "hubwright-pulumi"  # Secret with PULUMI_CONFIG_PASSPHRASE (and PULUMI_ACCESS_TOKEN)
    # Its keys, when the install creates it (stacks.deployment.BACKEND_SECRET_KEYS); None: the administrator does.
    passphrase_secret_data: Mapping[str, str] | None = None
    workers: int = 4  # --workers
    role_map_configmap: str = "hubwright-role-account-map"
    lease: str = "hubwright"  # the leader-election Lease
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)  # e.g. IRSA role
    serve_args: Sequence[str] = ()  # extra `python -m automation serve` flags
    run_timeout: float = 1800.0  # --run-timeout: seconds one Pulumi run may take before it is cancelled
    cancel_grace: float = 60.0  # --cancel-grace: seconds a cancelled run gets before its process tree is killed
    metrics_port: int = 8080
    # HUBWRIGHT_POLICY: the policy pack on every update, "mandatory" (each rule at its level), "advisory", or "off"
    # (the emergency switch: `pulumi config set policy off` on the deploy stack, then `pulumi up`).
    policy: str = "mandatory"
    resources: Mapping[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    )
    executor: str = "local"  # --executor: "runners" adds the runner Deployment (a shared backend_url only)
    runner_replicas: int = 2
    runner_workers: int = 1  # the runner's --workers: runs one pod executes at once
    claim_ttl: float = 30.0  # --claim-ttl, the service's and the runners'
    keep_runs: int = 10  # --keep-runs
    # Measured (bench/run_cost.py, docs/engine.md): one run peaks at ~310 MB RSS with one provider plugin, +70 MB per
    # more provider; the examples' largest stack (6 providers) at ~660 MB. 1Gi is that + 50 % for one run at once:
    # raise it by as much per run with more workers (the real aws plugin's size replaces the 70 MB where it runs).
    runner_resources: Mapping[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
    )

    @classmethod
    def from_values(cls, values: InstallValues, crds: Sequence[Mapping[str, Any]]) -> "ControlPlaneArgs":
        """The install's values (both doors: automation.cli.install and deploy/)."""
        return cls(image=values.image, crds=crds, namespace=values.namespace, backend_url=values.backend.url,
                   state_size=values.volumes.state, pulumi_home_size=values.volumes.pulumi_home,
                   tmp_size=values.volumes.tmp, passphrase_secret=values.backend.secret.name,
                   passphrase_secret_data=values.backend.secret.data, workers=values.service.workers,
                   service_account_annotations=values.service_account.all_annotations(),
                   metrics_port=values.service.metrics_port, policy=values.service.policy,
                   resources=values.service.resources.model_dump(), executor=values.service.executor,
                   runner_replicas=values.runners.replicas, runner_workers=values.runners.workers,
                   claim_ttl=values.runners.claim_ttl, keep_runs=values.runners.keep_runs,
                   runner_resources=values.runners.resources.model_dump())

    @property
    def runners(self) -> bool:
        return self.executor == "runners"

    @property
    def replicas(self) -> int:
        return 1 if self.backend_url is None else 2

    def __post_init__(self) -> None:
        if self.executor not in ("local", "runners"):
            raise ValueError(f"executor {self.executor!r}: local or runners")
        if self.runners and self.backend_url is None:
            raise ValueError("executor runners needs a shared backend_url: runner pods cannot share the file "
                             "backend's volume")

    @property
    def secret_optional(self) -> bool:
        """On file:// the pod starts without the Secret (the passphrase is then made on the state volume); a
        remote backend's credentials are only in it, so there the pod waits for it."""
        return self.backend_url is None

    @property
    def termination_grace(self) -> int:
        """The pod's terminationGracePeriodSeconds. On SIGTERM the service cancels its runs in flight and kills
        what is left of them after --cancel-grace; the 30 s on top cover the rest of its shutdown (workers, Events,
        watches, releasing the Lease), so the kubelet's SIGKILL never cuts a graceful cancel short."""
        return math.ceil(self.cancel_grace) + 30


# Least privilege: exactly what automation/ reads and writes.
CLUSTER_RULES = [
    # create and delete: the HubClusters kept for Cluster API and Hive objects (automation/service/sources.py).
    {"apiGroups": [GROUP], "resources": [CLUSTERS],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{CLUSTERS}/status"], "verbs": ["get", "update", "patch"]},
    {"apiGroups": [GROUP], "resources": [HUBCONFIGS], "verbs": ["get", "list", "watch"]},
    # the retained stacks (stacks/retention.py): written when a cluster is retained, deleted when released or adopted
    {"apiGroups": [GROUP], "resources": [RETAINEDS], "verbs": ["get", "list", "watch", "create", "delete"]},
    # status.mesh: each mesh group's state and the transit stacks' outputs (automation/service/transit.py).
    {"apiGroups": [GROUP], "resources": [f"{HUBCONFIGS}/status"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    # A Cluster gone: its facts agent's ServiceAccount (so its tokens), Role and RoleBinding go too; at start,
    # agents whose Cluster is gone are revoked and older agents get their Cluster's uid (adapters.agent.sweep_agents).
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "patch", "delete"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["get", "patch", "delete"]},
    # Tenants become namespaces with their admins' RoleBinding (automation/service/tenants.py).
    *tenant_controller_rules(),
    # HubGitRepos: the templates' made, each one's repository kept on its forge (automation/service/gitrepos.py).
    *gitrepo_controller_rules(),
    # Cluster API's Clusters and Hive's ClusterDeployments (automation/service/sources.py): read, and our finalizer.
    *source_rules(),
]


# What a tenant may do with Clusters: everything but the status, whose meshJoin and outputs.endpointVPC feed
# resolution (docs/security.md). Aggregated into the built-in edit and admin roles, so whoever administers a
# namespace may create its Clusters and nobody but the service writes their status; view reads them.
TENANT_RULES = [
    {"apiGroups": [GROUP], "resources": [CLUSTERS],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]},
]
VIEWER_RULES = [
    {"apiGroups": [GROUP], "resources": [CLUSTERS, f"{CLUSTERS}/status"], "verbs": ["get", "list", "watch"]},
    # the namespace's HubStackRuns: its stacks' update history (redacted: the inputs stay in the run's Secret)
    {"apiGroups": [GROUP], "resources": [STACKRUNS], "verbs": ["get", "list", "watch"]},
    # the namespace's HubGitRepos (its repositories' URLs, phase and deploy keys), read: only the service writes them
    {"apiGroups": [GROUP], "resources": [GITREPOS], "verbs": ["get", "list", "watch"]},
]
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


# --executor runners (docs/service.md, Runners). The service creates a run's inputs Secret (in its namespace) and
# then the run, reads both back, and deletes them (--keep-runs, and Secrets whose run is gone); it may mark a run it
# no longer wants (status). Only the service creates runs, and no one changes a run's spec: stacks.runs.admission.
SERVICE_RUN_RULES = [
    {"apiGroups": [GROUP], "resources": [STACKRUNS], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [GROUP], "resources": [f"{STACKRUNS}/status"], "verbs": ["update"]},
]
# get: a run's Secret read back (its result); list returns the same data, so get adds nothing to it.
SERVICE_RUN_SECRET_RULES = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "create", "delete"]}]
# The runners: every namespace's runs (they live beside their clusters), read; their claims and results written
# through the status subresource only; the runs' Secrets in the service's namespace, read and the result written
# (a Role there: no other namespace's Secrets). Nothing else: no Events, no Lease, no HubClusters.
RUNNER_RULES = [
    {"apiGroups": [GROUP], "resources": [STACKRUNS], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [GROUP], "resources": [f"{STACKRUNS}/status"], "verbs": ["update", "patch"]},
]
RUNNER_SECRET_RULES = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "patch"]}]
# The forge tokens of the HubGitRepos (automation/service/gitrepos.py): read by name, in the service's namespace only.
GITREPO_SECRET_RULES = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def namespace_rules(role_map_configmap: str, lease: str) -> list[dict[str, Any]]:
    """Only the one ConfigMap (watched with a metadata.name field selector) and the one Lease."""
    return [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [role_map_configmap],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
         "verbs": ["get", "update"]},
    ]


def service_labels(name: str) -> dict[str, str]:
    """The labels of the service's pods and of its metrics Service (what a ServiceMonitor selects); with
    `<name>-runner`, the runners' (which the service's selector does not match)."""
    return {"app.kubernetes.io/name": "hubwright", "app.kubernetes.io/instance": name}


def pod_hosts(deployment: str) -> str:
    """The regex of a Deployment's pod names, which are the hostnames its stack locks carry (<name>-<rs>-<pod>)."""
    return f"{deployment}-[a-z0-9]+-[a-z0-9]+"


class ControlPlane(pulumi.ComponentResource):
    def __init__(self, name: str, args: ControlPlaneArgs, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:deploy:ControlPlane", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        ns = args.namespace
        labels = service_labels(name)

        self.crds = k8s.yaml.v2.ConfigGroup(f"{name}-crds", objs=[dict(c) for c in args.crds], opts=child)
        # The registry's rules the API server enforces itself (stacks.admission): who may set a Tenant's account,
        # that a Tenant with Clusters stays, and the role a Tenant's admins get in its namespace; and that only
        # this service's ServiceAccount creates HubStackRuns and nobody changes one's spec (stacks.runs.admission);
        # and a HubCluster's account and API host as its namespace allows them (stacks.cluster_policy); and a
        # warning (never a refusal) for a hubwright.io/ key on our kinds that nothing reads (stacks.keys_policy).
        self.admission = k8s.yaml.v2.ConfigGroup(
            f"{name}-admission", objs=[tenant_admin_clusterrole(), *admission_manifests(), *stackrun_policy(ns, name),
                                       *cluster_policy_manifests(), *keys_policy_manifests()],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.crds])))
        self.namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": ns, "labels": labels}, opts=child)
        in_ns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.namespace]))
        meta = {"name": name, "namespace": ns, "labels": labels}

        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={**meta, "annotations": dict(args.service_account_annotations)}, opts=in_ns)
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        cluster_role = k8s.rbac.v1.ClusterRole(f"{name}-cr", metadata={"name": name, "labels": labels},
                                               rules=[*CLUSTER_RULES, *(SERVICE_RUN_RULES if args.runners else [])],
                                               opts=child)
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-crb", metadata={"name": name, "labels": labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role.metadata.name},
            subjects=subject, opts=child)
        for suffix, rules, into in (("tenant", TENANT_RULES, ("edit", "admin")), ("viewer", VIEWER_RULES, ("view",))):
            k8s.rbac.v1.ClusterRole(
                f"{name}-{suffix}", rules=rules, opts=child,
                metadata={"name": f"{name}-{suffix}", "labels": {**labels, **{AGGREGATE + r: "true" for r in into}}})
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=meta, opts=in_ns, rules=[
            *namespace_rules(args.role_map_configmap, args.lease), *GITREPO_SECRET_RULES,
            *(SERVICE_RUN_SECRET_RULES if args.runners else [])])
        k8s.rbac.v1.RoleBinding(
            f"{name}-rb", metadata=meta,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.metadata.name},
            subjects=subject, opts=in_ns)

        if args.passphrase_secret_data is not None:
            k8s.core.v1.Secret(f"{name}-backend", metadata={**meta, "name": args.passphrase_secret}, type="Opaque",
                               string_data=dict(args.passphrase_secret_data), opts=in_ns)

        # The root filesystem is read-only: every path the service writes is a volume. --state-dir holds the
        # per-stack workspaces whatever the backend (with file:// the state too, so then it must persist).
        if args.backend_url is None:
            k8s.core.v1.PersistentVolumeClaim(
                f"{name}-state", metadata={**meta, "name": f"{name}-state"},
                spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": args.state_size}}},
                opts=in_ns)
            state: dict[str, Any] = {"persistentVolumeClaim": {"claimName": f"{name}-state"}}
        else:
            state = {"emptyDir": {"sizeLimit": args.state_size}}
        volumes = [{"name": "state", **state}, {"name": "pulumi-home", "emptyDir": {"sizeLimit": args.pulumi_home_size}},
                   {"name": "tmp", "emptyDir": {"sizeLimit": args.tmp_size}}]
        mounts = [{"name": "state", "mountPath": STATE_DIR}, {"name": "pulumi-home", "mountPath": PULUMI_HOME},
                  {"name": "tmp", "mountPath": "/tmp"}]
        backend = args.backend_url or f"file://{STATE_DIR}"
        hardened = hardened_container()
        # A PULUMI_CONFIG_PASSPHRASE from the Secret comes first (the CLI reads it before the _FILE); without one,
        # the passphrase made on the state volume beside the state it protects, kept with it.
        passphrase_file = f"{STATE_DIR}/{PASSPHRASE_FILE}"
        init = [{
            "name": "passphrase",
            "image": args.image,
            "args": ["python", "-c", MAKE_PASSPHRASE, passphrase_file],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
            "securityContext": hardened,
            "volumeMounts": [{"name": "state", "mountPath": STATE_DIR}, {"name": "tmp", "mountPath": "/tmp"}],
        }] if args.secret_optional else []
        secret_env = [{"name": "PULUMI_CONFIG_PASSPHRASE_FILE", "value": passphrase_file}] if init else []

        probe = lambda path: {"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": 10}  # noqa: E731
        runner = f"{name}-runner"
        common_env = [{"name": "PULUMI_HOME", "value": PULUMI_HOME}, {"name": "HUBWRIGHT_POLICY", "value": args.policy},
                      *([{"name": "HUBWRIGHT_RUNNER_HOSTS", "value": pod_hosts(runner)}] if args.runners else []),
                      *secret_env]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deploy",
            metadata=meta,
            spec={
                "replicas": args.replicas,
                # The file backend's volume can only be mounted by one pod at a time.
                "strategy": {"type": "Recreate" if args.backend_url is None else "RollingUpdate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": account.metadata.name,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
                        "terminationGracePeriodSeconds": args.termination_grace,
                        **({"initContainers": init} if init else {}),
                        "containers": [{
                            "name": "hubwright",
                            "image": args.image,
                            "args": ["python", "-m", "automation", "serve", "--namespace", ns,
                                     "--backend", backend, "--state-dir", STATE_DIR,
                                     "--metrics-port", str(args.metrics_port),
                                     "--role-map-configmap", args.role_map_configmap,
                                     "--leader-election-id", args.lease,
                                     "--run-timeout", f"{args.run_timeout:g}",
                                     "--cancel-grace", f"{args.cancel_grace:g}",
                                     "--workers", str(args.workers),
                                     *(["--executor", "runners", "--claim-ttl", f"{args.claim_ttl:g}",
                                        "--keep-runs", str(args.keep_runs)] if args.runners else []),
                                     *args.serve_args],
                            "env": [
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                # A lock left by a replaced pod of this Deployment is this service's own:
                                # recover() may clear it once stale (pod hostnames: <name>-<rs hash>-<pod hash>).
                                {"name": "HUBWRIGHT_LOCK_HOSTS", "value": pod_hosts(name)},
                                *common_env,
                            ],
                            "envFrom": [{"secretRef": {"name": args.passphrase_secret,
                                                       "optional": args.secret_optional}}],
                            "ports": [{"name": "metrics", "containerPort": args.metrics_port}],
                            "livenessProbe": probe("/healthz"),
                            "readinessProbe": probe("/readyz"),
                            "resources": dict(args.resources),
                            "securityContext": hardened,
                            "volumeMounts": mounts,
                        }],
                        "volumes": volumes,
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[self.crds])),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-metrics", metadata={**meta, "name": f"{name}-metrics"},
            spec={"selector": labels, "ports": [{"name": "metrics", "port": args.metrics_port, "targetPort": "metrics"}]},
            opts=in_ns)
        self.runners: k8s.apps.v1.Deployment | None = None
        if args.runners:
            self.runners = self._runners(runner, args, in_ns, volumes=volumes, mounts=mounts, env=common_env,
                                         probe=probe, service_user=(ns, name))
        self.register_outputs({"namespace": ns, "deployment": self.deployment.metadata.name,
                               "runners": self.runners.metadata.name if self.runners else None})

    def _runners(self, name: str, args: ControlPlaneArgs, in_ns: pulumi.ResourceOptions, *, volumes: list[Any],
                 mounts: list[Any], env: list[Any], probe: Any,
                 service_user: tuple[str, str]) -> k8s.apps.v1.Deployment:
        """The runner pool: its own ServiceAccount (the service's AWS identity annotations: a run assumes the same
        roles) with only RUNNER_RULES and RUNNER_SECRET_RULES, and a Deployment of `python -m automation runner` on
        the service's backend, Secret and hardening. A shared backend only (ControlPlaneArgs), so the state volume
        is an emptyDir (per-stack workspaces)."""
        ns, service = service_user
        labels = service_labels(name)
        meta = {"name": name, "namespace": ns, "labels": labels}
        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={**meta, "annotations": dict(args.service_account_annotations)}, opts=in_ns)
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        rbac = "rbac.authorization.k8s.io"
        cluster_role = k8s.rbac.v1.ClusterRole(f"{name}-cr", metadata={"name": name, "labels": labels},
                                               rules=RUNNER_RULES, opts=in_ns)
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-crb", metadata={"name": name, "labels": labels}, subjects=subject, opts=in_ns,
            role_ref={"apiGroup": rbac, "kind": "ClusterRole", "name": cluster_role.metadata.name})
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=meta, rules=RUNNER_SECRET_RULES, opts=in_ns)
        k8s.rbac.v1.RoleBinding(f"{name}-rb", metadata=meta, subjects=subject, opts=in_ns,
                                role_ref={"apiGroup": rbac, "kind": "Role", "name": role.metadata.name})
        downward = lambda path: {"valueFrom": {"fieldRef": {"fieldPath": path}}}  # noqa: E731
        return k8s.apps.v1.Deployment(
            f"{name}-deploy",
            metadata=meta,
            spec={
                "replicas": args.runner_replicas,
                "strategy": {"type": "RollingUpdate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": account.metadata.name,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
                        # SIGTERM: a runner drains, finishing its run or handing it back within --cancel-grace.
                        "terminationGracePeriodSeconds": args.termination_grace,
                        "containers": [{
                            "name": "runner",
                            "image": args.image,
                            "args": ["python", "-m", "automation", "runner", "--namespace", ns,
                                     "--backend", str(args.backend_url), "--state-dir", STATE_DIR,
                                     "--metrics-port", str(args.metrics_port),
                                     "--run-timeout", f"{args.run_timeout:g}",
                                     "--cancel-grace", f"{args.cancel_grace:g}",
                                     "--claim-ttl", f"{args.claim_ttl:g}",
                                     "--workers", str(args.runner_workers)],
                            "env": [
                                # POD_NAME: the runner's name in its claims and the host its stack locks carry.
                                {"name": "POD_NAME", **downward("metadata.name")},
                                {"name": "POD_NAMESPACE", **downward("metadata.namespace")},
                                # Locks the service's own pods left before the executor was switched to runners.
                                {"name": "HUBWRIGHT_LOCK_HOSTS", "value": pod_hosts(service)},
                                *env,
                            ],
                            "envFrom": [{"secretRef": {"name": args.passphrase_secret, "optional": False}}],
                            "ports": [{"name": "metrics", "containerPort": args.metrics_port}],
                            "livenessProbe": probe("/healthz"),
                            "readinessProbe": probe("/readyz"),
                            "resources": dict(args.runner_resources),
                            "securityContext": hardened_container(),
                            "volumeMounts": mounts,
                        }],
                        "volumes": volumes,
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[self.crds])),
        )
