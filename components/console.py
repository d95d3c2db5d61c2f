"""The web console inside the hub cluster: its own Deployment beside the service, only with console.enabled.

    Console (hubwright:deploy:Console)
    ├── ServiceAccount, ClusterRole(+Binding)  exactly the console's own rights (stacks.install.CONSOLE_RULES):
    │   Role(+Binding)                         and, in its namespace, the role map (CONSOLE_NAMESPACE_RULES):
    │                                          sign-in (TokenReviews), what a viewer may do (SubjectAccessReviews)
    │                                          and the reads of its cache; no Secrets, no writes, no impersonation
    ├── Deployment                             `python -m automation console`, one replica, probes on /healthz;
    │                                          read-only root filesystem: writable is only /tmp
    └── Service                                port 80 → the console (put an Ingress or a load balancer in front)

Whatever a viewer changes, the console changes with the viewer's own token, so Kubernetes RBAC decides.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.identity import own_identity
from components.pods import hardened_container
from stacks.deployment import InstallValues, history_args
from stacks.install import CONSOLE_NAMESPACE_RULES


@dataclass(frozen=True)
class ConsoleArgs:
    image: str
    rules: Sequence[Mapping[str, Any]]  # the console ServiceAccount's ClusterRole (stacks.install.CONSOLE_RULES)
    namespace: str = "hubwright-system"
    # Cookies marked Secure (--secure-cookies): the pod serves plain HTTP, so only when a proxy in front speaks HTTPS.
    secure_cookies: bool = False
    tmp_size: str = "1Gi"  # emptyDir sizeLimit
    # The stacks' backend, whose store holds the run history the console shows: None (the file backend, on the
    # service's own volume) means no history here; its AWS keys (not its passphrase) come from the backend Secret
    # when it holds them (stacks.deployment.history_args, as the registry API's).
    backend_url: str | None = None
    backend_secret: str | None = None
    port: int = 8082
    console_args: Sequence[str] = ()  # extra `python -m automation console` flags
    resources: Mapping[str, Any] = field(
        default_factory=lambda: {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}})

    @classmethod
    def from_values(cls, values: InstallValues, rules: Sequence[Mapping[str, Any]]) -> "ConsoleArgs":
        """The install's values (both doors: automation.cli.install and deploy/)."""
        console = values.console
        return cls(image=values.image, rules=rules, namespace=values.namespace,
                   secure_cookies=console.secure_cookies, tmp_size=values.volumes.tmp,
                   resources=console.resources.model_dump(), backend_url=values.backend.url,
                   backend_secret=values.backend.secret.name)


class Console(pulumi.ComponentResource):
    def __init__(self, name: str, args: ConsoleArgs, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("hubwright:deploy:Console", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        ns = args.namespace
        labels = {"app.kubernetes.io/name": "hubwright-console", "app.kubernetes.io/instance": name}
        meta = {"name": name, "namespace": ns, "labels": labels}

        account = own_identity(name, ns, labels, args.rules, child)

        local = k8s.rbac.v1.Role(f"{name}-role", metadata=meta,
                                 rules=[dict(rule) for rule in CONSOLE_NAMESPACE_RULES], opts=child)
        k8s.rbac.v1.RoleBinding(
            f"{name}-rb", metadata=meta,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": local.metadata.name},
            subjects=[{"kind": "ServiceAccount", "name": name, "namespace": ns}], opts=child)

        env: list[dict[str, Any]] = []
        history = history_args(args.backend_url, args.backend_secret, env)
        probe = lambda path: {"httpGet": {"path": path, "port": "http"}, "periodSeconds": 10}  # noqa: E731
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deploy",
            metadata=meta,
            spec={
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": account.metadata.name,
                        "automountServiceAccountToken": True,  # its own rights: reviews and its cache's reads
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{
                            "name": "console",
                            "image": args.image,
                            "args": ["python", "-m", "automation", "console",
                                     "--console-bind", f"0.0.0.0:{args.port}", "--namespace", ns, *history,
                                     *(["--secure-cookies"] if args.secure_cookies else []), *args.console_args],
                            "env": env,
                            "ports": [{"name": "http", "containerPort": args.port}],
                            "livenessProbe": probe("/healthz"),
                            "readinessProbe": probe("/healthz"),
                            "resources": dict(args.resources),
                            "securityContext": hardened_container(),
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": args.tmp_size}}],
                    },
                },
            },
            opts=child,
        )
        self.service = k8s.core.v1.Service(
            f"{name}-svc", metadata=meta,
            spec={"type": "ClusterIP", "selector": labels,
                  "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
            opts=child)
        self.register_outputs({"deployment": self.deployment.metadata.name, "service": self.service.metadata.name})
