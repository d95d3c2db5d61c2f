"""`plan --hub-state`: the join stamps and claims a live hub recorded decide the order where the files carry none
(stacks/hub_state.py), read from a file `kubectl get hubclusters -A -o json` wrote, or from the real API server.

Two members the hub joined in the order c2, then c1: the later joiner owns their pair. The files carry no stamps,
so without the hub's records the fallback (namespace/name) gives the pair to c2's stack; with them, as the hub will
run it, to c1's.
"""
from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from doubles.factories import hub_doc
from stacks.names import CLUSTERS, GROUP, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.test_plan_diff_property import cluster, plan, write

PAIR = "mesh-acme.c1+acme.c2"


def _owner(doc: dict) -> str:
    """The stack that holds the pair's peering."""
    [owner] = [s["stack"] for s in doc["stacks"] for r in s["resources"]
               if r["name"] == PAIR and r["type"].endswith("/vpcPeeringConnection:VpcPeeringConnection")]
    return owner


def _listed(stamps: dict[str, int]) -> dict:
    """What `kubectl get hubclusters -A -o json` prints of a hub holding these clusters (and what else it holds)."""
    items = []
    for name, order in stamps.items():
        doc = cluster(int(name[1:]), "acme", True, False)
        doc["status"] = {"meshJoin": {"group": "g1", "order": order}, "conditions": [], "outputs": {"x": 1}}
        items.append(doc)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_the_hubs_recorded_join_order_decides_who_owns_a_pair(capsys, tmp_path):
    (tmp_path / "clusters").mkdir()
    write(tmp_path, hub_doc(), {1: cluster(1, "acme", True, False), 2: cluster(2, "acme", True, False)})
    cache = str(tmp_path / "cache")
    assert _owner(json.loads(plan(capsys, tmp_path, "--format", "json", "--cache", cache))) == "acme.c2"
    (tmp_path / "hub-state.json").write_text(json.dumps(_listed({"c2": 1, "c1": 2})))
    code_out = plan(capsys, tmp_path, "--format", "json", "--cache", cache, "--hub-state",
                    str(tmp_path / "hub-state.json"))
    assert _owner(json.loads(code_out)) == "acme.c1"  # as the hub will run it
    # The same files again, with and without the hub's records: no cached answer of the other kind is replayed.
    assert _owner(json.loads(plan(capsys, tmp_path, "--format", "json", "--cache", cache))) == "acme.c2"
    assert _owner(json.loads(plan(capsys, tmp_path, "--format", "json", "--cache", cache, "--hub-state",
                                  str(tmp_path / "hub-state.json")))) == "acme.c1"


def test_a_hub_state_file_that_is_not_hubclusters_is_refused_by_name(capsys, tmp_path):
    from automation.cli import main
    (tmp_path / "clusters").mkdir()
    write(tmp_path, hub_doc(), {1: cluster(1, "acme", True, False)})
    (tmp_path / "state.json").write_text(json.dumps({"kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}]}))
    code = main(["plan", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--hub-state", str(tmp_path / "state.json"), "--policy", "off", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2 and f"--hub-state {tmp_path / 'state.json'}: items[0]: not a HubCluster (kind 'Secret'" in err


@pytest.mark.live
def test_the_live_hub_is_read_through_the_kubeconfig(capsys, tmp_path, kube_apiserver, monkeypatch):  # noqa: F811
    api = kube_apiserver.api_client()
    ns = "acme"
    core = client.CoreV1Api(api)
    if not any(n.metadata.name == ns for n in core.list_namespace().items):
        core.create_namespace({"metadata": {"name": ns}})
    custom = client.CustomObjectsApi(api)
    suffix = uuid.uuid4().hex[:4]
    made = []
    for name, order in (("c2", 1), ("c1", 2)):
        doc = cluster(int(name[1:]), ns, True, False)
        doc["metadata"]["name"] = f"{name}{suffix}"
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, doc)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, CLUSTERS, doc["metadata"]["name"], {
            "status": {"meshJoin": {"group": "g1", "order": order}}})
        made.append(doc)
    try:
        (tmp_path / "clusters").mkdir()
        write(tmp_path, hub_doc(), {1: made[1], 2: made[0]})
        # Where the client library looks ($KUBECONFIG, read when it is first imported: earlier in this process).
        monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION",
                            str(kube_apiserver.kubeconfig()))
        doc = json.loads(plan(capsys, tmp_path, "--format", "json", "--no-cache", "--hub-state", "kube"))
        [owner] = [s["stack"] for s in doc["stacks"] for r in s["resources"]
                   if r["type"].endswith("/vpcPeeringConnection:VpcPeeringConnection")]
        assert owner == f"acme.c1{suffix}"  # the later joiner, by the hub's stamps (the names say c2 last)
    finally:
        for d in made:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, d["metadata"]["name"])
        api.close()
