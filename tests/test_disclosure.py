"""What a mesh member may know of its peer (stacks.disclosure, docs/security.md): what its own stack's inputs hold of
its own side, no more; and the service's run gate (automation.service.runs.Runs) hands a cluster's callers the text
redacted so, its run log line keeping the whole. Pure and fast; the real engine's text: test_peer_disclosure_live.py.

globex/c01 joins group core after acme/c00, so its stack owns the pair: its inputs (in the run's Secret) hold
acme/c00's account, role, VPC, route table and security group; its tenant reads its HubCluster, its runs and its
Events."""
from __future__ import annotations

import logging

import pytest
from kubernetes import client

from automation.adapters.engine import EngineError, PolicyViolation, RunResult
from automation.adapters.kube.stackruns import Held
from automation.adapters.logs import FIELDS
from automation.runner.runner import Job, Runner
from automation.service.executor import RunnerEngine
from automation.service.runs import Runs
from components.controlplane import TENANT_RULES, VIEWER_RULES
from stacks.admission import tenant_admin_clusterrole
from stacks.disclosure import known_to, redact
from stacks.names import HUBCONFIGS
from stacks.resolve import resolve_fleet
from doubles.engine import RecordingEngine
from doubles.factories import fleet
from doubles.runners import SERVICE_NAMESPACE
from tests.test_mesh import group, hub

STACK = "globex.c01"

PEER = {"account": "222222222222", "role": "arn:aws:iam::222222222222:role/hubwright", "vpc": "vpc-0c00",
        "table": "rtb-000a", "group": "sg-000"}  # acme/c00, as globex/c01's inputs hold it
OWN = {"account": "333333333333", "role": "arn:aws:iam::333333333333:role/hubwright", "vpc": "vpc-0c01",
       "tables": ("rtb-001a", "rtb-001b"), "group": "sg-001"}

# What the engine says of a pair whose peer side failed (the shape of the real engine's lines: the AWS provider's
# error for a route in the peer's table, the policy pack naming the peer's tables, a provider named for the peer's
# account), with globex/c01's own IDs and CIDRs beside them.
ENGINE_TEXT = (
    "up globex.c01: error: creating Route in Route Table (rtb-000a) with destination (10.1.0.0/16): operation "
    "error EC2: CreateRoute, api error InvalidRouteTableID.NotFound: The routeTable ID 'rtb-000a' does not exist | "
    "error: AccessDenied: User: arn:aws:sts::111111111111:assumed-role/hubwright-hub/hubwright-mesh-globex.c01 is "
    "not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::222222222222:role/hubwright. | "
    "peerings-routed-both-sides (pulumi-python:dynamic/ec2:VpcPeeringConnection: mesh-acme.c00+globex.c01): "
    "acme/c00's route tables rtb-000a have no route to globex/c01 (10.1.0.0/16); provider aws-222222222222-us-east-1; "
    "the peer's vpc-0c00 and sg-000 and its VPN gateway vgw-0a1b2c3d4e5f60718; "
    "ours: rtb-001a, rtb-001b, sg-001, vpc-0c01 in 333333333333 (arn:aws:iam::333333333333:role/hubwright)")


@pytest.fixture(scope="module")
def owner():
    inputs = resolve_fleet(fleet(hub(), tuple(group(2))))["globex/c01"]
    [pair] = inputs.mesh.pairs
    assert (pair.peer.key, pair.peer.target.account_id, pair.peer.route_table_ids) == (
        "acme/c00", PEER["account"], (PEER["table"],))  # the inputs do hold the peer (they stay in the Secret)
    return inputs


def test_a_member_knows_its_own_side_and_the_hubs_and_nothing_of_its_peer(owner):
    known = known_to(owner)
    assert {OWN["account"], OWN["role"], OWN["vpc"], *OWN["tables"], OWN["group"]} <= known
    assert {"111111111111", "arn:aws:iam::111111111111:role/hubwright-hub"} <= known  # the hub, which it trusts
    assert not set(PEER.values()) & known
    assert known_to(None) == frozenset()


def test_every_id_of_the_peer_and_every_id_no_input_holds_is_redacted_and_the_rest_stays(owner):
    shown = redact(ENGINE_TEXT, known_to(owner))
    for value in (*PEER.values(), "vgw-0a1b2c3d4e5f60718", "arn:aws:sts::111111111111:assumed-role"):
        assert value not in shown, value
    assert "aws-[redacted account]-us-east-1" in shown and "Route Table (rtb-[redacted])" in shown
    assert "on resource: arn:[redacted]." in shown
    for kept in (*OWN["tables"], OWN["group"], OWN["vpc"], OWN["account"], OWN["role"], "10.1.0.0/16",
                 "mesh-acme.c00+globex.c01", "acme/c00", "InvalidRouteTableID.NotFound", "peerings-routed-both-sides"):
        assert kept in shown, kept
    assert redact(shown, known_to(owner)) == shown  # idempotent: the service redacts what a runner redacted


