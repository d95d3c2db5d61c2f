"""Which cluster source kinds the API server serves, and how to list them: what the service asks before the sources
controller (automation/service/sources.py) starts. Every call has a timeout. The controller's own writes go through
the controller kit's object port (automation/kit/objects.py), not through here.
"""
from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automation.adapters.kube.informer import Source
from stacks.sources.kinds import SourceKind
from stacks.sources.families import named, read_elsewhere
from stacks.sources.watched import watched_version

TIMEOUT = (5, 30)  # (connect, read) seconds of every call here


def selected(api_client: client.ApiClient, option: str
             ) -> tuple[list[SourceKind], list[SourceKind], list[SourceKind]]:
    """(the sources, the infrastructure kinds, the source kinds not watched: their CRDs not served) `--sources` asks
    for: 'auto' those the API server serves."""
    wanted = [(family.source, family.related) for family in named(option)]
    unwatched: list[SourceKind] = []
    if option.strip() == "auto":
        here = set(served(api_client, [k for s, r in wanted for k in (s, *r)]))
        unwatched = [s for s, _ in wanted if s not in here]
        wanted = [(s, tuple(k for k in r if k in here)) for s, r in wanted if s in here]
    return [s for s, _ in wanted], [k for _, r in wanted for k in r], unwatched


def not_served(kind: SourceKind) -> str:
    return (f"{kind.plural}.{kind.group}/{watched_version(kind)} was not served when the service started (its CRD "
            "was not installed): installed since, it is watched after a restart")


def source_of(api_client: client.ApiClient, kind: SourceKind, namespace: str | None = None) -> Source:
    """List (and watch) `kind` in every namespace, or in one (never for a kind a family reads outside its sources'
    namespaces: HyperShift's HostedControlPlanes live in the control-plane namespaces)."""
    custom = client.CustomObjectsApi(api_client)
    version = watched_version(kind)
    if namespace and kind not in read_elsewhere():
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
