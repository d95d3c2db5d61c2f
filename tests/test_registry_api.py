"""The registry's REST API against the real kube-apiserver: auth, tenants and clusters, validation, the fleet-wide
list with its filters and pages, and the OpenAPI document. The API runs in-process (TestClient); every call it
makes to Kubernetes is made as the test's bearer token."""
from __future__ import annotations

import itertools
import uuid

import pytest
from kubernetes import client
from openapi_spec_validator import validate

from automation.api import listing, serve
from automation.api.app import create_app
from stacks.names import BOOTSTRAP_TOKEN_LABEL, GROUP, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_api_env import (CLUSTER_ID, ROUTERS, TENANT_ID, api_routes, cluster_view, fleet,  # noqa: F401
                                    registry_api, tenant_view)

AWS = {"accountID": "123456789012", "region": "eu-west-1", "infraID": "prod-abc12",
       "apiURL": "https://api.prod.example.com", "network": {"vpcID": "vpc-0abc", "cidr": "10.1.0.0/16"}}


def _problems(response) -> dict[str, str]:
    """field -> message of a 422."""
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["message"]
    return {problem["field"]: problem["msg"] for problem in body["detail"]}


# --------------------------------------------------------------------------- auth


def test_discovery_health_and_openapi_need_no_token(registry_api):
    assert registry_api.ok("GET", "/", token=None)["auth"]["type"] == "bearer"
    assert registry_api.ok("GET", "/healthz", token=None) == {"status": "ok"}
    assert registry_api.ok("GET", "/openapi.json", token=None)["openapi"].startswith("3.")
    assert registry_api.call("GET", "/docs", token=None).status_code == 200


def _every_route(app):
    """(method, concrete path) of every route that needs a token."""
    for route in api_routes(app.routes):
        # not /docs (automation.api.docs), nor discovery, health and version (no token)
        if route.path not in ("/", "/healthz", "/version") and route.include_in_schema:
            path = route.path.replace("{tenant}", "nobody").replace("{cluster}", "nothing")
            for method in route.methods:
                yield method, path


def test_every_route_without_a_token_is_401_and_a_bad_token_gets_kubernetes_401(registry_api, fleet):
    tenant, _ = fleet.tenant()
    routes = list(_every_route(registry_api.app))
    assert len(routes) >= 14
    for method, path in routes:
        response = registry_api.call(method, path, token=None, json={})
        assert response.status_code == 401, (method, path, response.text)
        assert "bearer token is required" in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"
    response = registry_api.http.get("/tenants", headers={"Authorization": f"Basic {registry_api.admin}"})
    assert response.status_code == 401
    for path in ("/tenants", f"/tenants/{tenant}", f"/tenants/{tenant}/clusters", "/clusters"):
        response = registry_api.call("GET", path, token="not-a-valid-token")
        assert response.status_code == 401, (path, response.text)
        assert response.json()["detail"] == "Unauthorized"  # Kubernetes' own message


# --------------------------------------------------------------------------- tenants


def test_tenant_crud_with_a_generated_id(registry_api, fleet):
    tenant, namespace = fleet.tenant(displayName="Team A", facts={"cost-center": "42"})
    assert TENANT_ID.fullmatch(tenant) and namespace == tenant
    view = tenant_view(registry_api.ok("GET", f"/tenants/{tenant}"))
    assert (view.display_name, view.spec.facts, view.namespace) == ("Team A", {"cost-center": "42"}, tenant)
    assert tenant in [item["id"] for item in registry_api.ok("GET", "/tenants")["items"]]

    patched = registry_api.ok("PATCH", f"/tenants/{tenant}", json={
        "spec": {"displayName": "Team A2", "facts": {"cost-center": None, "tier": "gold"}}, "labels": {"env": "prod"}})
    assert patched["displayName"] == "Team A2" and patched["spec"]["facts"] == {"tier": "gold"}
    assert patched["labels"] == {"env": "prod"}
    assert registry_api.ok("GET", "/tenants?labelSelector=env%3Dprod")["items"][0]["id"] == tenant
    merged = registry_api.ok("PATCH", f"/tenants/{tenant}", content=b'{"spec": {"facts": {"tier": null}}}',
                             headers={"Content-Type": "application/merge-patch+json"})
    assert merged["spec"]["facts"] == {} and merged["displayName"] == "Team A2"

    stale = view.resource_version
    response = registry_api.call("PUT", f"/tenants/{tenant}", json={"spec": {}, "resourceVersion": stale})
    assert response.status_code == 409 and "changed since" in response.json()["detail"]
    replaced = registry_api.ok("PUT", f"/tenants/{tenant}", json={
        "spec": {"displayName": "Team B"}, "resourceVersion": merged["resourceVersion"]})
    assert replaced["spec"]["displayName"] == "Team B" and replaced["spec"]["facts"] == {}
    assert replaced["labels"] == {"env": "prod"}  # a PUT without labels keeps them

    assert registry_api.ok("DELETE", f"/tenants/{tenant}") == {"id": tenant, "finished": True}
    response = registry_api.call("GET", f"/tenants/{tenant}")
    assert response.status_code == 404 and tenant in response.json()["detail"]  # Kubernetes' message


