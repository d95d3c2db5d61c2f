"""A cluster's run history through the registry API (automation/api/history.py) against the real kube-apiserver:
who may read it is whoever may `get` the HubCluster (read as the caller), and what anyone reads is the tenant's view
of it, so a pair run's text names nothing of the peer. The history store is a MemoryHistory here."""
from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from automation.adapters.facts import FactsStore
from automation.adapters.history import detail_key
from automation.adapters.history.options import store_from
from automation.api import history, serve
from automation.api.app import FORBIDDEN, create_app
from automation.cli import build_parser
from doubles.history import MemoryHistory
from doubles.service_env import wait_until
from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.disclosure import ids_in
from stacks.errors import InvalidSpec
from stacks.plandiff.compare import PropertyChange, ResourceChange, StackDiff
from stacks.runs.cause import Cause
from stacks.runs.record import RunRecord, detail_body
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_api_env import (ROUTERS, RegistryApi, apply_tenant_admin_role, fleet,  # noqa: F401 - fleet: the fixture
                                    make_registry)

RUNS = "/tenants/{tenant}/clusters/{cluster}/runs"
# The tenant's own side of a pair run (what its inputs hold: `known`), and its peer's, which it may not learn.
OWN = ("111111111111", "vpc-0acme1", "rtb-0acme1", "sg-0acme1", "arn:aws:iam::111111111111:role/acme-network")
PEER = ("222222222222", "rtb-0peer1", "rtb-0peer2", "sg-0peer1", "vpc-0peer1",
        "arn:aws:iam::222222222222:role/globex-network")


@pytest.fixture(scope="module")
def registry_api(kube_apiserver) -> Iterator[RegistryApi]:  # noqa: F811 - the env's fixture, with the run history
    folder = Path(tempfile.mkdtemp(prefix="registry-history-"))
    store = FactsStore(f"sqlite:///{folder / 'facts.db'}")
    reg = make_registry(kube_apiserver, store)
    reg.history = MemoryHistory()
    app = create_app(reg, routers=(*ROUTERS, history.router))
    with TestClient(app) as http:
        yield RegistryApi(kube_apiserver, http, store, reg, app)
    store.close()
    reg.own.close()


def store(api: RegistryApi) -> MemoryHistory:
    assert isinstance(api.reg.history, MemoryHistory)
    return api.reg.history


def pair_run(history_store: MemoryHistory, namespace: str, cluster: str, run_id: str, started: str,
             *, known: tuple[str, ...] = OWN) -> RunRecord:
    """A failed pair run of namespace/cluster whose message, diff and engine log name its peer's account, role,
    route tables and security group, beside its own side's IDs (`known`)."""
    stack = f"{namespace}.{cluster}"
    diff = StackDiff(stack, "changed", (
        ResourceChange(f"urn:pulumi:{stack}::hubwright::aws:ec2/route:Route::to-peer-rtb-0acme1",
                       "aws:ec2/route:Route", "add", {"routeTableId": PropertyChange(None, "rtb-0acme1"),
                                                      "destinationCidrBlock": PropertyChange(None, "10.2.0.0/16")}),
        ResourceChange(f"urn:pulumi:{stack}::hubwright::aws:ec2/route:Route::back-rtb-0peer1",
                       "aws:ec2/route:Route", "replace", {"routeTableId": PropertyChange("rtb-0peer2", "rtb-0peer1"),
                                                          "securityGroupId": PropertyChange("sg-0acme1", "sg-0peer1")}),
        ResourceChange(f"urn:pulumi:{stack}::hubwright::aws:ec2/vpcPeeringConnectionAccepter:Accepter::vpc-0peer1",
                       "aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter", "update",
                       {"tags": PropertyChange({"peer-account": "222222222222"}, {"rtb-0peer1": "222222222222"})}),
    ))
    log = ("Updating (" + stack + "):\n"
           "    assuming arn:aws:iam::111111111111:role/acme-network for vpc-0acme1\n"
           "    assuming arn:aws:iam::222222222222:role/globex-network in account 222222222222\n"
           "\x1b[31merror:\x1b[0m creating EC2 Route in rtb-0peer1 (sg-0peer1, vpc-0peer1): AccessDenied: "
           "User: arn:aws:sts::222222222222:assumed-role/globex-network/hubwright is not authorized\n")
    ref = history_store.put_detail(stack, run_id, detail_body(diff, log))
    made = RunRecord(id=run_id, stack=stack, cluster=f"{namespace}/{cluster}", operation="up",
                     cause=Cause.of("Mesh", "inputs changed (mesh group core: joined by a peer): 0a1b -> 2c3d", 2),
                     executor="runners", started=started, ended=started.replace(":00Z", ":42Z"), result="Failed",
                     reason="AccessDenied", message="creating route in rtb-0peer1 of account 222222222222: "
                     "AccessDenied for arn:aws:iam::222222222222:role/globex-network", changes={"create": 1},
                     detail=ref, known=known)
    history_store.append(made, keep=100)
    return made


