"""What a controller sees of an object, and the one port it reaches the API server through.

    obj = Obj(raw)          a read-only view: key, name, namespace, uid, resource_version, generation, labels,
                            annotations, finalizers, owner_references, deleting, spec, status (never None)
    objects: Objects        get, list, create, patch, patch_status (at a resourceVersion), replace_status, delete,
                            event:
                            automation.adapters.kube.objects.KubeObjects, or doubles.objects.FakeObjects in tests

A controller never reads `metadata` from a raw dict, and never calls the Kubernetes client: it holds an `Objects`
(the kinds are automation.adapters.kube.objects' `Kind`s), the finalizer helper (automation/kit/finalizers.py)
and the status writer (automation/kit/status.py). What its informers keep is read through the Manager's stores.
"""
from __future__ import annotations

from typing import Any, Mapping

from automation.adapters.kube.informer import object_key
from automation.adapters.kube.objects import (CLUSTERROLEBINDINGS, CLUSTERROLES, CONFIGMAPS, HUBCLUSTERS, HUBCONFIGS,
                                              HUBGITREPOS, HUBRETAINEDSTACKS, HUBSTACKRUNS, HUBTENANTS, NAMESPACES, RESOURCEQUOTAS,
                                              ROLEBINDINGS, ROLES, SECRETS, SERVICEACCOUNTS, ApiError, Conflict, Kind,
                                              Objects)

__all__ = ["Obj", "Objects", "Kind", "ApiError", "Conflict", "HUBCLUSTERS", "HUBCONFIGS", "HUBGITREPOS", "HUBRETAINEDSTACKS",
           "HUBSTACKRUNS", "HUBTENANTS", "NAMESPACES", "SECRETS", "CONFIGMAPS", "SERVICEACCOUNTS", "RESOURCEQUOTAS",
           "ROLES", "ROLEBINDINGS", "CLUSTERROLES", "CLUSTERROLEBINDINGS"]

Raw = dict[str, Any]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class Obj:
    """A read-only view over a raw object (as the API server or an informer hands it over)."""

    __slots__ = ("raw", "meta")

    def __init__(self, raw: Mapping[str, Any]):
        self.raw = raw
        self.meta: Mapping[str, Any] = _mapping(raw.get("metadata"))

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def namespace(self) -> str | None:
        namespace = self.meta.get("namespace")
        return namespace if isinstance(namespace, str) and namespace else None

    @property
    def key(self) -> str:
        """namespace/name, or the name of a cluster-scoped object: the informers' and the queues' key
        (automation.adapters.kube.informer.object_key, the one rule)."""
        return object_key(self.raw)

    @property
    def uid(self) -> str | None:
        return self.meta.get("uid")

    @property
    def resource_version(self) -> str | None:
        return self.meta.get("resourceVersion")

    @property
    def generation(self) -> int | None:
        generation = self.meta.get("generation")
        return generation if isinstance(generation, int) else None

    @property
    def labels(self) -> Mapping[str, str]:
        return _mapping(self.meta.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self.meta.get("annotations"))

    @property
    def finalizers(self) -> list[str]:
        return [f for f in self.meta.get("finalizers") or [] if isinstance(f, str)]

    @property
    def owner_references(self) -> list[Mapping[str, Any]]:
        return [o for o in self.meta.get("ownerReferences") or [] if isinstance(o, Mapping)]

    @property
    def deletion_timestamp(self) -> str | None:
        return self.meta.get("deletionTimestamp")

    @property
    def deleting(self) -> bool:
        """A deletion was asked: only finalizers hold the object now."""
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def creation_timestamp(self) -> str | None:
        return self.meta.get("creationTimestamp")

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("status"))

    def owned_by(self, uid: str | None) -> bool:
        return uid is not None and any(o.get("uid") == uid for o in self.owner_references)
