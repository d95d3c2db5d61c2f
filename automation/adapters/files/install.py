"""The install as plain manifests: components/install.py run under Pulumi's mock runtime, every object it
registers written as YAML with a kustomization.yaml that lists them (`kubectl apply -k DIR`, a kustomize
overlay's base, an Argo CD Application's path).

What `pulumi up` of deploy/ sends is what is written here: the same components, the same values, the objects'
inputs as registered (the CRDs and admission policies from their ConfigGroups). Nothing Pulumi-internal is left:
the mock runtime never calls the Kubernetes provider, which is what adds `app.kubernetes.io/managed-by: pulumi`
and auto-names; every object of ours is named explicitly.

Output is deterministic: one file per object, `<kind>-<name>.yaml` (lower case), keys sorted; the kustomization
lists them sorted; a file this command wrote earlier that is no longer rendered is removed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import yaml

from automation.adapters.engine import StackPlan, record
from automation.adapters.files.tree import write_tree
from components.controlplane import service_labels
from components.install import SERVICE, install
from stacks import monitoring
from stacks.deployment import InstallValues

PROJECT = "hubwright-deploy"  # deploy/Pulumi.yaml's name: the URNs are those of `pulumi up` there
KUSTOMIZATION = "kustomization.yaml"
HEADER = "# Rendered by `python -m automation install --render`; change the values, not this file (docs/install.md).\n"
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def plan(values: InstallValues) -> StackPlan:
    """Every registration of the install under the mock runtime (one Kubernetes provider, as deploy/ has)."""
    def program() -> None:
        install(values, k8s.Provider("k8s", kubeconfig="{}"))
    return record(program, stack="render", project=PROJECT)


def objects_of(plan_: StackPlan) -> list[dict[str, Any]]:
    """Every Kubernetes object of a plan, the ConfigGroups' (CRDs, admission policies) included."""
    out: list[dict[str, Any]] = []
    for res in plan_.resources:
        if res.type == "kubernetes:yaml/v2:ConfigGroup":
            out.extend(res.inputs["objs"])
        elif res.type.startswith("kubernetes:") and "apiVersion" in res.inputs:
            out.append(res.inputs)
    return out


def extra_manifests(values: InstallValues) -> list[dict[str, Any]]:
    """Manifests rendered with the install beyond the components': the one place to add them (monitoring's
    ServiceMonitor, PrometheusRule and dashboard ConfigMap). Namespaced ones without a namespace get the install's."""
    if not values.monitoring.enabled:
        return []
    return monitoring.manifests(values.namespace, service_name=f"{SERVICE}-metrics", metrics_port_name="metrics",
                                selector=service_labels(SERVICE), labels=values.monitoring.labels or None)


def render(values: InstallValues) -> list[dict[str, Any]]:
    """The install's objects, sorted by (kind, namespace, name), each namespaced one in its namespace."""
    objs = [*objects_of(plan(values)), *extra_manifests(values)]
    for obj in objs:
        if obj["kind"] not in CLUSTER_SCOPED:
            obj.setdefault("metadata", {}).setdefault("namespace", values.namespace)
    return sorted(objs, key=lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def file_name(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}-{obj['metadata']['name']}.yaml".lower()


def write(out: Path, objs: list[dict[str, Any]]) -> list[Path]:
    """The objects' files and the kustomization.yaml under `out`; files of an earlier render that are no longer
    rendered are removed (only ours: they start with HEADER). Returns the paths written."""
    files: dict[str, str] = {}
    for obj in objs:
        name = file_name(obj)
        if name in files:
            raise ValueError(f"two objects would be written to {name}")  # a kind and name are unique per install
        files[name] = HEADER + yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)
    files[KUSTOMIZATION] = HEADER + yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": sorted(n for n in files if n != KUSTOMIZATION)}, sort_keys=False)
    return write_tree(out, files, ours=lambda path: path.parent == out and path.suffix == ".yaml"
                      and path.read_text(errors="replace").startswith(HEADER))
