"""Keep the central proxy's ConfigMap equal to what the Clusters ask for.

The service calls `IngressSync.sync(hub, routes)` with the routes of each new resolution
(stacks.resolve.resolve_all: exactly the clusters whose ingress, account and namespace checks
pass; the others carry the reason on their own Cluster's conditions); the
reloader sidecar in each central-proxy pod applies the new files hitlessly
(automation/adapters/files/haproxy.py). Unchanged routes write nothing; bursts of
changes collapse into whatever the ConfigMap holds when the reloader looks.
"""
from __future__ import annotations

import logging
from typing import Iterable

from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.haproxy import CONFIG_FILE, MAP_FILE, dropped_lines, published_routes, render_for_proxy
from stacks.ingress import Route
from stacks.model.hub import HubConfig
from stacks.names import SHARED_INGRESS_CONFIGMAP

LOG = logging.getLogger("hubwright.ingress")
TIMEOUT = (5, 30)  # (connect, read) seconds


def central_files(hub: HubConfig, routes: Iterable[Route]) -> tuple[dict[str, str], list[str]]:
    """haproxy.cfg and the map, rendered exactly as the CentralProxy component renders them, and a line
    for each route the renderer dropped (never written; the others are)."""
    assert hub.spec.shared_ingress is not None
    rendered = render_for_proxy(hub.spec.shared_ingress, routes)
    return {CONFIG_FILE: rendered.config, MAP_FILE: rendered.map}, dropped_lines(rendered.dropped)


class IngressSync:
    def __init__(self, api_client: client.ApiClient, *, name: str = SHARED_INGRESS_CONFIGMAP):
        self._core = client.CoreV1Api(api_client)
        self._name = name
        self._written: dict[str, str] | None = None
        self._rendered_from: tuple[object, object] | None = None  # the (hub, routes) objects last rendered

    def published(self, hub: HubConfig) -> dict[str, str]:
        """Cluster (namespace/name) -> the ID the ConfigMap routes to it now (stacks.haproxy.published_routes);
        empty when the hub has no shared ingress or the ConfigMap is not there."""
        if hub.spec.shared_ingress is None:
            return {}
        try:
            found = self._core.read_namespaced_config_map(self._name, hub.spec.shared_ingress.namespace,
                                                          _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return published_routes(found.data or {})

    def sync(self, hub: HubConfig | None, routes: Iterable[Route]) -> bool:
        """Write the ConfigMap when its content changes; True when it wrote. The very objects rendered last time
        (the resolver keeps its routes tuple until a route changes): nothing to render, so an event costs no
        render of every route."""
        if self._rendered_from is not None and self._rendered_from[0] is hub and self._rendered_from[1] is routes:
            return False
        if hub is None or hub.spec.shared_ingress is None:
            self._rendered_from = (hub, routes)
            return False
        files, dropped = central_files(hub, routes)
        for line in dropped:
            LOG.error("shared ingress: %s", line)
        if files == self._written:
            self._rendered_from = (hub, routes)
            return False
        namespace = hub.spec.shared_ingress.namespace
        try:
            current = self._core.read_namespaced_config_map(self._name, namespace).data or {}
        except ApiException as exc:
            if exc.status == 404:  # not deployed (yet): nothing to keep in sync
                LOG.info("shared ingress: ConfigMap %s/%s not found; is deploy/ up?", namespace, self._name)
                return False
            raise
        if current != files:
            self._core.patch_namespaced_config_map(self._name, namespace, {"data": files})
            LOG.info("shared ingress: %s/%s now routes %d clusters", namespace, self._name,
                     len([line for line in files[MAP_FILE].splitlines() if line and not line.startswith("#")]))
        self._written = files
        self._rendered_from = (hub, routes)  # the ConfigMap holds them: nothing to do until they change
        return current != files