def test_invalid_tenant_bodies_are_422_naming_the_field(registry_api):
    assert "spec.accountID" in _problems(registry_api.call("POST", "/tenants", json={"spec": {"accountID": "12"}}))
    assert "spec.admins.0" in _problems(registry_api.call("POST", "/tenants", json={
        "spec": {"admins": [{"kind": "ServiceAccount", "name": "x"}]}}))
    assert "spec.colour" in _problems(registry_api.call("POST", "/tenants", json={"spec": {"colour": "red"}}))
    assert "id" in _problems(registry_api.call("POST", "/tenants", json={"id": "Not_A_Name"}))


def test_a_taken_generated_name_is_retried(registry_api, fleet, monkeypatch):
    taken, _ = fleet.tenant()
    fresh = f"t-fresh-name-{uuid.uuid4().int % 10**6:06d}"
    names = iter([taken, fresh])
    monkeypatch.setattr("automation.api.kube.new_id", lambda kind: next(names))
    made = registry_api.ok("POST", "/tenants", json={}, status=201)
    fleet.tenants.append(made["id"])
    assert made["id"] == fresh
    response = registry_api.call("POST", "/tenants", json={"id": taken})  # a name the client gives: 409
    assert response.status_code == 409 and "already exists" in response.json()["detail"]


# --------------------------------------------------------------------------- clusters


def test_cluster_crud(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    made = cluster_view(fleet.cluster(tenant, namespace, spec={"displayName": "Prod", "facts": {"cloud": "aws"},
                                                               **AWS}, labels={"env": "prod"}))
    assert CLUSTER_ID.fullmatch(made.id) and made.tenant == tenant and made.namespace == namespace
    assert made.display_name == "Prod" and made.spec.account_id == "123456789012" and made.labels == {"env": "prod"}
    assert made.status.ready is None and made.status.facts is None and made.status.bootstrap_token is None

    path = f"/tenants/{tenant}/clusters/{made.id}"
    fleet.status(namespace, made.id, {
        "account": "123456789012", "region": "eu-west-1", "outputs": {"endpoint": "vpce-1.example"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "up to date",
                        "lastTransitionTime": "2024-05-01T12:00:00Z"}],
        "bootstrapToken": {"sha256": "a" * 64, "validUntil": "2024-05-02T12:00:00Z", "used": False}})
    read = cluster_view(registry_api.ok("GET", path))
    assert (read.status.ready.status, read.status.ready.reason) == ("True", "Succeeded")
    assert (read.status.account, read.status.region, read.status.endpoint) == ("123456789012", "eu-west-1",
                                                                              "vpce-1.example")
    assert read.status.bootstrap_token.valid_until == "2024-05-02T12:00:00Z"
    assert "sha256" not in registry_api.call("GET", path).text and "a" * 64 not in registry_api.call("GET", path).text

    patched = registry_api.ok("PATCH", path, json={"spec": {"facts": {"cloud": None, "tier": "1"}, "region": None},
                                                   "labels": {"env": None, "team": "a"}})
    assert patched["spec"]["facts"] == {"tier": "1"} and patched["spec"]["region"] is None
    assert patched["labels"] == {"team": "a"} and patched["spec"]["accountID"] == "123456789012"
    assert patched["status"]["ready"]["status"] == "True"  # the status is the service's: untouched

    response = registry_api.call("PUT", path, json={"spec": {"displayName": "Registered only"}})
    assert response.status_code == 422 and "cannot be removed" in response.json()["detail"]  # Kubernetes' rule
    replaced = registry_api.ok("PUT", path, json={"spec": {**AWS, "displayName": "Replaced"}})
    assert replaced["spec"]["facts"] == {} and replaced["displayName"] == "Replaced"
    assert replaced["labels"] == {"team": "a"}  # a PUT without labels keeps them
    stored = client.CustomObjectsApi(fleet.kube).get_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters",
                                                                              made.id)
    # what was given, not the model's defaults (tokenLifetime: the CRD's own default)
    assert set(stored["spec"]) == {*AWS, "displayName", "tokenLifetime"}
    assert stored["status"]["account"] == "123456789012"

    items = registry_api.ok("GET", f"/tenants/{tenant}/clusters")["items"]
    assert [item["id"] for item in items] == [made.id]
    assert registry_api.ok("DELETE", path) == {"id": made.id, "finished": True}
    assert registry_api.call("GET", path).status_code == 404


