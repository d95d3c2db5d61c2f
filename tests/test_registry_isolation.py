"""Isolation through the registry API (the issue's first test): two tenants' users, each bound to the tenant-admin
ClusterRole in their own namespace only, can do everything with their own clusters and nothing with the other's,
and cannot list the fleet. Kubernetes RBAC decides each time: the API calls it as the user's own token."""
from __future__ import annotations

from kubernetes import client

from automation.api.app import FORBIDDEN
from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.names import GROUP, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_api_env import apply_tenant_admin_role, fleet, registry_api  # noqa: F401 - the fixtures
from doubles.service_env import wait_until


def test_tenants_cannot_list_read_change_or_delete_each_others_clusters(registry_api, fleet):
    apply_tenant_admin_role(fleet.kube)
    a, ns_a = fleet.tenant()
    b, ns_b = fleet.tenant()
    alice = fleet.user(ns_a, "alice", cluster_role=TENANT_ADMIN_CLUSTERROLE)
    bob = fleet.user(ns_b, "bob", cluster_role=TENANT_ADMIN_CLUSTERROLE)
    for token, tenant in ((alice, a), (bob, b)):  # until RBAC has caught up with the new bindings
        wait_until(lambda: registry_api.call("GET", f"/tenants/{tenant}/clusters", token).status_code == 200,
                   what="the tenant admin's binding")

    # Each registers a cluster of their own, as themselves.
    mine = {alice: (a, fleet.cluster(a, ns_a, alice, labels={"owner": "alice"})["id"]),
            bob: (b, fleet.cluster(b, ns_b, bob, labels={"owner": "bob"})["id"])}

    for me, other in ((alice, bob), (bob, alice)):
        my_tenant, my_cluster = mine[me]
        their_tenant, their_cluster = mine[other]
        own, theirs = f"/tenants/{my_tenant}/clusters", f"/tenants/{their_tenant}/clusters"

        def stored() -> dict:
            return client.CustomObjectsApi(fleet.kube).get_namespaced_custom_object(
                GROUP, VERSION, ns_a if other == alice else ns_b, "hubclusters", their_cluster)
        before = stored()

        # their clusters: every verb refused by Kubernetes (the one FORBIDDEN body where a tenant is named)
        for method, path, body in (
                ("GET", theirs, None),
                ("GET", f"{theirs}/{their_cluster}", None),
                ("PATCH", f"{theirs}/{their_cluster}", {"labels": {"owner": "me"}}),
                ("PUT", f"{theirs}/{their_cluster}", {"spec": {"displayName": "mine now"}}),
                ("DELETE", f"{theirs}/{their_cluster}", None),
                ("POST", theirs, {"id": "squatter"}),
                ("GET", f"{theirs}/{their_cluster}/facts", None),
                ("GET", f"{theirs}/{their_cluster}/facts/history", None),
                ("GET", f"/clusters?tenant={their_tenant}", None),
                ("GET", "/clusters", None),
                ("GET", f"/clusters?labelSelector=owner%3D{'bob' if me == alice else 'alice'}", None),
                ("GET", "/tenants", None),
                ("GET", f"/tenants/{their_tenant}", None),
                ("GET", "/tenants/t-never-made-000000/clusters", None),  # no telling which tenants exist
        ):
            response = registry_api.call(method, path, me, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert "forbidden" in response.json()["detail"], (method, path, response.text)
        response = registry_api.call("POST", f"{theirs}/{their_cluster}/facts", me, json={"facts": {"x": "1"}})
        assert response.status_code == 403 and response.json()["detail"] == FORBIDDEN  # the one body (#31)

        assert stored() == before  # their cluster is as it was

        # their own: everything works
        assert [item["id"] for item in registry_api.ok("GET", own, me)["items"]] == [my_cluster]
        assert registry_api.ok("GET", f"/clusters?tenant={my_tenant}", me)["items"][0]["id"] == my_cluster
        assert registry_api.ok("GET", f"{own}/{my_cluster}", me)["tenant"] == my_tenant
        assert registry_api.ok("PATCH", f"{own}/{my_cluster}", me, json={"spec": {"facts": {"a": "b"}}})[
            "spec"]["facts"] == {"a": "b"}
        assert registry_api.ok("PUT", f"{own}/{my_cluster}", me, json={"spec": {"displayName": "ours"}})[
            "displayName"] == "ours"
        assert registry_api.ok("POST", f"{own}/{my_cluster}/facts", me, json={"facts": {"k8s": "1.30"}},
                               status=201)["version"] == 1
        assert registry_api.ok("GET", f"{own}/{my_cluster}/facts", me)["facts"] == {"k8s": "1.30"}
        assert len(registry_api.ok("GET", f"{own}/{my_cluster}/facts/history", me)["items"]) == 1

    for me, (tenant, cluster) in mine.items():
        assert registry_api.ok("DELETE", f"/tenants/{tenant}/clusters/{cluster}", me)["finished"] is True
