"""HubStackRuns and their inputs Secrets on the API server: the one place that reads and writes them, for the
service's runner executor (automation/service/executor.py) and for the runners (automation/runner/), through the
object port (automation.adapters.kube.objects.Objects: KubeObjects in production, doubles.objects.FakeObjects in
direct tests).

- the service creates a run's Secret (in its own namespace) first, then the run; deletes both (--keep-runs);
- a runner takes a run with a status write that carries the run's resourceVersion (`Held.update`): one runner
  wins, the others get 409 Conflict; every later write of that runner (renewal, progress, the result) carries the
  version its previous write returned, so a runner that lost the run to a takeover cannot write over the new
  holder (`Held.update` returns False: the run is no longer its). A runner's writes are merge patches of the
  status subresource (what changed, at that version); the service's one status write (a run nobody took by its
  deadline: `StackRunClient.replace_status`) replaces the status, the one verb its role has on it.
Every call has a timeout (automation.adapters.kube.objects.TIMEOUT).
"""
from __future__ import annotations

import base64
import threading
from typing import Any, Callable, Mapping, Union

from kubernetes import client

from automation.adapters.kube.informer import Source, object_key
from automation.adapters.kube.objects import HUBSTACKRUNS, SECRETS, Conflict, Kind, KubeObjects, Objects
from stacks.conditions import changes_patch
from stacks.names import GROUP, RUN_SECRET_LABEL, STACKRUNS, VERSION
from stacks.runs.model import RESULT_KEY, StackRunStatus, status_of

Raw = dict[str, Any]


# What the runner and the executor are built on: an ApiClient (production: KubeObjects over it, and an informer
# of the runs) or an object port (direct tests: FakeObjects, whose changes the test hands to the store itself).
Api = Union[client.ApiClient, Objects]


def objects_of(api: Api) -> Objects:
    """The object port `api` is, or the one over it (an ApiClient)."""
    return KubeObjects(api) if isinstance(api, client.ApiClient) else api


def stackrun_source(api_client: client.ApiClient, namespace: str | None = None) -> Source:
    """Every HubStackRun (or one namespace's): what the executor and the runners watch."""
    custom = client.CustomObjectsApi(api_client)
    if namespace:
        return Source(STACKRUNS, custom.list_namespaced_custom_object, (GROUP, VERSION, namespace, STACKRUNS))
    return Source(STACKRUNS, custom.list_cluster_custom_object, (GROUP, VERSION, STACKRUNS))


def stackrun_source_of(api: Api) -> Source | None:
    """The runs' informer source over an ApiClient; None over an object port (its changes come from the test)."""
    return stackrun_source(api) if isinstance(api, client.ApiClient) else None


class StackRunClient:
    def __init__(self, api: Api, service_namespace: str):
        self.objects = objects_of(api)
        self.service_namespace = service_namespace

    # ----------------------------------------------------------------- the service
    def create(self, run: Raw, secret: Raw) -> Raw:
        """The Secret, then the run (a run never exists without its Secret); the Secret goes if the run fails."""
        self.objects.create(SECRETS, secret, self.service_namespace)
        meta = run["metadata"]
        try:
            return self.objects.create(HUBSTACKRUNS, run, meta["namespace"])
        except Exception:
            self.delete_secret(secret["metadata"]["name"])
            raise

    def delete(self, key: str, secret_name: str | None) -> None:
        """The run, then its Secret; either already gone is fine."""
        namespace, _, name = key.partition("/")
        self.objects.delete(HUBSTACKRUNS, name, namespace)
        if secret_name:
            self.delete_secret(secret_name)

    def delete_secret(self, name: str) -> None:
        self.objects.delete(SECRETS, name, self.service_namespace)

    def orphan_secrets(self, live: set[str]) -> list[str]:
        """Run Secrets whose run is gone (the service died between deleting the two): names not in `live`."""
        found = self.objects.list(SECRETS, self.service_namespace, label_selector=RUN_SECRET_LABEL)
        names = [str((item.get("metadata") or {}).get("name")) for item in found.get("items") or []]
        return [name for name in names if name not in live]

    def replace_status(self, raw: Raw, status: StackRunStatus) -> Raw | None:
        """Write `status` over the run at raw's resourceVersion; None on a conflict (someone wrote first) or 404."""
        meta = raw["metadata"]
        document = status.model_dump(by_alias=True, exclude_none=True)
        try:
            return self.objects.replace_status(HUBSTACKRUNS, {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"),
                                                              "metadata": meta, "spec": raw.get("spec"),
                                                              "status": document})
        except Conflict:
            return None

    def get(self, key: str) -> Raw | None:
        namespace, _, name = key.partition("/")
        return self.objects.get(HUBSTACKRUNS, name, namespace)

    # ----------------------------------------------------------------- runners
    def secret(self, name: str) -> dict[str, Any] | None:
        """A run's Secret as stacks.runs.checks reads it: {"annotations", "labels", "data": {key: text}}."""
        found = self.objects.get(SECRETS, name, self.service_namespace)
        if found is None:
            return None
        meta = found.get("metadata") or {}
        data = {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}
        return {"annotations": dict(meta.get("annotations") or {}), "labels": dict(meta.get("labels") or {}),
                "data": data}

    def write_result(self, secret_name: str, payload: str) -> None:
        """The run's outputs and drifted resources, into its Secret (tenants read the run, never the Secret)."""
        body = {"data": {RESULT_KEY: base64.b64encode(payload.encode()).decode()}}
        self.objects.patch(SECRETS, secret_name, body, self.service_namespace)

    def update_status(self, raw: Raw, status: StackRunStatus) -> Raw | None:
        """A runner's write: the merge patch from raw's status to `status`, at raw's resourceVersion; None on a
        conflict (someone wrote since) or 404."""
        meta = raw["metadata"]
        patch = changes_patch(raw.get("status") or {}, status.model_dump(by_alias=True, exclude_none=True))
        try:
            return self.objects.patch_status(HUBSTACKRUNS, meta["name"], patch, meta["namespace"],
                                             resource_version=meta.get("resourceVersion"))
        except Conflict:
            return None

    def hold(self, raw: Raw, holder: str) -> "Held":
        return Held(self, raw, holder)


class Held:
    """One run as one runner writes it: every write carries the resourceVersion of the last one (module docstring).
    Thread-safe: the renewal, the progress reports and the result share it."""

    def __init__(self, runs: StackRunClient, raw: Raw, holder: str):
        self._runs, self.raw, self.holder = runs, raw, holder
        self._lock = threading.Lock()
        self.lost = False

    @property
    def key(self) -> str:
        return object_key(self.raw)

    @property
    def status(self) -> StackRunStatus:
        return status_of(self.raw)

    def update(self, change: Callable[[StackRunStatus], StackRunStatus]) -> bool:
        """Write change(status) at the last version this runner wrote; False (and `lost`) when someone else wrote
        since: the run was taken over, or deleted. The claim itself is the first such write."""
        with self._lock:
            if self.lost:
                return False
            written = self._runs.update_status(self.raw, change(self.status))
            if written is None:
                self.lost = True
                return False
            self.raw = written
            return True