def quiet_run(history_store: MemoryHistory, namespace: str, cluster: str, run_id: str, started: str) -> RunRecord:
    made = RunRecord(id=run_id, stack=f"{namespace}.{cluster}", cluster=f"{namespace}/{cluster}", operation="up",
                     cause=Cause.of("Create", "first update of the stack"), executor="local", started=started,
                     ended=started.replace(":00Z", ":09Z"), result="Succeeded", changes={"create": 5}, known=OWN)
    history_store.append(made, keep=100)
    return made


# --------------------------------------------------------------------------- the attack, first


def test_a_tenant_cannot_read_another_tenants_cluster_history(registry_api, fleet):
    apply_tenant_admin_role(fleet.kube)
    acme, ns_acme = fleet.tenant(f"acme-{fleet.suffix}")
    globex, ns_globex = fleet.tenant(f"globex-{fleet.suffix}")
    alice = fleet.user(ns_acme, "alice", cluster_role=TENANT_ADMIN_CLUSTERROLE)
    wait_until(lambda: registry_api.call("GET", f"/tenants/{acme}/clusters", alice).status_code == 200,
               what="alice's tenant-admin binding")
    mine = fleet.cluster(acme, ns_acme, alice)["id"]
    theirs = fleet.cluster(globex, ns_globex)["id"]
    secret_run = f"{ns_globex}.{theirs}-20240503-090000000-up-g10b"
    pair_run(store(registry_api), ns_globex, theirs, secret_run, "2024-05-03T09:00:00Z",
             known=("222222222222", "rtb-0peer1"))
    quiet_run(store(registry_api), ns_acme, mine, f"{ns_acme}.{mine}-20240501-120000000-up-ac01",
              "2024-05-01T12:00:00Z")

    theirs_path = RUNS.format(tenant=globex, cluster=theirs)
    never = (globex, ns_globex, theirs, secret_run, "globex-network", "222222222222", "rtb-0peer", "sg-0peer",
             "joined by a peer", "AccessDenied")
    for path in (theirs_path, f"{theirs_path}/{secret_run}", f"{theirs_path}?limit=1",
                 RUNS.format(tenant="t-never-made-000000", cluster=theirs)):
        response = registry_api.call("GET", path, alice)
        assert response.status_code == 403, (path, response.text)
        assert response.json() == {"detail": FORBIDDEN}, path
    # their cluster's name under her own tenant: her namespace holds no such HubCluster, and the store is not read
    for path in (RUNS.format(tenant=acme, cluster=theirs), RUNS.format(tenant=acme, cluster=theirs) + f"/{secret_run}"):
        response = registry_api.call("GET", path, alice)
        assert response.status_code == 404, (path, response.text)
        assert not any(word in response.text for word in never if word not in path), (path, response.text)
    # her own run in her own history is no key to theirs: the id is looked up in her stack's records only
    path = RUNS.format(tenant=acme, cluster=mine) + f"/{secret_run}"
    response = registry_api.call("GET", path, alice)
    assert response.status_code == 404 and not any(word in response.text for word in never if word not in path)
    # no token: 401
    assert registry_api.call("GET", theirs_path, None).status_code == 401
    # her own: readable
    body = registry_api.ok("GET", RUNS.format(tenant=acme, cluster=mine), alice)
    assert [item["id"] for item in body["items"]] == [f"{ns_acme}.{mine}-20240501-120000000-up-ac01"]
    assert not any(word in json.dumps(body) for word in never)


