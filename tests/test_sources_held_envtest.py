"""The condition `hubwright.io/SourceHeld` on a source object our finalizer holds (issue #47), on the real service
and a real kube-apiserver with Cluster API's and Hive's real CRDs, read with the real kubectl: True while it waits,
naming what for; False once released, on an object that stays (another project's finalizer, or an opt-out);
removed when the source is taken again; the other project's own conditions never lost (stacks.sources.held)."""
from __future__ import annotations

import json
import subprocess
import uuid

import time
from typing import Any, Callable

import pytest
from kubernetes import client

from automation.adapters.kube.objects import KubeObjects
from automation.kit.finalizers import ensure_finalizer
from automation.kit.objects import ApiError, Conflict
from automation.service.sources import kind_of, write_conditions
from doubles.engine import RecordingEngine
from doubles.service_env import ServiceEnv, wait_until
from doubles.sources import aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc
from stacks.names import ENABLED_ANNOTATION, SOURCE_FINALIZER
from stacks.sources.held import HELD_CONDITION
from stacks.sources.kinds import CAPI_CLUSTER, CLUSTER_DEPLOYMENT
from stacks.sources.watched import rules
from tests.envtest import kube_apiserver_alone  # noqa: F401 - the fixture
from tests.registry_rbac import bind_cluster_role, sa_subject, service_account_token
from tests.test_sources_envtest import (Cloud, api, create, delete, get, kubectl_dir, patch,  # noqa: F401 - fixtures
                                        run_doc)

CAPI_OWN = "cluster.cluster.x-k8s.io"  # Cluster API's own finalizer: the object outlives ours
THEIRS = {"type": "Available", "status": "False", "reason": "NotAvailable", "message": "control plane not ready",
          "lastTransitionTime": "2026-11-01T00:00:00Z"}
HIVES = {"type": "ProvisionFailed", "status": "False", "reason": "ProvisionSucceeded", "message": "ok",
         "lastTransitionTime": "2026-11-01T00:00:00Z"}
RESOURCE = {"Cluster": "clusters.cluster.x-k8s.io", "ClusterDeployment": "clusterdeployments.hive.openshift.io"}


