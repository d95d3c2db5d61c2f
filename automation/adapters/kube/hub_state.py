"""`plan --hub-state kube`: the hub's HubClusters, listed once through the kubeconfig ($KUBECONFIG or
~/.kube/config, as kubectl finds it), read-only. The plan loads this module only for that option (by name,
automation/cli/plan.py), so a plan without it never loads the Kubernetes client."""
from __future__ import annotations

from typing import Any

from kubernetes import client

from automation.adapters.kube.calls import API_ERRORS, error_text
from automation.adapters.kube.kubeconfig import kube_client
from stacks.errors import InvalidSpec
from stacks.names import CLUSTERS, GROUP, VERSION

TIMEOUT = (5, 60)  # (connect, read) seconds of the one list


def listed_clusters(where: str) -> list[dict[str, Any]]:
    """Every HubCluster of the hub; InvalidSpec naming `where` when the hub cannot be read."""
    api = kube_client()
    try:
        listed = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, CLUSTERS,
                                                                         _request_timeout=TIMEOUT)
    except API_ERRORS as exc:
        raise InvalidSpec.one(where, "", f"could not list the hub's HubClusters: {error_text(exc)}") \
            from None
    finally:
        api.close()
    return list(listed.get("items") or [])
