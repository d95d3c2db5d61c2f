"""The shared ingress's central proxy on the management cluster.

    CentralProxy (hubwright:ingress:CentralProxy)
    ├── Namespace            spec.sharedIngress.namespace
    ├── ConfigMap            haproxy.cfg + clusters.map (stacks.haproxy)
    ├── Deployment           HAProxy in master-worker mode, >= 2 replicas on different nodes, readiness on /healthz;
    │                        with a reloader image, a sidecar applies ConfigMap changes without dropping connections
    ├── PodDisruptionBudget  at most one replica down at a time
    └── Service              type LoadBalancer: the one address every cluster's node-side proxy dials

Use:
    routes = resolve_all(fleet).routes                       # stacks.resolve: the clusters that pass every check
    proxy = CentralProxy("shared-ingress", CentralProxyArgs.from_hub(hub.spec.shared_ingress, routes), provider)
    pulumi.export("sharedIngressAddress", proxy.endpoint)    # → HubConfig spec.sharedIngress.address
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.pods import hardened_container
from stacks.haproxy import CONFIG_DIR, CONFIG_FILE, HEALTH_PORT, MAP_FILE, render_for_proxy
from stacks.ingress import Route
from stacks.model.hub import HubSharedIngress
from stacks.names import parse_host_port

RUN_DIR = "/var/run/haproxy"  # the master CLI socket, shared with the reloader
MASTER_SOCKET = f"{RUN_DIR}/master.sock"


@dataclass(frozen=True)
class CentralProxyArgs:
    config: str  # haproxy.cfg, rendered with the map at CONFIG_DIR/clusters.map and /healthz on HEALTH_PORT
    map: str  # clusters.map
    port: int  # the port HAProxy binds and the load balancer exposes
    dropped: tuple[tuple[Route, str], ...] = ()  # routes the renderer refused (not in config or map), and why
    namespace: str = "hubwright-ingress"
    image: str = "haproxy:2.6"
    replicas: int = 2
    reloader_image: str | None = None  # the hubwright image; None: a config change rolls the pods
    # True: the service keeps the ConfigMap's routes current (automation/adapters/kube/ingress_sync.py) and this
    # component only creates it; needs the reloader, since nothing else would apply the changes.
    routes_from_service: bool = False
    route_writer: tuple[str, str] | None = None  # (namespace, service account) allowed to update the ConfigMap
    service_annotations: Mapping[str, str] = field(default_factory=dict)  # e.g. the cloud's load balancer type
    resources: Mapping[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}})

    def __post_init__(self) -> None:
        if self.replicas < 2:
            raise ValueError(f"replicas {self.replicas}: the central proxy runs at least two")
        if self.routes_from_service and not self.reloader_image:
            raise ValueError("routes_from_service needs reloader_image: nothing else would apply the service's changes")

    @classmethod
    def from_hub(cls, ingress: HubSharedIngress, routes: Sequence[Route], **overrides: Any) -> "CentralProxyArgs":
        rendered = render_for_proxy(ingress, routes)
        fields = dict(config=rendered.config, map=rendered.map, port=parse_host_port(ingress.bind, bind=True)[1],
                      dropped=rendered.dropped,
                      namespace=ingress.namespace, image=ingress.image, replicas=ingress.replicas,
                      reloader_image=ingress.reloader_image)
        return cls(**{**fields, **overrides})

    @property
    def config_hash(self) -> str:
        return hashlib.sha256((self.config + "\0" + self.map).encode()).hexdigest()[:16]


def _lb_address(status: Any) -> str | None:
    """The load balancer's hostname (AWS) or IP (most others), once the cloud has assigned one."""
    balancer = getattr(status, "load_balancer", None) if status is not None else None
    for entry in (getattr(balancer, "ingress", None) or []):
        address = getattr(entry, "hostname", None) or getattr(entry, "ip", None)
        if address:
            return address
    return None


