"""The Kubernetes calls of the sources controller (automation/service/sources.py): the HubClusters it keeps for
other projects' cluster objects, and its finalizer on those objects. Every call has a timeout.

- A derived HubCluster is created with an ownerReference to its source (controller: true), so the garbage
  collector deletes it with the source too; updated by a merge patch that nulls what the source no longer says;
  deleted with a uid precondition (never a later object of the same name).
- The finalizer `hubwright.io/source` on the source object is added and removed by merge patches that carry the
  resourceVersion, so a concurrent edit (CAPA's own finalizers) is never lost: a conflict is retried by the queue.
- The condition `hubwright.io/SourceHeld` (stacks.sources.held) is written the same way, on the status subresource:
  the whole list with the resourceVersion it was read at (Hive's list is atomic: an apply would claim all of it).
"""
from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automation.adapters.kube.informer import Raw, Source
from stacks.names import CLUSTERS, GROUP, SOURCE_FINALIZER, VERSION
from stacks.sources.kinds import SourceKind
from stacks.sources.watched import FAMILIES, watched_version

TIMEOUT = (5, 30)  # (connect, read) seconds of every call here


def selected(api_client: client.ApiClient, option: str
             ) -> tuple[list[SourceKind], list[SourceKind], list[SourceKind]]:
    """(the sources, the infrastructure kinds, the source kinds not watched: their CRDs not served) `--sources` asks
    for: 'auto' those the API server serves."""
    option = option.strip()
    if option == "none":
        return [], [], []
    names = list(FAMILIES) if option == "auto" else [n.strip() for n in option.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"--sources: unknown {', '.join(unknown)} (known: auto, none, {', '.join(FAMILIES)})")
    wanted = [FAMILIES[n] for n in names]
    unwatched: list[SourceKind] = []
    if option == "auto":
        here = set(served(api_client, [k for s, r in wanted for k in (s, *r)]))
        unwatched = [s for s, _ in wanted if s not in here]
        wanted = [(s, tuple(k for k in r if k in here)) for s, r in wanted if s in here]
    return [s for s, _ in wanted], [k for _, r in wanted for k in r], unwatched


def not_served(kind: SourceKind) -> str:
    return (f"{kind.plural}.{kind.group}/{watched_version(kind)} was not served when the service started (its CRD "
            "was not installed): installed since, it is watched after a restart")


def source_of(api_client: client.ApiClient, kind: SourceKind, namespace: str | None = None) -> Source:
    """List (and watch) `kind` in every namespace, or in one."""
    custom = client.CustomObjectsApi(api_client)
    version = watched_version(kind)
    if namespace:
        return Source(kind.qualified, custom.list_namespaced_custom_object, (kind.group, version, namespace,
                                                                               kind.plural))
    return Source(kind.qualified, custom.list_cluster_custom_object, (kind.group, version, kind.plural))


def served(api_client: client.ApiClient, kinds: list[SourceKind]) -> list[SourceKind]:
    """The kinds the API server serves now (their CRDs installed): a hub without Hive watches no Hive."""
    apis = client.ApisApi(api_client)
    try:
        groups = {(g.name, v.version) for g in apis.get_api_versions(_request_timeout=TIMEOUT).groups or []
                  for v in g.versions or []}
    except ApiException:
        return []
    out = []
    for kind in kinds:
        if (kind.group, watched_version(kind)) not in groups:
            continue
        resources = client.CustomObjectsApi(api_client).get_api_resources(kind.group, watched_version(kind),
                                                                          _request_timeout=TIMEOUT)
        if any(r.name == kind.plural for r in (resources.resources or [])):
            out.append(kind)
    return out


class SourceClient:
    """HubClusters derived from sources, and the finalizer on the sources."""

    def __init__(self, api_client: client.ApiClient):
        self._api = client.CustomObjectsApi(api_client)

    # -- HubClusters
    def create_cluster(self, doc: Raw) -> bool:
        """Create the derived HubCluster; False when one of that name exists already (the cache will show it)."""
        meta = doc["metadata"]
        try:
            self._api.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], CLUSTERS, doc,
                                                      _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def patch_cluster(self, current: Raw, patch: Raw) -> bool:
        """A JSON merge patch (stacks.sources.outcome.Derived.merge_patch) on the HubCluster; False when it is gone."""
        meta = current["metadata"]
        return self._patch(GROUP, VERSION, CLUSTERS, meta, patch)

    def _patch(self, group: str, version: str, plural: str, meta: Raw, body: Raw) -> bool:
        """A merge patch of one namespaced object; False when it is gone (404)."""
        try:
            self._api.patch_namespaced_custom_object(group, version, meta["namespace"], plural, meta["name"], body,
                                                     _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_cluster(self, current: Raw) -> None:
        meta = current["metadata"]
        try:
            self._api.delete_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], CLUSTERS, meta["name"],
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta.get("uid"))),
                _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or another object of the name now: not ours to delete
                raise

    # -- the finalizer on the source
    def set_finalizer(self, kind: SourceKind, raw: Raw, present: bool) -> bool:
        """Add or remove SOURCE_FINALIZER on the source object, written with the resourceVersion it was read at (a
        409 is raised: the queue retries against the next cached copy); False when it is gone."""
        meta = raw["metadata"]
        names = list(meta.get("finalizers") or [])
        if (SOURCE_FINALIZER in names) == present:
            return True
        wanted = [*names, SOURCE_FINALIZER] if present else [n for n in names if n != SOURCE_FINALIZER]
        return self._patch(kind.group, watched_version(kind), kind.plural, meta,
                           {"metadata": {"finalizers": wanted or None, "resourceVersion": meta.get("resourceVersion")}})

    def set_conditions(self, kind: SourceKind, raw: Raw, conditions: list[Raw]) -> Raw | None:
        """Write the source's status.conditions whole, with the resourceVersion it was read at (a 409 is raised: the
        queue retries against the next cached copy); the object as written, None when it is gone."""
        meta = raw["metadata"]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": conditions}}
        try:
            written: Raw = self._api.patch_namespaced_custom_object_status(
                kind.group, watched_version(kind), meta["namespace"], kind.plural, meta["name"], body,
                _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return written
