"""Status that heals (#32 item 6), on the real kube-apiserver: every condition is recomputed when its cause goes
away, and `status.observedGeneration` follows `metadata.generation` on every event the service handles, a
refusal or a cluster with no stack included. Each stuck case found is a test here.
"""
from __future__ import annotations

import re

import pytest
from kubernetes.client.rest import ApiException

from doubles.engine import RecordingEngine
from doubles.kubectl import against
from stacks.errors import NeedsAttention
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.factories import OWNER_ANNOTATION
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import DEFAULT_REGION_ANNOTATION, GROUP, VERSION


@pytest.fixture
def env(kube_apiserver):  # noqa: F811 - the fixture
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    yield env
    try:
        env.custom.delete_cluster_custom_object(GROUP, VERSION, "hubconfigs", env.hub_name)
    except ApiException as exc:
        if exc.status != 404:
            raise
    env.api_client.close()


def running(env: ServiceEnv, engine, **options):
    return env.running(engine, watch_namespace=env.ns, **options)


def registered(env: ServiceEnv, name: str = "inventory-1") -> dict:
    """A registered-only HubCluster: no AWS part, so no stack."""
    doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster", "metadata": {"name": name, "namespace": env.ns},
           "spec": {"displayName": "Payments EU", "facts": {"team": "payments"}}}
    return env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", doc)


def settled(env: ServiceEnv, name: str, reason: str, ready: str = "True") -> dict | None:
    """The cluster, once its Ready condition says `ready` for `reason` and observedGeneration is its generation
    (at the top and on every condition)."""
    obj = env.get(name) or {}
    status = obj.get("status") or {}
    generation = obj["metadata"]["generation"]
    cond = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
    if cond is None or cond["status"] != ready or cond["reason"] != reason:
        return None
    if status.get("observedGeneration") != generation:
        return None
    if any(c.get("observedGeneration") != generation for c in status["conditions"]):
        return None
    return obj


def delete_hub(env: ServiceEnv) -> dict:
    hub = env.custom.get_cluster_custom_object(GROUP, VERSION, "hubconfigs", env.hub_name)
    env.custom.delete_cluster_custom_object(GROUP, VERSION, "hubconfigs", env.hub_name)
    return hub


def stalled_for_the_hub(env: ServiceEnv, name: str) -> bool:
    stalled = env.condition(name, "Stalled")
    return bool(stalled and stalled["status"] == "True" and stalled["reason"] == "HubConfigNotFound")


def test_a_registered_only_cluster_heals_when_its_hubconfig_comes_back(env):
    engine = RecordingEngine()
    registered(env)
    with running(env, engine):
        wait_until(lambda: settled(env, "inventory-1", "Registered"), what="the registered-only cluster Ready")
        delete_hub(env)
        wait_until(lambda: stalled_for_the_hub(env, "inventory-1"), what="Stalled HubConfigNotFound")
        env.hub()
        healed = wait_until(lambda: settled(env, "inventory-1", "Registered"), what="healed once the hub is back")
        assert {c["type"]: c["status"] for c in healed["status"]["conditions"]} == \
            {"Ready": "True", "Reconciling": "False", "Stalled": "False"}
        assert healed["status"].get("stack") is None and healed["status"].get("inputsHash") is None
    assert engine.calls == []  # a registered-only cluster never has a stack


def test_a_spec_change_while_stalled_moves_observed_generation(env):
    registered(env)
    delete_hub(env)
    with running(env, RecordingEngine()):
        wait_until(lambda: stalled_for_the_hub(env, "inventory-1"), what="Stalled HubConfigNotFound")
        env.patch("inventory-1", {"spec": {"displayName": "Payments EU (renamed)"}})
        wait_until(lambda: settled(env, "inventory-1", "HubConfigNotFound", ready="False"),
                   what="observedGeneration following the spec while stalled")
        env.hub()
        wait_until(lambda: settled(env, "inventory-1", "Registered"), what="healed")
        env.patch("inventory-1", {"spec": {"displayName": "Payments EU (again)"}})
        obj = wait_until(lambda: settled(env, "inventory-1", "Registered"), what="observedGeneration following")
        assert obj["metadata"]["generation"] == 3