def test_a_pair_runs_text_names_nothing_of_the_peer_to_anyone(registry_api, fleet):
    apply_tenant_admin_role(fleet.kube)
    tenant, namespace = fleet.tenant()
    alice = fleet.user(namespace, "alice", cluster_role=TENANT_ADMIN_CLUSTERROLE)
    wait_until(lambda: registry_api.call("GET", f"/tenants/{tenant}/clusters", alice).status_code == 200,
               what="alice's tenant-admin binding")
    cluster = fleet.cluster(tenant, namespace, alice)["id"]
    made = pair_run(store(registry_api), namespace, cluster, f"{namespace}.{cluster}-20240503-090000000-up-p41r",
                    "2024-05-03T09:00:00Z")
    path = RUNS.format(tenant=tenant, cluster=cluster)
    for token in (alice, "admin"):  # the tenant's admin, and the hub's through the API: the same view
        for body in (registry_api.ok("GET", path, token), registry_api.ok("GET", f"{path}/{made.id}", token)):
            runs = body["items"] if "items" in body else [body["run"]]
            assert all(run["detail"] == made.detail.model_dump(mode="json") for run in runs)
            unhashed = [{**run, "detail": None} for run in runs]  # a SHA-256 is no ID (its digits may read as one)
            text = json.dumps({**body, "items": unhashed} if "items" in body else {**body, "run": unhashed[0]})
            for peer in PEER:
                assert peer not in text, (token == "admin", peer)
            assert set(ids_in(text)) <= set(OWN), set(ids_in(text)) - set(OWN)  # nothing beyond `known`
            assert "known" not in text
        detail = body["detail"]
        assert "rtb-0acme1" in json.dumps(detail["diff"]) and "arn:aws:iam::111111111111:role/acme-network" in \
            detail["log"]  # its own side stays
        assert "creating EC2 Route in rtb-[redacted] (sg-[redacted], vpc-[redacted])" in detail["log"]
        assert "[redacted account]" in detail["log"] and "arn:[redacted]" in body["run"]["message"]
        urns = [resource["urn"] for resource in detail["diff"]["resources"]]
        assert any(urn.endswith("::back-rtb-[redacted]") for urn in urns)
        assert history.RunDetail.model_validate(body).run.id == made.id


def hashes_like_an_account(stack: str) -> bytes:
    """A detail whose SHA-256 holds a run of 12 decimal digits, which the disclosure rule reads as an account ID."""
    for attempt in itertools.count():
        body = detail_body(StackDiff(stack, "unchanged", ()), f"attempt {attempt}\n")
        if ids_in(hashlib.sha256(body).hexdigest()):
            return body
    raise AssertionError("unreachable")


def test_a_runs_names_and_its_details_reference_reach_the_tenant_whole(registry_api, fleet):
    """Only text is redacted: a cluster named with 12 digits keeps its run ids, and the detail's SHA-256 stays one."""
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace, id="c-123456789012")["id"]
    stack, run_id = f"{namespace}.{cluster}", f"{namespace}.{cluster}-20240503-090000000-up-n4me"
    ref = store(registry_api).put_detail(stack, run_id, hashes_like_an_account(stack))
    store(registry_api).append(RunRecord(
        id=run_id, stack=stack, cluster=f"{namespace}/{cluster}", operation="up", cause=Cause.of("Spec", "spec"),
        executor="local", started="2024-05-03T09:00:00Z", ended="2024-05-03T09:00:01Z", result="Succeeded",
        message="account 123456789012", detail=ref), keep=10)
    path = RUNS.format(tenant=tenant, cluster=cluster)
    listed = history.RunList.model_validate(registry_api.ok("GET", path))
    assert [(item.id, item.stack, item.cluster) for item in listed.items] == [(run_id, stack, f"{namespace}/{cluster}")]
    assert listed.items[0].detail == ref and listed.items[0].message == "account [redacted account]"
    one = history.RunDetail.model_validate(registry_api.ok("GET", f"{path}/{run_id}"))
    assert one.run.detail == ref and one.detail is not None and one.detail.log.startswith("attempt ")


# --------------------------------------------------------------------------- reading


