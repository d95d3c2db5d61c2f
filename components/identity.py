"""A workload's own identity in the hub: its ServiceAccount, and a ClusterRole of exactly its rules bound to it
(the registry API's and the console's; the names are the component's)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s


def own_identity(name: str, namespace: str, labels: Mapping[str, str], rules: Sequence[Mapping[str, Any]],
                 opts: pulumi.ResourceOptions) -> k8s.core.v1.ServiceAccount:
    """The ServiceAccount `name` in `namespace`, and the ClusterRole `name` (`rules`) bound to it."""
    account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata={"name": name, "namespace": namespace,
                                                                 "labels": dict(labels)}, opts=opts)
    role = k8s.rbac.v1.ClusterRole(f"{name}-cr", metadata={"name": name, "labels": dict(labels)},
                                   rules=[dict(rule) for rule in rules], opts=opts)
    k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-crb", metadata={"name": name, "labels": dict(labels)},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.metadata.name},
        subjects=[{"kind": "ServiceAccount", "name": name, "namespace": namespace}], opts=opts)
    return account
