"""`pulumi up` here installs the CRDs and runs the service (components/controlplane.py) and the registry API
(components/registry.py), and, when the HubConfig asks for it, the shared ingress's central proxy
(components/ingress.py) whose routes the service then keeps current."""
import os
import sys

import pulumi
import pulumi_kubernetes as k8s

# Pulumi runs this program from deploy/; the repository root, which holds stacks/, components/ and
# automation/, is the import root of every other door too (tests, the CLI, the image's /app).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from automation.adapters.files import load_hub  # noqa: E402
from components.controlplane import ControlPlane, ControlPlaneArgs  # noqa: E402
from components.ingress import CentralProxy, CentralProxyArgs  # noqa: E402
from components.registry import RegistryApi, RegistryApiArgs  # noqa: E402
from stacks.install import API_RULES  # noqa: E402
from stacks.crds import crd_manifests  # noqa: E402
from stacks.names import SHARED_INGRESS_CONFIGMAP  # noqa: E402

config = pulumi.Config()
image = config.require("image")
namespace = config.get("namespace") or "hubwright-system"
provider = k8s.Provider("k8s", kubeconfig=config.get("kubeconfig") or None)

plane = ControlPlane(
    "hubwright",
    ControlPlaneArgs(image=image, crds=crd_manifests(), namespace=namespace, backend_url=config.get("backend") or None,
                     metrics_port=config.get_int("metricsPort") or 8080,
                     policy=config.get("policy") or "mandatory"),
    provider,
)
pulumi.export("namespace", namespace)

# The registry API (docs/registry.md): its own Deployment; `registry: false` leaves it out.
if config.get_bool("registry") is not False:
    registry = RegistryApi(
        "hubwright-registry",
        RegistryApiArgs(image=image, rules=API_RULES, namespace=namespace,
                        public_url=config.get("registryPublicUrl") or None,
                        facts_db_secret=config.get("registryFactsDbSecret") or None),
        provider,
        opts=pulumi.ResourceOptions(depends_on=[plane]),
    )
    pulumi.export("registryService", registry.service.metadata.name)

hub_file = config.get("hub")  # the HubConfig YAML this deployment serves (also applied to the cluster)
hubs = [load_hub(hub_file)] if hub_file else []
if hubs and hubs[0].spec.shared_ingress is not None:
    proxy = CentralProxy(
        SHARED_INGRESS_CONFIGMAP,
        CentralProxyArgs.from_hub(hubs[0].spec.shared_ingress, [], reloader_image=image, routes_from_service=True,
                                  route_writer=(namespace, "hubwright")),
        provider,
    )
    pulumi.export("sharedIngressEndpoint", proxy.endpoint)  # → HubConfig spec.sharedIngress.address
