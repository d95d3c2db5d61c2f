"""Dynamic facts through the registry API against the real kube-apiserver: every push is a version, the history
says what changed and when (across a restart of the API), the latest is mirrored to status.facts, and the right
to push is `create hubclusters/facts` of one Cluster: an agent holding it for its cluster pushes there and nowhere
else, and still cannot write hubclusters/status itself."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.facts import FactsStore
from automation.api.app import ApiSettings, ClientCache, Registry, create_app
from stacks.install import API_RULES
from stacks.names import FACTS_SUBRESOURCE, GROUP, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_api_env import ROUTERS, bearer, fleet, make_registry, registry_api  # noqa: F401
from tests.registry_rbac import bind_cluster_role, sa_subject, service_account_token, unbind_cluster_role
from doubles.service_env import wait_until


def test_pushes_are_versions_with_a_history_and_the_latest_is_mirrored_to_status(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    path = f"/tenants/{tenant}/clusters/{cluster}/facts"
    assert registry_api.call("GET", path).status_code == 404  # nothing pushed yet

    first = registry_api.ok("POST", path, json={"facts": {"k8s": "1.29", "nodes": "3"}}, status=201)
    second = registry_api.ok("POST", path, json={"facts": {"k8s": "1.30", "nodes": "3", "arch": "arm64"}},
                             status=201)
    third = registry_api.ok("POST", path, json={"facts": {"k8s": "1.30", "arch": "arm64"}}, status=201)
    assert [first["version"], second["version"], third["version"]] == [1, 2, 3]
    assert first["time"] < second["time"] < third["time"]

    history = registry_api.ok("GET", f"{path}/history")["items"]
    assert [(item["version"], item["set"], item["removed"]) for item in history] == [
        (1, {"k8s": "1.29", "nodes": "3"}, []),
        (2, {"k8s": "1.30", "arch": "arm64"}, []),
        (3, {}, ["nodes"]),
    ]
    assert [item["time"] for item in history] == [first["time"], second["time"], third["time"]]
    assert [item["version"] for item in registry_api.ok("GET", f"{path}/history?since={first['time']}")["items"]] \
        == [2, 3]
    offset_form = first["time"].replace("Z", "+00:00")  # an offset whose '+' arrives unencoded, as a space
    assert len(registry_api.ok("GET", f"{path}/history?since={offset_form}")["items"]) == 2
    assert [item["version"] for item in registry_api.ok("GET", f"{path}/history?limit=1")["items"]] == [1]
    assert registry_api.ok("GET", path) == third

    stored = client.CustomObjectsApi(fleet.kube).get_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters",
                                                                              cluster)
    assert stored["status"]["facts"] == third  # removed keys are gone from the status too
    assert registry_api.ok("GET", f"/tenants/{tenant}/clusters/{cluster}")["status"]["facts"] == third
    assert registry_api.ok("GET", f"/clusters?tenant={tenant}&fact=arch%3Darm64")["items"][0]["id"] == cluster


def test_history_survives_a_restart_of_the_api(registry_api, fleet, tmp_path):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    path = f"/tenants/{tenant}/clusters/{cluster}/facts"
    url = f"sqlite:///{tmp_path / 'facts.db'}"
    for run, facts in enumerate(({"a": "1"}, {"a": "2"}), start=1):
        store = FactsStore(url)
        reg = make_registry(registry_api.env, store)
        try:
            with TestClient(create_app(reg, routers=ROUTERS)) as http:
                response = http.post(path, json={"facts": facts}, headers=bearer(registry_api.admin))
                assert response.status_code == 201 and response.json()["version"] == run
                history = http.get(f"{path}/history", headers=bearer(registry_api.admin)).json()["items"]
                assert [(item["version"], item["set"]) for item in history] == [(1, {"a": "1"}), (2, {"a": "2"})][:run]
        finally:
            store.close()
            reg.own.close()


def test_a_new_store_mirrors_even_though_it_counts_from_one_again(registry_api, fleet, tmp_path):
    """status.facts keeps the newest push by time: a history database started afresh still updates it."""
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    path = f"/tenants/{tenant}/clusters/{cluster}/facts"
    for _ in range(2):
        registry_api.ok("POST", path, json={"facts": {"old": "yes"}}, status=201)
    store = FactsStore(f"sqlite:///{tmp_path / 'fresh.db'}")
    reg = make_registry(registry_api.env, store)
    try:
        with TestClient(create_app(reg, routers=ROUTERS)) as http:
            response = http.post(path, json={"facts": {"new": "yes"}}, headers=bearer(registry_api.admin))
            assert response.json()["version"] == 1
    finally:
        store.close()
        reg.own.close()
    stored = client.CustomObjectsApi(fleet.kube).get_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters",
                                                                              cluster)
    assert stored["status"]["facts"]["facts"] == {"new": "yes"}


def test_bad_pushes_and_queries(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    path = f"/tenants/{tenant}/clusters/{cluster}/facts"
    response = registry_api.call("POST", path, json={"facts": {"no spaces": "x"}})
    assert response.status_code == 422 and "facts.no spaces" in response.json()["message"]
    response = registry_api.call("POST", path, json={"facts": {"k": "v" * 1025}})
    assert response.status_code == 422 and "facts.k" in response.json()["message"]
    response = registry_api.call("POST", path, json={"facts": {str(i): "x" for i in range(101)}})
    assert response.status_code == 422 and "facts" in response.json()["message"]
    response = registry_api.call("GET", f"{path}/history?since=yesterday")
    assert response.status_code == 422 and response.json()["detail"][0]["field"] == "since"
    response = registry_api.call("POST", f"/tenants/{tenant}/clusters/c-missing/facts", json={"facts": {}})
    assert response.status_code == 404 and "c-missing" in response.json()["detail"]
    response = registry_api.call("GET", f"/tenants/{tenant}/clusters/c-missing/facts/history")
    assert response.status_code == 404


def test_deleting_a_cluster_forgets_its_history(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace, id="c-reused")["id"]
    path = f"/tenants/{tenant}/clusters/{cluster}/facts"
    registry_api.ok("POST", path, json={"facts": {"a": "1"}}, status=201)
    registry_api.ok("DELETE", f"/tenants/{tenant}/clusters/{cluster}")
    fleet.cluster(tenant, namespace, id="c-reused")
    assert registry_api.ok("GET", f"{path}/history")["items"] == []
    assert registry_api.ok("POST", path, json={"facts": {"b": "2"}}, status=201)["version"] == 1


def test_an_agent_pushes_facts_to_its_own_cluster_only_and_never_writes_status(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    mine = fleet.cluster(tenant, namespace)["id"]
    other = fleet.cluster(tenant, namespace)["id"]
    agent = fleet.user(namespace, f"agent-{fleet.suffix}", rules=[
        {"apiGroups": [GROUP], "resources": [FACTS_SUBRESOURCE], "resourceNames": [mine], "verbs": ["create"]}])

    def push(cluster: str):
        return registry_api.call("POST", f"/tenants/{tenant}/clusters/{cluster}/facts", agent,
                                 json={"facts": {"nodes": "3"}})

    wait_until(lambda: push(mine).status_code == 201, what="the agent's Role to be in force")
    response = push(other)
    assert response.status_code == 403
    assert f"create {FACTS_SUBRESOURCE} in {GROUP}" in response.json()["detail"]
    # Reading facts needs reading the Cluster, which the agent may not.
    assert registry_api.call("GET", f"/tenants/{tenant}/clusters/{mine}/facts", agent).status_code == 403

    objects = client.CustomObjectsApi(registry_api.env.api_client(agent))
    for write in (
        lambda: objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "hubclusters", mine, {"status": {"facts": {"version": 99, "time": "x"}}}),
        lambda: objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", mine,
                                                       {"spec": {"facts": {"a": "b"}}}),
    ):
        with pytest.raises(ApiException) as refused:
            write()
        assert refused.value.status == 403
    objects.api_client.close()
    facts = client.CustomObjectsApi(fleet.kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "hubclusters", mine)["status"]["facts"]
    assert facts["facts"] == {"nodes": "3"} and facts["version"] >= 1


def test_the_apis_own_service_account_needs_no_more_than_its_documented_rights(registry_api, fleet, tmp_path):
    """Run the routes with the API's own client bound to exactly stacks.install.API_RULES (what deploy/ grants)."""
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    role = f"registry-api-{fleet.suffix}"
    bind_cluster_role(fleet.kube, role, [dict(rule) for rule in API_RULES], [sa_subject(namespace, role)])
    fleet.roles.append((namespace, role))  # its ServiceAccount goes with the rest
    store = FactsStore(f"sqlite:///{tmp_path / 'facts.db'}")
    own = registry_api.env.api_client(service_account_token(fleet.kube, namespace, role))
    reg = Registry(settings=ApiSettings(), own=own, callers=ClientCache(registry_api.env.configuration(), 8),
                   facts=store)
    admin = bearer(registry_api.admin)
    try:
        with TestClient(create_app(reg, routers=ROUTERS)) as http:
            path = f"/tenants/{tenant}/clusters/{cluster}"
            wait_until(lambda: http.post(f"{path}/facts", json={"facts": {"a": "1"}}, headers=admin).status_code
                       == 201, what="the API's role to be in force")
            assert http.get(path, headers=admin).json()["status"]["facts"]["facts"] == {"a": "1"}
            assert http.get(f"{path}/facts/history", headers=admin).json()["items"][0]["set"] == {"a": "1"}
            items = http.get(f"/clusters?tenant={tenant}", headers=admin).json()["items"]
            assert [(item["id"], item["tenant"]) for item in items] == [(cluster, tenant)]
            fleetwide = http.get("/clusters?fact=a%3D1", headers=admin).json()["items"]
            assert (cluster, tenant) in [(item["id"], item["tenant"]) for item in fleetwide]
            assert not reg.extra.get("tenant_index_refused"), "the API's own client may not list Tenants"
    finally:
        store.close()
        own.close()
        unbind_cluster_role(fleet.kube, role)
