"""Helpers to drive the service against an API server (kmock's emulator or the envtest kube-apiserver)."""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.service import Service, ServiceOptions
from stacks.model import GROUP
from tests.factories import cluster_doc, hub_doc

VERSION = "v1alpha1"
SYSTEM_NAMESPACE = "clusternet-system"

# Fast enough for tests: short backoff, lock retry and watch renewals.
FAST = dict(metrics_port=0, metrics_bind="127.0.0.1", leader_election=False, workers=4, backoff_base=0.05,
            backoff_cap=0.5, lock_retry=0.1, watch_timeout=30, namespace=SYSTEM_NAMESPACE)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, *, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class ServiceEnv:
    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    # -- objects
    def namespace(self, name: str, annotations: dict[str, str] | None = None) -> None:
        body = {"metadata": {"name": name, "annotations": annotations or {}}}
        try:
            self.core.create_namespace(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespace(name, {"metadata": {"annotations": annotations or {}}})

    def hub(self, name: str = "default", **spec: Any) -> dict:
        doc = hub_doc(**spec)
        doc["metadata"]["name"] = name
        return self.custom.create_cluster_custom_object(GROUP, VERSION, "hubconfigs", doc)

    def patch_hub(self, patch: dict, name: str = "default") -> dict:
        return self.custom.patch_cluster_custom_object(GROUP, VERSION, "hubconfigs", name, patch)

    def create(self, name: str = "prod-1", namespace: str = "acme", **kw: Any) -> dict:
        doc = cluster_doc(name, namespace, **kw)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "clusters", doc)

    def patch(self, name: str, patch: dict, namespace: str = "acme") -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "clusters", name, patch)

    def patch_status(self, name: str, status: dict, namespace: str = "acme") -> dict:
        return self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "clusters", name,
                                                                 {"status": status})

    def delete(self, name: str, namespace: str = "acme") -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "clusters", name)

    def get(self, name: str, namespace: str = "acme") -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "clusters", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def role_map(self, data: dict[str, str], name: str = "clusternet-role-account-map") -> None:
        self.namespace(SYSTEM_NAMESPACE)
        body = {"metadata": {"name": name, "namespace": SYSTEM_NAMESPACE}, "data": data}
        try:
            self.core.create_namespaced_config_map(SYSTEM_NAMESPACE, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespaced_config_map(name, SYSTEM_NAMESPACE, {"data": data})

    def events(self, namespace: str = "acme", name: str | None = None) -> list[tuple[str, str, str]]:
        items = self.core.list_namespaced_event(namespace).items
        return [(e.type, e.reason, e.message) for e in items
                if name is None or e.involved_object.name == name]

    # -- reading status
    def condition(self, name: str, type_: str = "Ready", namespace: str = "acme") -> dict | None:
        obj = self.get(name, namespace) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)

    def ready(self, name: str, namespace: str = "acme") -> bool:
        cond = self.condition(name, "Ready", namespace)
        return bool(cond and cond["status"] == "True")

    def reason(self, name: str, namespace: str = "acme") -> str | None:
        cond = self.condition(name, "Ready", namespace)
        return cond["reason"] if cond else None

    # -- the service
    @contextlib.contextmanager
    def running(self, engine: Any, **options: Any) -> Iterator[Service]:
        guards = options.pop("guards", [])
        audit = options.pop("audit", None) or (lambda inputs, operation: None)
        service = Service(ServiceOptions(**{**FAST, **options}), api_client=self.api_client, engine=engine,
                          guards=guards, audit=audit)
        service.start()
        try:
            wait_until(lambda: service.ready()[0], 20, what="the service to sync")
            yield service
        finally:
            service.stop()