@pytest.fixture(scope="module")
def kubectl(kubectl_dir):
    """The real kubectl against this module's API server: its output."""
    def run(*args: str) -> str:
        done = subprocess.run([str(kubectl_dir / "kubectl"), *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout
    return run


def held(kubectl, kind: str, ns: str, name: str) -> tuple[str, str, str] | None:
    """(status, reason, message) of our condition as `kubectl get` shows it; None: none."""
    path = f'{{.status.conditions[?(@.type=="{HELD_CONDITION}")]}}'
    out = kubectl("get", RESOURCE[kind], name, "-n", ns, "-o", f"jsonpath={path}")
    if not out.strip():
        return None
    cond = json.loads(out)
    return cond["status"], cond["reason"], cond["message"]


def eventually(call: Callable[[], Any], timeout: float = 10.0) -> Any:
    """`call()` once RBAC has caught up: retried while the object port says 403 (RBAC changes take a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ApiError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def types(api, kind: str, ns: str, name: str) -> list[str]:
    return [c["type"] for c in ((get(api, kind, ns, name) or {}).get("status") or {}).get("conditions") or []]


def test_a_deleted_cluster_says_what_holds_it_and_that_it_was_released_while_cluster_api_still_holds_it(
        api, kubectl, kubectl_dir):
    env = ServiceEnv.isolated(api)
    ns = env.ns
    cloud, engine = Cloud(), RecordingEngine()
    cloud.add("vpc-0web1", "10.20.0.0/16", "w1")
    with env.running(engine, discovery=cloud, sources="capi", watch_namespace=ns):
        create(api, aws_cluster_doc("web-1", ns, vpc="vpc-0web1", cidr="10.20.0.0/16", tag="w1",
                                    node_group="sg-0w1node"))
        doc = capi_cluster_doc("web-1", ns)
        doc["metadata"]["finalizers"] = [CAPI_OWN]
        doc["status"] = {"conditions": [THEIRS]}
        create(api, doc)
        wait_until(lambda: env.ready("web-1"), 30, what="HubCluster web-1 Ready")
        assert held(kubectl, "Cluster", ns, "web-1") is None  # taken, not held: nothing said

        gate = engine.gate(f"{ns}.web-1")  # its destroy waits: the Cluster is held for its HubCluster
        delete(api, "Cluster", ns, "web-1")
        said = wait_until(lambda: held(kubectl, "Cluster", ns, "web-1"), 30, what="the hold on the Cluster")
        assert said[:2] == ("True", "WaitingForPeers") and f"HubCluster {ns}/web-1" in said[2], said
        assert SOURCE_FINALIZER in said[2] and "HubConfig spec.sources.releaseAfter" in said[2]
        assert "Available" in types(api, "Cluster", ns, "web-1")  # Cluster API's own condition kept
        # docs/sources.md's command, as written, shows it
        assert run_doc(kubectl_dir, "Seeing what holds a source", NAME="web-1", NS=ns) == said[2]

        gate.set()
        wait_until(lambda: SOURCE_FINALIZER not in (get(api, "Cluster", ns, "web-1") or {})["metadata"].get(
            "finalizers", []), 30, what="our finalizer released")
        status, reason, message = held(kubectl, "Cluster", ns, "web-1") or ("", "", "")
        assert (status, reason) == ("False", "Released") and "released" in message  # true while CAPI still holds it
        assert types(api, "Cluster", ns, "web-1") == ["Available", HELD_CONDITION]
        assert engine.count("destroy", f"{ns}.web-1") == 1
        patch(api, "Cluster", ns, "web-1", {"metadata": {"finalizers": None}})  # Cluster API's part, done
        wait_until(lambda: get(api, "Cluster", ns, "web-1") is None, 30, what="Cluster web-1 gone")


def test_an_opted_out_clusterdeployment_is_held_then_released_and_taken_again_without_the_condition(api, kubectl):
    env = ServiceEnv.isolated(api)
    ns = env.ns
    cloud, engine = Cloud(), RecordingEngine()
    cloud.add("vpc-0ocp1", "10.40.0.0/16", "o1", infra_id="ocp-1-x7k2p", nlb="ocp-1-x7k2p-int")
    with env.running(engine, discovery=cloud, sources="hive", watch_namespace=ns):
        doc = cluster_deployment_doc("ocp-1", ns, privatelink=True)
        doc["status"] = {"conditions": [HIVES]}
        create(api, doc)
        wait_until(lambda: env.ready("ocp-1"), 30, what="HubCluster ocp-1 Ready")

        gate = engine.gate(f"{ns}.ocp-1")
        patch(api, "ClusterDeployment", ns, "ocp-1", {"metadata": {"annotations": {ENABLED_ANNOTATION: None}}})
        said = wait_until(lambda: held(kubectl, "ClusterDeployment", ns, "ocp-1"), 30, what="the hold")
        assert said[:2] == ("True", "WaitingForPeers") and f"HubCluster {ns}/ocp-1" in said[2], said
        assert types(api, "ClusterDeployment", ns, "ocp-1") == ["ProvisionFailed", HELD_CONDITION]  # Hive's kept

        gate.set()
        wait_until(lambda: (held(kubectl, "ClusterDeployment", ns, "ocp-1") or ("",))[0] == "False", 30,
                   what="the release said")
        wait_until(lambda: not (get(api, "ClusterDeployment", ns, "ocp-1") or {})["metadata"].get("finalizers"), 30,
                   what="our finalizer gone")
        assert env.get("ocp-1") is None and engine.count("destroy", f"{ns}.ocp-1") == 1

        patch(api, "ClusterDeployment", ns, "ocp-1", {"metadata": {"annotations": {ENABLED_ANNOTATION: "true"}}})
        wait_until(lambda: env.get("ocp-1") is not None, 30, what="HubCluster ocp-1 again")
        wait_until(lambda: held(kubectl, "ClusterDeployment", ns, "ocp-1") is None, 30, what="the condition removed")
        assert types(api, "ClusterDeployment", ns, "ocp-1") == ["ProvisionFailed"]


def test_the_services_rules_write_the_condition_and_a_stale_copy_is_refused_never_written_over(
        api, kube_apiserver_alone):  # noqa: F811 - the fixture
    """As a ServiceAccount holding exactly the sources controller's rules: the condition is written on both kinds'
    status subresource; written from a copy read before another writer's change, it is refused (409), so the
    other project's write is never lost."""
    suffix = uuid.uuid4().hex[:6]
    ns = f"held-rbac-{suffix}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    bind_cluster_role(api, f"hubwright-sources-{suffix}", rules(), [sa_subject(ns, "service")])
    service = KubeObjects(kube_apiserver_alone.api_client(service_account_token(api, ns, "service")))
    for kind, doc, theirs in ((CAPI_CLUSTER, capi_cluster_doc("web-1", ns), THEIRS),
                              (CLUSTER_DEPLOYMENT, cluster_deployment_doc("ocp-1", ns), HIVES)):
        doc["status"] = {"conditions": [theirs]}
        made = create(api, doc)
        ours = {"type": HELD_CONDITION, "status": "True", "reason": "WaitingForPeers", "message": "held",
                "lastTransitionTime": "2026-11-29T00:00:00Z"}
        written = eventually(lambda: write_conditions(service, kind, made, [theirs, ours]))
        assert [c["type"] for c in written["status"]["conditions"]] == [theirs["type"], HELD_CONDITION]
        with pytest.raises(Conflict) as refused:
            write_conditions(service, kind, made, [ours])  # `made` is stale now: it would drop theirs
        assert refused.value.status == 409
        assert ensure_finalizer(service, kind_of(kind), written, SOURCE_FINALIZER) is not None

