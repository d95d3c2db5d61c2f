"""HubStackRuns and their inputs Secrets on the API server: the one place that reads and writes them, for the
service's runner executor (automation/service/executor.py) and for the runners (automation/runner/).

- the service creates a run's Secret (in its own namespace) first, then the run; deletes both (--keep-runs);
- a runner takes a run with an update of its status that carries the run's resourceVersion (`Held.claim`): one
  runner wins, the others get 409 Conflict; every later write of that runner (renewal, progress, the result)
  carries the version its previous write returned, so a runner that lost the run to a takeover cannot write
  over the new holder (`Held.update` returns False: the run is no longer its).
Every call has a timeout (TIMEOUT).
"""
from __future__ import annotations

import base64
import threading
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automation.adapters.kube.informer import Source
from stacks.names import GROUP, RUN_SECRET_LABEL, STACKRUNS, VERSION
from stacks.runs.model import RESULT_KEY, StackRunStatus, status_of

TIMEOUT = (5, 30)  # (connect, read) seconds of every call here
Raw = dict[str, Any]


def stackrun_source(api_client: client.ApiClient, namespace: str | None = None) -> Source:
    """Every HubStackRun (or one namespace's): what the executor and the runners watch."""
    custom = client.CustomObjectsApi(api_client)
    if namespace:
        return Source(STACKRUNS, custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, STACKRUNS))
    return Source(STACKRUNS, custom.list_cluster_custom_object, (GROUP, VERSION, STACKRUNS))


def key_of(raw: Raw) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class StackRunClient:
    def __init__(self, api_client: client.ApiClient, service_namespace: str):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.service_namespace = service_namespace

    # ----------------------------------------------------------------- the service
    def create(self, run: Raw, secret: Raw) -> Raw:
        """The Secret, then the run (a run never exists without its Secret); the Secret goes if the run fails."""
        self.core.create_namespaced_secret(self.service_namespace, secret, _request_timeout=TIMEOUT)
        meta = run["metadata"]
        try:
            return self.custom.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], STACKRUNS, run,
                                                               _request_timeout=TIMEOUT)
        except Exception:
            self.delete_secret(secret["metadata"]["name"])
            raise

    def delete(self, key: str, secret_name: str | None) -> None:
        """The run, then its Secret; either already gone is fine."""
        namespace, _, name = key.partition("/")
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, STACKRUNS, name,
                                                        _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise
        if secret_name:
            self.delete_secret(secret_name)

    def delete_secret(self, name: str) -> None:
        try:
            self.core.delete_namespaced_secret(name, self.service_namespace, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def orphan_secrets(self, live: set[str]) -> list[str]:
        """Run Secrets whose run is gone (the service died between deleting the two): names not in `live`."""
        found = self.core.list_namespaced_secret(self.service_namespace, label_selector=RUN_SECRET_LABEL,
                                                 _request_timeout=TIMEOUT)
        return [s.metadata.name for s in found.items if s.metadata.name not in live]

    def replace_status(self, raw: Raw, status: StackRunStatus) -> Raw | None:
        """Write `status` over the run at raw's resourceVersion; None on a conflict (someone wrote first) or 404."""
        meta = raw["metadata"]
        body = {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"), "metadata": meta, "spec": raw.get("spec"),
                "status": status.model_dump(by_alias=True, exclude_none=True)}
        try:
            return self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], STACKRUNS, meta["name"], body, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise

    def get(self, key: str) -> Raw | None:
        namespace, _, name = key.partition("/")
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, STACKRUNS, name,
                                                            _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # ----------------------------------------------------------------- runners
    def secret(self, name: str) -> dict[str, Any] | None:
        """A run's Secret as stacks.runs.checks reads it: {"annotations", "labels", "data": {key: text}}."""
        try:
            found = self.core.read_namespaced_secret(name, self.service_namespace, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = {k: base64.b64decode(v).decode() for k, v in (found.data or {}).items()}
        return {"annotations": dict(found.metadata.annotations or {}), "labels": dict(found.metadata.labels or {}),
                "data": data}

    def write_result(self, secret_name: str, payload: str) -> None:
        """The run's outputs and drifted resources, into its Secret (tenants read the run, never the Secret)."""
        body = {"data": {RESULT_KEY: base64.b64encode(payload.encode()).decode()}}
        try:
            self.core.patch_namespaced_secret(secret_name, self.service_namespace, body, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def hold(self, raw: Raw, holder: str) -> "Held":
        return Held(self, raw, holder)


class Held:
    """One run as one runner writes it: every write carries the resourceVersion of the last one (module docstring).
    Thread-safe: the renewal thread, the progress reports and the result share it."""

    def __init__(self, runs: StackRunClient, raw: Raw, holder: str):
        self._runs, self.raw, self.holder = runs, raw, holder
        self._lock = threading.Lock()
        self.lost = False

    @property
    def key(self) -> str:
        return key_of(self.raw)

    @property
    def status(self) -> StackRunStatus:
        return status_of(self.raw)

    def update(self, change: Callable[[StackRunStatus], StackRunStatus]) -> bool:
        """Write change(status) at the last version this runner wrote; False (and `lost`) when someone else wrote
        since: the run was taken over, or deleted. The claim itself is the first such write (`claim`)."""
        with self._lock:
            if self.lost:
                return False
            written = self._runs.replace_status(self.raw, change(self.status))
            if written is None:
                self.lost = True
                return False
            self.raw = written
            return True
