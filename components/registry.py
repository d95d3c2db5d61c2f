"""The registry API inside the hub cluster: its own Deployment beside the service (docs/registry.md).

    RegistryApi (hubwright:deploy:RegistryApi)
    ├── ServiceAccount, ClusterRole(+Binding)  exactly the API's own rights (stacks.install.API_RULES)
    ├── ValidatingAdmissionPolicy(+Binding)    <name>-agents: of those rights, its ServiceAccount uses only its
    │                                          agents' (stacks.agent_admission: names, tenant namespaces, audiences)
    ├── PersistentVolumeClaim                  the SQLite facts history (not made with --facts-db postgresql://)
    ├── Deployment                             `python -m automation api`, probes on /healthz; read-only root
    │                                          filesystem: writable are only the facts volume and /tmp
    └── Service                                port 80 → the API (put an Ingress or a load balancer in front)

Everything else the API does, it does as the caller's own token, so Kubernetes RBAC decides.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.identity import own_identity
from components.pods import hardened_container
from stacks.agent_admission import API_AUDIENCES, agent_policy
from stacks.deployment import InstallValues, history_args

FACTS_DIR = "/var/lib/hubwright-registry"  # the SQLite file's volume


@dataclass(frozen=True)
class RegistryApiArgs:
    image: str
    rules: Sequence[Mapping[str, Any]]  # the API ServiceAccount's ClusterRole (stacks.install.API_RULES)
    # the hub API server's own audiences: the only ones its agents' tokens may carry (stacks.agent_admission)
    token_audiences: Sequence[str] = API_AUDIENCES
    namespace: str = "hubwright-system"
    # What agents dial (--public-url). None: the Service's in-cluster address, http://<name>.<namespace>.svc.
    public_url: str | None = None
    # None: SQLite on a volume, one replica (ReadWriteOnce). "postgresql://...": shared history, several replicas.
    facts_db: str | None = None
    facts_db_secret: str | None = None  # a Secret whose key `url` holds the postgresql:// URL (with its password)
    replicas: int = 2  # with facts_db only; SQLite means 1
    facts_size: str = "1Gi"
    tmp_size: str = "1Gi"  # emptyDir sizeLimit
    facts_retention: int = 1000
    api_args: Sequence[str] = ()  # extra `python -m automation api` flags
    # The stacks' backend, whose store holds the run history the API serves (automation/api/history.py): None (the
    # file backend, on the service's own volume) means no history here; its AWS keys (not its passphrase) come from
    # the backend Secret when it holds them (with IRSA, the role of this API's ServiceAccount reads the bucket).
    backend_url: str | None = None
    backend_secret: str | None = None
    port: int = 8080
    resources: Mapping[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}})

    @classmethod
    def from_values(cls, values: InstallValues, rules: Sequence[Mapping[str, Any]]) -> "RegistryApiArgs":
        """The install's values (both doors: automation.cli.install and deploy/)."""
        registry = values.registry
        return cls(image=values.image, rules=rules, namespace=values.namespace, public_url=registry.public_url,
                   token_audiences=tuple(registry.token_audiences), facts_db_secret=registry.facts_db_secret,
                   facts_size=values.volumes.facts, tmp_size=values.volumes.tmp,
                   resources=registry.resources.model_dump(), backend_url=values.backend.url,
                   backend_secret=values.backend.secret.name)

    @property
    def shared_history(self) -> bool:
        return self.facts_db is not None or self.facts_db_secret is not None

    @property
    def replica_count(self) -> int:
        return self.replicas if self.shared_history else 1


class RegistryApi(pulumi.ComponentResource):
    def __init__(self, name: str, args: RegistryApiArgs, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:deploy:RegistryApi", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        ns = args.namespace
        labels = {"app.kubernetes.io/name": "hubwright-registry", "app.kubernetes.io/instance": name}
        meta = {"name": name, "namespace": ns, "labels": labels}
        public_url = args.public_url or f"http://{name}.{ns}.svc"  # the Service below has the component's name

        account = own_identity(name, ns, labels, args.rules, child)
        # RBAC cannot say "hubwright-agent-* in tenant namespaces": the API server's admission does, for this user
        self.admission = k8s.yaml.v2.ConfigGroup(f"{name}-admission",
                                                 objs=agent_policy(ns, name, tuple(args.token_audiences)), opts=child)

        # A PostgreSQL URL carries a password: from a Secret, through the flag's environment variable, never in args.
        env: list[dict[str, Any]] = []
        facts_db: list[str] = []
        if args.facts_db_secret is not None:
            env.append({"name": "HUBWRIGHT_FACTS_DB",
                        "valueFrom": {"secretKeyRef": {"name": args.facts_db_secret, "key": "url"}}})
        else:
            facts_db = ["--facts-db", args.facts_db or f"sqlite:///{FACTS_DIR}/facts.db"]
        volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": args.tmp_size}}]
        mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
        if not args.shared_history:
            k8s.core.v1.PersistentVolumeClaim(
                f"{name}-facts", metadata={**meta, "name": f"{name}-facts"},
                spec={"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": args.facts_size}}},
                opts=child)
            volumes.append({"name": "facts", "persistentVolumeClaim": {"claimName": f"{name}-facts"}})
            mounts.append({"name": "facts", "mountPath": FACTS_DIR})

        history = history_args(args.backend_url, args.backend_secret, env)
        probe = lambda path: {"httpGet": {"path": path, "port": "http"}, "periodSeconds": 10}  # noqa: E731
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deploy",
            metadata=meta,
            spec={
                "replicas": args.replica_count,
                "strategy": {"type": "RollingUpdate" if args.shared_history else "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": account.metadata.name,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
                        "containers": [{
                            "name": "registry",
                            "image": args.image,
                            "args": ["python", "-m", "automation", "api", "--bind", f"0.0.0.0:{args.port}",
                                     *facts_db, "--facts-retention", str(args.facts_retention),
                                     "--public-url", public_url, "--agent-image", args.image,
                                     *history, *args.api_args],
                            "env": env,
                            "ports": [{"name": "http", "containerPort": args.port}],
                            "livenessProbe": probe("/healthz"),
                            "readinessProbe": probe("/healthz"),
                            "resources": dict(args.resources),
                            "securityContext": hardened_container(),
                            "volumeMounts": mounts,
                        }],
                        "volumes": volumes,
                    },
                },
            },
            opts=child,
        )
        self.service = k8s.core.v1.Service(
            f"{name}-svc", metadata=meta,
            spec={"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
            opts=child)
        self.register_outputs({"deployment": self.deployment.metadata.name, "service": self.service.metadata.name})
