"""`pulumi up` here installs the CRDs and runs the service (see components/controlplane.py)."""
import os
import sys

import pulumi
import pulumi_kubernetes as k8s

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from components.controlplane import ControlPlane, ControlPlaneArgs  # noqa: E402
from stacks.crds import crd_manifests  # noqa: E402

config = pulumi.Config()
provider = k8s.Provider("k8s", kubeconfig=config.get("kubeconfig") or None)
plane = ControlPlane(
    "clusternet",
    ControlPlaneArgs(
        image=config.require("image"),
        crds=crd_manifests(),
        namespace=config.get("namespace") or "clusternet-system",
        backend_url=config.get("backend") or None,
    ),
    provider,
)
pulumi.export("namespace", plane.namespace.metadata.name)