def test_a_tenant_that_adopts_a_namespace_keeps_its_clusters_there(registry_api, fleet):
    adopted = fleet.namespace(f"adopted-{fleet.suffix}")
    tenant, namespace = fleet.tenant(f"t-adopter-{fleet.suffix}", namespace=adopted)
    assert namespace == adopted
    made = fleet.cluster(tenant, namespace, id=f"c-{fleet.suffix}")
    assert made["namespace"] == adopted and made["id"] == f"c-{fleet.suffix}"
    assert registry_api.ok("GET", f"/tenants/{tenant}/clusters/{made['id']}")["tenant"] == tenant


def test_a_cluster_written_outside_the_api_that_the_model_refuses_is_still_listed(registry_api, fleet):
    """The CRD's schema cannot check everything the model does (an API host may not be an IP address)."""
    tenant, namespace = fleet.tenant()
    name = f"c-kubectl-{fleet.suffix}"
    client.CustomObjectsApi(fleet.kube).create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": name},
        "spec": {**AWS, "apiURL": "https://10.0.0.1"}})
    fleet.clusters.append((namespace, name))
    [item] = registry_api.ok("GET", f"/clusters?tenant={tenant}")["items"]
    assert item["spec"]["apiURL"] == "https://10.0.0.1" and "spec.apiURL" in item["status"]["problem"]
    response = registry_api.call("PATCH", f"/tenants/{tenant}/clusters/{name}", json={"spec": {"displayName": "x"}})
    assert "spec.apiURL" in _problems(response)  # a change is validated as a whole spec
    fixed = registry_api.ok("PATCH", f"/tenants/{tenant}/clusters/{name}",
                            json={"spec": {"apiURL": "https://api.fixed.example.com"}})
    assert fixed["status"]["problem"] is None and fixed["spec"]["apiURL"] == "https://api.fixed.example.com"


def test_an_unknown_tenant_is_404_only_to_who_could_see_it(registry_api):
    """No one learns which tenants exist: without the right to its clusters the answer is 401 or 403, as for an
    existing tenant."""
    response = registry_api.call("GET", "/tenants/t-nobody-here-000000/clusters")
    assert response.status_code == 404 and response.json()["detail"] == "tenant t-nobody-here-000000 not found"
    assert registry_api.call("GET", "/clusters?tenant=t-nobody-here-000000").status_code == 404
    assert registry_api.call("GET", "/tenants/t-nobody-here-000000/clusters/c-x", "bad-token").status_code == 401
    response = registry_api.call("GET", "/tenants/t-nobody-here-000000/clusters", registry_api.env.tenant_token)
    assert response.status_code == 403 and "forbidden" in response.json()["detail"]


