"""Where a long-running command finds Kubernetes: a kubeconfig file and context, else the pod's ServiceAccount.

Shared by `python -m automation serve` and `python -m automation api`, which are independent siblings and may
not import each other.
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
