"""Writing a HubCluster's status.network: what discovery found (automation/service/discovery.py).

status.network and status.networkError are the discovery's own fields: the cluster reconciler's patches never
carry or null them (stacks.status.OTHER_WRITERS_STATUS_FIELDS), and this writer touches nothing else. The patch is a JSON merge
patch on the status subresource that nulls what the new network drops (a load balancer gone, say).
"""
from __future__ import annotations

from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automation.adapters.kube.status import EventRecorder
from stacks.conditions import status_patch
from stacks.names import CLUSTERS, GROUP, NETWORK_ERROR_STATUS_KEY, NETWORK_STATUS_KEY, VERSION

TIMEOUT = (5, 30)  # (connect, read) seconds of every call here


class NetworkStatus:
    """status.network of HubClusters, and Events about their discovery."""

    def __init__(self, api_client: client.ApiClient, events: EventRecorder):
        self._api = client.CustomObjectsApi(api_client)
        self._events = events

    def write(self, raw: dict[str, Any], network: dict[str, Any]) -> bool:
        """Patch status.network to `network`, and remove status.networkError (the read succeeded); False when the
        HubCluster is gone."""
        status = raw.get("status") or {}
        before = status.get(NETWORK_STATUS_KEY)
        # networkError: null whatever the cached copy shows (it may not show this controller's last write yet).
        return self._patch(raw, {NETWORK_STATUS_KEY: status_patch(network, before) if isinstance(before, dict)
                                 else network, NETWORK_ERROR_STATUS_KEY: None})

    def write_error(self, raw: dict[str, Any], error: dict[str, Any]) -> bool:
        """Patch status.networkError to `error` (whole: a merge patch of a field it replaces); False when gone."""
        before = (raw.get("status") or {}).get(NETWORK_ERROR_STATUS_KEY)
        return self._patch(raw, {NETWORK_ERROR_STATUS_KEY: status_patch(error, before) if isinstance(before, dict)
                                 else error})

    def _patch(self, raw: dict[str, Any], status: dict[str, Any]) -> bool:
        meta = raw["metadata"]
        try:
            self._api.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], CLUSTERS, meta["name"], {"status": status},
                _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def event(self, raw: dict[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self._events.event(raw, type_, reason, message)
