"""Writing a HubCluster's status.network: what discovery found (automation/service/discovery.py).

status.network is the discovery's own field: the cluster reconciler's patches never carry or null it
(stacks.status.OTHER_WRITERS_STATUS_FIELDS), and this writer touches nothing else. The patch is a JSON merge
patch on the status subresource that nulls what the new network drops (a load balancer gone, say).
"""
from __future__ import annotations

from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automation.adapters.kube.status import EventRecorder, status_patch
from stacks.names import CLUSTERS, GROUP, NETWORK_STATUS_KEY, VERSION

TIMEOUT = (5, 30)  # (connect, read) seconds of every call here


class NetworkStatus:
    """status.network of HubClusters, and Events about their discovery."""

    def __init__(self, api_client: client.ApiClient, events: EventRecorder):
        self._api = client.CustomObjectsApi(api_client)
        self._events = events

    def write(self, raw: dict[str, Any], network: dict[str, Any]) -> bool:
        """Patch status.network to `network`; False when the HubCluster is gone."""
        meta = raw["metadata"]
        before = (raw.get("status") or {}).get(NETWORK_STATUS_KEY)
        patch = status_patch(network, before) if isinstance(before, dict) else network
        try:
            self._api.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], CLUSTERS, meta["name"],
                {"status": {NETWORK_STATUS_KEY: patch}}, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def event(self, raw: dict[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self._events.event(raw, type_, reason, message)
