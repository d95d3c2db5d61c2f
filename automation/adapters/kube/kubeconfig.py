"""Where a long-running command finds Kubernetes: a kubeconfig file and context, else the pod's ServiceAccount.

Used by the registry API (`python -m automation api`, automation/api/serve.py). The service
(`python -m automation serve`) still builds its client the same way in a copy of its own,
automation/service/serve.py's kube_client(options).
"""
from __future__ import annotations

import os

from kubernetes import client, config


def kube_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from `kubeconfig`/`context`, the in-cluster ServiceAccount (in a pod), or ~/.kube/config."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return client.ApiClient(configuration)