def test_a_cluster_stalled_before_a_restart_heals_after_it(env):
    """The hub comes back while no service runs: the next one heals what the last one left Stalled."""
    engine = RecordingEngine()
    registered(env)
    env.create("prod-1")
    delete_hub(env)
    with running(env, engine):
        wait_until(lambda: stalled_for_the_hub(env, "inventory-1") and stalled_for_the_hub(env, "prod-1"),
                   what="both Stalled HubConfigNotFound")
    env.hub()
    with running(env, engine):
        wait_until(lambda: settled(env, "inventory-1", "Registered"), what="the registered-only cluster healed")
        wait_until(lambda: settled(env, "prod-1", "Succeeded"), what="the cluster with a stack healed")
    with running(env, engine):  # and a third start leaves them so
        wait_until(lambda: settled(env, "inventory-1", "Registered") and settled(env, "prod-1", "Succeeded"),
                   what="still healed")


# --------------------------------------------------------------------------- ACCOUNT and REGION of a stalled cluster

def columns(kube_apiserver, env: ServiceEnv, name: str) -> dict[str, str]:  # noqa: F811 - the fixture
    """`kubectl get hubclusters` as a user types it: the printer columns of one row, by header."""
    out = against(kube_apiserver)("get", "hubclusters", "-n", env.ns, name).stdout
    header, row = out.splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"\S+", header)] + [None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, starts[1:])}


def test_a_stalled_cluster_shows_its_account_and_region(env, kube_apiserver):  # noqa: F811 - the fixture
    """They are facts of the input (spec.accountID; the region its annotations, its namespace's default or its spec
    give), not of a run: a refused cluster, and one whose preflight stops it before any run, show them too."""
    env.core.patch_namespace(env.ns, {"metadata": {"annotations": {  # no owner: NamespaceNotOwned
        OWNER_ANNOTATION: None, DEFAULT_REGION_ANNOTATION: "eu-west-1"}}})
    env.create("refused", accountID="222222222222", region=None)  # its namespace default is its region

    def denied(applied, desired):
        if desired.name == "denied":
            raise NeedsAttention("AssumeRole was refused (simulated)", reason="AssumeRoleFailed")

    with running(env, RecordingEngine(), guards=[denied]):
        wait_until(lambda: settled(env, "refused", "NamespaceNotOwned", ready="False"), what="refused")
        row = columns(kube_apiserver, env, "refused")
        assert (row["ACCOUNT"], row["REGION"], row["READY"], row["REASON"]) == \
            ("222222222222", "eu-west-1", "False", "NamespaceNotOwned"), row

        env.core.patch_namespace(env.ns, {"metadata": {"annotations": {
            OWNER_ANNOTATION: "333333333333", DEFAULT_REGION_ANNOTATION: None}}})
        env.create("denied", accountID="333333333333", region="eu-west-1")
        wait_until(lambda: env.reason("denied") == "AssumeRoleFailed", what="stopped by its preflight")
        row = columns(kube_apiserver, env, "denied")
        assert (row["ACCOUNT"], row["REGION"], row["READY"]) == ("333333333333", "eu-west-1", "False"), row
        assert env.get("denied")["status"].get("lastUpdate", {}).get("result") == "Failed"


def test_a_refusal_written_by_an_older_service_is_recomputed_at_start(env):
    """A Stalled status without ACCOUNT and REGION (as services before this one wrote it) is not left as it is
    because the reason still holds: at start every field of a refusal is recomputed, with no new Event."""
    env.core.patch_namespace(env.ns, {"metadata": {"annotations": {OWNER_ANNOTATION: None}}})
    env.create("refused")
    with running(env, RecordingEngine()):
        wait_until(lambda: settled(env, "refused", "NamespaceNotOwned", ready="False"), what="refused")
    env.patch_status("refused", {"account": None, "region": None})
    warnings = [e for e in env.events(name="refused") if e[1] == "NamespaceNotOwned"]
    with running(env, RecordingEngine()):
        wait_until(lambda: (env.get("refused")["status"].get("account"), env.get("refused")["status"].get("region"))
                   == ("222222222222", "us-east-1"), what="the account and region written again")
    assert [e for e in env.events(name="refused") if e[1] == "NamespaceNotOwned"] == warnings