def test_names_that_only_look_like_ids_stay_and_the_known_ids_are_asked_for_only_when_there_is_one():
    asked = []

    def known():
        asked.append(1)
        return frozenset()
    text = "mesh-a.x+b.y-globex.c01-mesh-sg-tcp-443-443 and sg-all: 1 to create, 12345678901 resources"
    assert redact(text, known) == text and asked == []
    assert redact("pcx-0a1b2c3d and tgw-attach-0f1e2d3c4b5a69788", known) == "pcx-[redacted] and tgw-attach-[redacted]"
    assert asked == [1]


def test_the_service_gate_logs_the_whole_text_and_hands_the_cluster_the_redacted_one(owner, caplog):
    """Runs.run with `shown_to`: a failure comes back as the same error class and reason with its text redacted, a
    result with its message and drifted names redacted; the run's log line (the hub administrator's) keeps it all."""
    runs = Runs()

    def failing() -> RunResult:
        raise PolicyViolation(ENGINE_TEXT)
    with caplog.at_level(logging.WARNING, logger="hubwright.run"), pytest.raises(EngineError) as caught:
        runs.run("up", failing, stack="globex.c01", cluster="globex/c01", shown_to=lambda: known_to(owner))
    assert type(caught.value) is PolicyViolation and caught.value.reason == "PolicyViolation"
    assert PEER["table"] not in str(caught.value) and OWN["tables"][0] in str(caught.value)
    [line] = [r for r in caplog.records if r.name == "hubwright.run"]
    logged = getattr(line, FIELDS)["error"]
    assert PEER["table"] in logged and PEER["role"] in logged

    drifted = RunResult("preview", False, message=f"changes expected: mesh-acme.c00+globex.c01-{PEER['table']}",
                        drifted=[f"mesh-acme.c00+globex.c01-{PEER['table']} (aws:ec2/route:Route)"])
    out = runs.run("preview", lambda: drifted, stack="globex.c01", cluster="globex/c01", shown_to=known_to(owner))
    assert out.message == "changes expected: mesh-acme.c00+globex.c01-rtb-[redacted]"
    assert out.drifted == ["mesh-acme.c00+globex.c01-rtb-[redacted] (aws:ec2/route:Route)"]
    # without `shown_to` (a transit stack's runs: the HubConfig and the service's namespace, the administrator's)
    assert runs.run("preview", lambda: drifted, stack="_tgw_111111111111") is drifted


def test_a_runner_redacts_the_status_message_of_a_run_beside_its_cluster_and_of_no_run_in_the_services_namespace(
        owner):
    """Runner._shown, what a run's status.message says: a run in the tenant's namespace is redacted by the inputs the
    engine was given (up, preview) or, when it had none (destroy, recover), by the stack's last applied inputs; a run
    in the service's namespace (a transit stack's) keeps the whole text. The real engine and API server:
    test_peer_disclosure_live.py."""
    engine = RecordingEngine()
    runner = Runner(client.ApiClient(), engine, namespace=SERVICE_NAMESPACE)

    def job(namespace: str, stack: str, inputs=None) -> Job:
        raw = {"metadata": {"namespace": namespace, "name": f"{stack}-run"}}
        return Job(held=Held(None, raw, "r"), stack=stack, operation="up", takeover_of=None, handed_back=False,
                   previous_runner=None, last_sent=0.0, claim_version=1, inputs=inputs)
    assert runner._shown(job("globex", STACK, owner), ENGINE_TEXT) == redact(ENGINE_TEXT, known_to(owner))
    assert runner._shown(job("globex", STACK), ENGINE_TEXT) == redact(ENGINE_TEXT, frozenset())  # nothing applied
    engine.stacks[STACK] = owner  # what a successful up applied
    assert runner._shown(job("globex", STACK), ENGINE_TEXT) == redact(ENGINE_TEXT, known_to(owner))
    assert runner._shown(job(SERVICE_NAMESPACE, "_tgw_111111111111"), ENGINE_TEXT) == ENGINE_TEXT


def test_the_transit_stacks_text_is_the_hub_administrators_alone():
    """Ruled out (issue 45), so a transit stack's text stays whole: its runs live in the service's namespace, its
    lastUpdate in the HubConfig's status.mesh.transit and its Events on the HubConfig (cluster-scoped: they land in
    `default`); no role a tenant is given (its namespace's edit, admin, view, a tenant admin's) reads HubConfigs, and
    Secrets, Events and runs are read in the tenant's own namespace only. Its inputs are every member's: there is no
    one tenant to redact them for."""
    engine = RunnerEngine(client.ApiClient(), local=RecordingEngine(), namespace=SERVICE_NAMESPACE)
    assert engine.where("_tgw_111111111111") == (SERVICE_NAMESPACE, None)
    assert engine.where(STACK) == ("globex", "c01")
    for rules in (TENANT_RULES, VIEWER_RULES, tenant_admin_clusterrole()["rules"]):
        assert not [r for r in rules if any(res.partition("/")[0] == HUBCONFIGS for res in r["resources"])], rules