class CentralProxy(pulumi.ComponentResource):
    def __init__(self, name: str, args: CentralProxyArgs, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:ingress:CentralProxy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        labels = {"app.kubernetes.io/name": "hubwright-ingress", "app.kubernetes.io/instance": name,
                  "app.kubernetes.io/component": "central-proxy"}

        self.namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": args.namespace, "labels": labels},
                                               opts=child)
        in_ns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.namespace]))
        meta = {"name": name, "namespace": args.namespace, "labels": labels}

        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config", metadata=meta, data={CONFIG_FILE: args.config, MAP_FILE: args.map},
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(
                ignore_changes=["data"] if args.routes_from_service else None)))

        if args.route_writer is not None:
            writer_ns, writer = args.route_writer
            role = k8s.rbac.v1.Role(f"{name}-routes", metadata={**meta, "name": f"{name}-routes"}, rules=[{
                "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
                "verbs": ["get", "update", "patch"]}], opts=in_ns)
            k8s.rbac.v1.RoleBinding(
                f"{name}-routes", metadata={**meta, "name": f"{name}-routes"},
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.metadata.name},
                subjects=[{"kind": "ServiceAccount", "name": writer, "namespace": writer_ns}], opts=in_ns)

        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deploy",
            metadata=meta,
            spec={
                "replicas": args.replicas,
                # One node per replica (required anti-affinity), so a rollout frees a node before filling it.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels, "annotations": self._template_annotations(args)},
                    "spec": self._pod_spec(args, labels, self.config_map.metadata.name),
                },
            },
            opts=in_ns,
        )
        self.disruption_budget = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb", metadata=meta, spec={"maxUnavailable": 1, "selector": {"matchLabels": labels}},
            opts=in_ns)
        self.service = k8s.core.v1.Service(
            f"{name}-lb",
            metadata={**meta, "annotations": dict(args.service_annotations)},
            spec={
                "type": "LoadBalancer",
                "selector": labels,
                # The load balancer must pass TCP as is: the PROXY header comes from the node-side proxies,
                # so the load balancer's own proxy protocol stays off.
                "ports": [{"name": "kube-api", "port": args.port, "targetPort": "kube-api", "protocol": "TCP"}],
            },
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[self.deployment])),
        )
        self.address = self.service.status.apply(_lb_address)
        self.endpoint = self.address.apply(lambda host: f"{host}:{args.port}" if host else None)
        self.register_outputs({"namespace": args.namespace, "address": self.address, "endpoint": self.endpoint,
                               "configHash": args.config_hash})

    @staticmethod
    def _template_annotations(args: CentralProxyArgs) -> dict[str, str]:
        # Without a reloader the only way a pod sees a new config is a new pod: roll on every change.
        # With one, the ConfigMap volume updates in place and the reloader applies it hitlessly.
        return {} if args.reloader_image else {"hubwright.io/config-hash": args.config_hash}

    @staticmethod
    def _pod_spec(args: CentralProxyArgs, labels: Mapping[str, str], config_map: pulumi.Input[str]) -> dict[str, Any]:
        mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}, {"name": "run", "mountPath": RUN_DIR}]
        locked_down = hardened_container()
        health = {"httpGet": {"path": "/healthz", "port": "healthz"}}
        containers = [{
            "name": "haproxy",
            "image": args.image,
            # Master-worker: a reload starts a new worker on the same sockets while the old one drains.
            # The master socket sits in the pod's own emptyDir; mode 666 lets the reloader (any uid) use it.
            "command": ["haproxy", "-W", "-db", "-S", f"{MASTER_SOCKET},mode,666", "-f", f"{CONFIG_DIR}/{CONFIG_FILE}"],
            "ports": [{"name": "kube-api", "containerPort": args.port, "protocol": "TCP"},
                      {"name": "healthz", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
            "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 2},
            "livenessProbe": {**health, "initialDelaySeconds": 10, "periodSeconds": 10, "failureThreshold": 6},
            # Leave the load balancer's target set before the process stops.
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "10"]}}},
            "resources": dict(args.resources),
            "securityContext": locked_down,
            "volumeMounts": mounts,
        }]
        if args.reloader_image:
            containers.append({
                "name": "reloader",
                "image": args.reloader_image,
                "command": ["python", "-m", "automation.adapters.files.haproxy", "--source", CONFIG_DIR,
                            "--master-socket", MASTER_SOCKET],
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": locked_down,
                "volumeMounts": mounts,
            })
        term = lambda key: {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": key}  # noqa: E731
        return {
            "affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term("kubernetes.io/hostname")],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": term("topology.kubernetes.io/zone")}],
            }},
            "terminationGracePeriodSeconds": 30,
            "automountServiceAccountToken": False,
            "containers": containers,
            "volumes": [{"name": "config", "configMap": {"name": config_map}}, {"name": "run", "emptyDir": {}}],
        }
