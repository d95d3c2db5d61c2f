"""The informer Sources of the controllers that declare their own watches (automation/service/tenants.py and
gitrepos.py `setup(manager, source=...)`): how the official client lists and watches their kinds. The controllers
never hold the client; the wiring (automation/service/serve.py) builds these and hands them over.
"""
from __future__ import annotations

from kubernetes import client

from automation.adapters.kube.informer import Source
from stacks.names import GITREPOS, GROUP, TENANTS, VERSION


def tenant_source(api_client: client.ApiClient) -> Source:
    """Every HubTenant (cluster-scoped)."""
    custom = client.CustomObjectsApi(api_client)
    return Source(TENANTS, custom.list_cluster_custom_object, (GROUP, VERSION, TENANTS))


def gitrepo_source(api_client: client.ApiClient, watch_namespace: str | None = None) -> Source:
    """The HubGitRepos of `watch_namespace`, or of every namespace."""
    custom = client.CustomObjectsApi(api_client)
    if watch_namespace:
        return Source(GITREPOS, custom.list_namespaced_custom_object, (GROUP, VERSION, watch_namespace, GITREPOS))
    return Source(GITREPOS, custom.list_cluster_custom_object, (GROUP, VERSION, GITREPOS))