def test_the_runs_newest_first_and_one_run_with_its_detail(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    other = fleet.cluster(tenant, namespace)["id"]
    path = RUNS.format(tenant=tenant, cluster=cluster)
    assert registry_api.ok("GET", path) == {"stack": f"{namespace}.{cluster}", "items": []}  # none yet
    prefix = f"{namespace}.{cluster}"
    first = quiet_run(store(registry_api), namespace, cluster, f"{prefix}-20240501-120000000-up-aaaa",
                      "2024-05-01T12:00:00Z")
    third = pair_run(store(registry_api), namespace, cluster, f"{prefix}-20240503-090000000-up-cccc",
                     "2024-05-03T09:00:00Z")
    second = quiet_run(store(registry_api), namespace, cluster, f"{prefix}-20240502-120000000-up-bbbb",
                       "2024-05-02T12:00:00Z")
    quiet_run(store(registry_api), namespace, other, f"{namespace}.{other}-20240504-120000000-up-dddd",
              "2024-05-04T12:00:00Z")

    body = registry_api.ok("GET", path)
    listed = history.RunList.model_validate(body)
    assert listed.stack == f"{namespace}.{cluster}"
    assert [item.id for item in listed.items] == [third.id, second.id, first.id]
    newest = body["items"][0]
    assert (newest["operation"], newest["result"], newest["reason"], newest["executor"]) == \
        ("up", "Failed", "AccessDenied", "runners")
    assert newest["cause"] == {"kind": "Mesh", "message": "inputs changed (mesh group core: joined by a peer): "
                                                          "0a1b -> 2c3d", "generation": 2}
    assert newest["started"] == "2024-05-03T09:00:00Z" and newest["ended"] == "2024-05-03T09:00:42Z"
    assert newest["detail"]["key"] == detail_key(third.stack, third.id)
    assert [item["id"] for item in registry_api.ok("GET", f"{path}?limit=2")["items"]] == [third.id, second.id]
    assert registry_api.call("GET", f"{path}?limit=0").status_code == 422

    one = registry_api.ok("GET", f"{path}/{third.id}")
    assert one["run"] == newest
    assert (one["detail"]["logDropped"], one["detail"]["resourcesDropped"]) == (0, 0)
    assert [r["change"] for r in one["detail"]["diff"]["resources"]] == ["add", "replace", "update"]
    assert registry_api.ok("GET", f"{path}/{first.id}") == {"run": body["items"][2], "detail": None}

    missing = registry_api.call("GET", f"{path}/{prefix}-20990101-000000000-up-zzzz")
    assert missing.status_code == 404 and f"{prefix}-20990101-000000000-up-zzzz" in missing.json()["detail"]
    assert cluster in missing.json()["detail"]
    assert registry_api.call("GET", f"{path}/NOT_A_RUN").status_code == 422
    assert registry_api.call("GET", RUNS.format(tenant=tenant, cluster="c-missing")).status_code == 404


def test_a_store_that_fails_answers_502_without_its_reason(registry_api, fleet, caplog):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    made = pair_run(store(registry_api), namespace, cluster, f"{namespace}.{cluster}-20240503-090000000-up-bad1",
                    "2024-05-03T09:00:00Z")
    store(registry_api).objects[detail_key(made.stack, made.id)] = gzip.compress(b'{"log": "swapped"}')
    response = registry_api.call("GET", RUNS.format(tenant=tenant, cluster=cluster) + f"/{made.id}")
    assert response.status_code == 502 and response.json() == {"detail": history.UNREADABLE}
    assert "SHA-256" in caplog.text and made.id in caplog.text  # the administrator's log says why


def test_with_the_history_store_off_the_routes_say_so(registry_api, fleet):
    tenant, namespace = fleet.tenant()
    cluster = fleet.cluster(tenant, namespace)["id"]
    kept, registry_api.reg.history = registry_api.reg.history, None
    try:
        for path in (RUNS.format(tenant=tenant, cluster=cluster), RUNS.format(tenant=tenant, cluster=cluster) + "/r"):
            response = registry_api.call("GET", path)
            assert response.status_code == 404 and response.json() == {"detail": history.OFF}
    finally:
        registry_api.reg.history = kept


# --------------------------------------------------------------------------- the API command and its document


def test_the_api_command_opens_the_history_store_its_options_name(tmp_path, caplog):
    def opened(*flags: str):
        return store_from(build_parser("api").parse_args(["api", "--state-dir", str(tmp_path), *flags]), "api")
    assert opened("--history-store", "off") is None
    beside = opened("--history-store", "backend")
    assert beside is not None and beside.location == f"file://{tmp_path.resolve()}/.hubwright/history"
    named = opened("--history-store", f"file://{tmp_path}/runs")
    assert named is not None and named.location == f"file://{tmp_path}/runs"
    with pytest.raises(InvalidSpec) as refused:
        opened("--history-store", "gs://bucket")
    assert "--history-store" in str(refused.value)
    # The default on Pulumi Cloud, which keeps no objects of ours: off, and said (its console keeps the stack history).
    assert opened("--backend", "https://api.pulumi.com") is None
    assert "the run history is off" in caplog.text and "--history-store" in caplog.text


def test_the_openapi_document_describes_the_run_routes(registry_api):
    document = create_app(registry_api.reg, routers=serve.ROUTERS).openapi()  # the API command's routes
    validate(document)
    paths = document["paths"]
    listing = paths["/tenants/{tenant}/clusters/{cluster}/runs"]
    one = paths["/tenants/{tenant}/clusters/{cluster}/runs/{run}"]
    assert set(listing) == {"get"} and set(one) == {"get"}
    assert listing["get"]["responses"]["200"]["content"]["application/json"]["schema"] == \
        {"$ref": "#/components/schemas/RunList"}
    assert one["get"]["responses"]["200"]["content"]["application/json"]["schema"] == \
        {"$ref": "#/components/schemas/RunDetail"}
    assert listing["get"]["security"] == [{"kubernetesToken": []}]
    assert {"403", "404", "502"} <= set(one["get"]["responses"])
    schemas = document["components"]["schemas"]
    assert {"id", "operation", "cause", "started", "ended", "result", "changes", "detail"} <= \
        set(schemas["RunView"]["properties"])
    assert "known" not in schemas["RunView"]["properties"]
    assert {"diff", "log", "logDropped", "resourcesDropped"} == set(schemas["RunDetailView"]["properties"])
    assert set(schemas["Cause"]["properties"]) == {"kind", "message", "generation"}