def test_invalid_cluster_bodies_are_422_naming_the_field(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    post = lambda body: registry_api.call("POST", f"/tenants/{tenant}/clusters", json=body)  # noqa: E731
    problems = _problems(post({"spec": {"region": "mars-north-1"}}))
    assert "mars-north-1" in problems["spec.region"] and "region" in problems["spec.region"]
    problems = _problems(post({"spec": {"accountID": "123456789012"}}))
    assert "infraID" in problems["spec"] and "network" in problems["spec"]
    assert "spec.tokenLifetime" in _problems(post({"spec": {"tokenLifetime": "one day"}}))
    assert "spec.facts.bad key.[key]" in _problems(post({"spec": {"facts": {"bad key": "x"}}}))
    assert "spec.unknownField" in _problems(post({"spec": {"unknownField": 1}}))
    assert f"labels.{BOOTSTRAP_TOKEN_LABEL}" in _problems(post({"labels": {BOOTSTRAP_TOKEN_LABEL: "x"}}))
    response = registry_api.call("POST", f"/tenants/{tenant}/clusters", content=b"{not json",
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == 422

    made = fleet.cluster(tenant, namespace)
    path = f"/tenants/{tenant}/clusters/{made['id']}"
    problems = _problems(registry_api.call("PATCH", path, json={"spec": {"region": "nowhere"}}))
    assert set(problems) == {"spec.region"}
    problems = _problems(registry_api.call("PATCH", path, json={"spec": AWS | {"network": None}}))
    assert "network" in problems["spec"]
    assert "spec.region" in _problems(registry_api.call("PUT", path, json={"spec": {"region": 5}}))
    assert registry_api.ok("GET", path)["spec"]["region"] is None  # nothing was written
    assert "fact" in _problems(registry_api.call("GET", "/clusters?fact=novalue"))


# --------------------------------------------------------------------------- the fleet-wide list


def test_fleet_list_filters_by_tenant_label_and_fact(registry_api, fleet):
    run = fleet.suffix
    a, ns_a = fleet.tenant()
    b, ns_b = fleet.tenant()
    a1 = fleet.cluster(a, ns_a, labels={"run": run, "env": "prod"}, spec={"facts": {"cloud": "aws"}})["id"]
    a2 = fleet.cluster(a, ns_a, labels={"run": run, "env": "dev"})["id"]
    b1 = fleet.cluster(b, ns_b, labels={"run": run, "env": "prod"})["id"]
    fleet.status(ns_b, b1, {"facts": {"version": 3, "time": "2024-05-01T12:00:00Z", "facts": {"cloud": "aws"}}})

    def ids(query: str) -> set[str]:
        return {item["id"] for item in registry_api.ok("GET", f"/clusters?{query}")["items"]}

    assert ids(f"labelSelector=run%3D{run}") == {a1, a2, b1}
    assert ids(f"tenant={a}") == {a1, a2}
    assert ids(f"tenant={b}&labelSelector=run%3D{run}") == {b1}
    assert ids(f"labelSelector=run%3D{run},env%3Dprod") == {a1, b1}
    assert ids(f"labelSelector=run%3D{run}&fact=cloud%3Daws") == {a1, b1}  # static and dynamic
    assert ids(f"labelSelector=run%3D{run}&fact=cloud%3Daws&tenant={b}") == {b1}
    assert ids(f"labelSelector=run%3D{run}&fact=cloud%3Daws&fact=cloud%3Dgcp") == set()
    items = registry_api.ok("GET", f"/clusters?labelSelector=run%3D{run}")["items"]
    assert {item["id"]: item["tenant"] for item in items} == {a1: a, a2: a, b1: b}
    assert ids(f"labelSelector=run%3D{run}&fact=cloud%3Daws&tenant={a}") == \
        {item["id"] for item in registry_api.ok("GET", f"/tenants/{a}/clusters?fact=cloud%3Daws")["items"]}


def _pages(registry_api, query: str, limit: int) -> list[list[str]]:
    pages, token = [], None
    while True:
        suffix = f"&continue={token}" if token else ""
        body = registry_api.ok("GET", f"/clusters?{query}&limit={limit}{suffix}")
        pages.append([item["id"] for item in body["items"]])
        token = body["continue"]
        if not token:
            return pages
        assert len(pages) < 50


@pytest.mark.parametrize("chunk", [3, 500])
def test_pages_return_every_cluster_once(registry_api, fleet, monkeypatch, chunk):
    """With and without a fact filter, and with a filter whose matches end mid-chunk (CHUNK 3, limit 2)."""
    monkeypatch.setattr(listing, "CHUNK", chunk)
    run = fleet.suffix
    a, ns_a = fleet.tenant()
    b, ns_b = fleet.tenant()
    made = {}
    for i, (tenant, namespace) in enumerate(itertools.islice(itertools.cycle([(a, ns_a), (b, ns_b)]), 9)):
        facts = {"tier": "gold"} if i % 3 else {}
        made[fleet.cluster(tenant, namespace, labels={"run": run}, spec={"facts": facts})["id"]] = facts
    gold = {name for name, facts in made.items() if facts}

    pages = _pages(registry_api, f"labelSelector=run%3D{run}", 4)
    assert [len(page) for page in pages] == [4, 4, 1]
    assert sorted(itertools.chain(*pages)) == sorted(made)

    pages = _pages(registry_api, f"labelSelector=run%3D{run}&fact=tier%3Dgold", 2)
    # A filtered page scans at most listing.MAX_CHUNKS chunks, so it may be short (even empty) where the matches are
    # sparse in the API server's order (the generated names decide it); never longer than the limit, never a repeat.
    assert all(len(page) <= 2 for page in pages) and len(pages) <= 3 + len(made)
    assert sorted(itertools.chain(*pages)) == sorted(gold)

    # A cluster created between two pages is returned at most once and none of the others is lost or repeated.
    first = registry_api.ok("GET", f"/clusters?labelSelector=run%3D{run}&fact=tier%3Dgold&limit=2")
    late = fleet.cluster(a, ns_a, labels={"run": run}, spec={"facts": {"tier": "gold"}})["id"]
    seen = [item["id"] for item in first["items"]]
    token = first["continue"]
    while token:
        body = registry_api.ok("GET", f"/clusters?labelSelector=run%3D{run}&fact=tier%3Dgold&limit=2"
                                      f"&continue={token}")
        seen += [item["id"] for item in body["items"]]
        token = body["continue"]
    assert len(seen) == len(set(seen)) and gold <= set(seen) <= gold | {late}


def test_a_fact_filter_token_is_refused_with_other_filters(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    for _ in range(3):
        fleet.cluster(tenant, namespace, spec={"facts": {"tier": "gold"}})
    body = registry_api.ok("GET", f"/clusters?tenant={tenant}&fact=tier%3Dgold&limit=1")
    assert body["continue"].startswith(listing.TOKEN_PREFIX)
    response = registry_api.call("GET", f"/clusters?tenant={tenant}&fact=tier%3Dsilver&limit=1"
                                        f"&continue={body['continue']}")
    assert response.status_code == 400 and "same tenant, labelSelector and fact" in response.json()["detail"]


# --------------------------------------------------------------------------- the OpenAPI document


def test_the_openapi_document_is_valid_and_lists_every_route(registry_api):
    document = registry_api.ok("GET", "/openapi.json", token=None)
    validate(document)
    for method, path in ((m, r.path) for r in api_routes(registry_api.app.routes) if r.include_in_schema
                         for m in r.methods):
        assert method.lower() in document["paths"][path], (method, path)
    paths = document["paths"]
    assert set(paths["/tenants/{tenant}"]) == {"get", "patch", "put", "delete"}
    assert set(paths["/tenants/{tenant}/clusters/{cluster}"]) == {"get", "patch", "put", "delete"}
    assert {"get", "post"} <= set(paths["/tenants/{tenant}/clusters"]) and "get" in paths["/clusters"]
    assert "post" in paths["/tenants/{tenant}/clusters/{cluster}/facts"]
    schemas = document["components"]["schemas"]
    assert "accountID" in schemas["ClusterSpec"]["properties"] and "admins" in schemas["TenantSpec"]["properties"]
    assert "sha256" not in schemas["TokenView"]["properties"]
    assert document["components"]["securitySchemes"]["kubernetesToken"]["scheme"] == "bearer"
    assert paths["/clusters"]["get"]["security"] == [{"kubernetesToken": []}]


def test_the_full_application_serves_every_resource_module(registry_api):
    """The API command's routers include every module's (the bootstrap routes too)."""
    app = create_app(registry_api.reg, routers=serve.ROUTERS)
    paths = {route.path for route in api_routes(app.routes)}
    mine = {route.path for route in api_routes(create_app(registry_api.reg, routers=ROUTERS).routes)}
    assert mine <= paths and any(path.startswith("/install") for path in paths)
    validate(app.openapi())
