"""`pulumi up` here installs the CRDs and runs the service (components/controlplane.py) and the registry API
(components/registry.py), and, when the HubConfig asks for it, the shared ingress's central proxy
(components/ingress.py) whose routes the service then keeps current.

The install's values are the stack config object `hubwright-deploy:values`, the same keys and defaults as
`python -m automation install --render` (stacks/deployment.py, docs/install.md):

    pulumi config set --path 'values.serviceAccount.roleArn' arn:aws:iam::123456789012:role/hubwright
    pulumi config set --path 'values.backend.secret.data.PULUMI_CONFIG_PASSPHRASE' --secret '...'
"""
import os
import sys

import pulumi
import pulumi_kubernetes as k8s

# Pulumi runs this program from deploy/; the repository root, which holds stacks/, components/ and
# automation/, is the import root of every other door too (tests, the CLI, the image's /app).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from automation.adapters.files.inputs import load_hub  # noqa: E402
from components.ingress import CentralProxy, CentralProxyArgs  # noqa: E402
from components.install import SERVICE, install  # noqa: E402
from stacks.deployment import load_values  # noqa: E402
from stacks.names import SHARED_INGRESS_CONFIGMAP  # noqa: E402

config = pulumi.Config()
values = load_values(config.get_object("values"), source="stack config hubwright-deploy:values")
image, namespace = values.image, values.namespace
provider = k8s.Provider("k8s", kubeconfig=config.get("kubeconfig") or None)

installed = install(values, provider)  # the service, and the registry API unless values.registry.enabled is false
pulumi.export("namespace", namespace)
if installed.registry is not None:
    pulumi.export("registryService", installed.registry.service.metadata.name)
if installed.plane.runners is not None:  # service.executor runners: the Deployment an HPA or KEDA scales
    pulumi.export("runnerDeployment", installed.plane.runners.metadata.name)

hub_file = config.get("hub")  # the HubConfig YAML this deployment serves (also applied to the cluster)
hubs = [load_hub(hub_file)] if hub_file else []
if hubs and hubs[0].spec.shared_ingress is not None:
    proxy = CentralProxy(
        SHARED_INGRESS_CONFIGMAP,
        CentralProxyArgs.from_hub(hubs[0].spec.shared_ingress, [], reloader_image=image, routes_from_service=True,
                                  route_writer=(namespace, SERVICE)),
        provider,
    )
    pulumi.export("sharedIngressEndpoint", proxy.endpoint)  # → HubConfig spec.sharedIngress.address
