"""The install: what both doors build from the same values (stacks.deployment.InstallValues).

    install(values, provider)
    ├── ControlPlane "hubwright"          the CRDs, admission policies, RBAC, the service (components/controlplane.py)
    ├── RegistryApi "hubwright-registry"  the registry API, unless registry.enabled is false (components/registry.py)
    └── Console "hubwright-console"       the web console, only when console.enabled is true (components/console.py)

`pulumi up` of deploy/ calls it with a real provider; `python -m automation install --render DIR`
(automation.adapters.files.install) calls it under Pulumi's mock runtime and writes what it registers as plain manifests.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.console import Console, ConsoleArgs
from components.controlplane import ControlPlane, ControlPlaneArgs
from components.registry import RegistryApi, RegistryApiArgs
from stacks.crds import crd_manifests
from stacks.deployment import InstallValues
from stacks.install import API_RULES, CONSOLE_RULES
from stacks.names import SERVICE

REGISTRY = "hubwright-registry"  # the registry API's Deployment, ServiceAccount and Service
CONSOLE = "hubwright-console"  # the web console's Deployment, ServiceAccount, ClusterRole(+Binding) and Service


@dataclass
class Installed:
    plane: ControlPlane
    registry: RegistryApi | None
    console: Console | None = None


def install(values: InstallValues, provider: k8s.Provider) -> Installed:
    plane = ControlPlane(SERVICE, ControlPlaneArgs.from_values(values, crd_manifests()), provider)
    registry = None
    if values.registry.enabled:
        registry = RegistryApi(REGISTRY, RegistryApiArgs.from_values(values, API_RULES), provider,
                               opts=pulumi.ResourceOptions(depends_on=[plane]))
    console = None
    if values.console.enabled:
        console = Console(CONSOLE, ConsoleArgs.from_values(values, CONSOLE_RULES), provider,
                          opts=pulumi.ResourceOptions(depends_on=[plane]))
    return Installed(plane, registry, console)
