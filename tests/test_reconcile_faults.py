"""Issue #14: the service under faults. Each test names the problem it reproduces; each failed on the code
before the error classes (stacks.errors), the reconcile request and the drift condition.

The API server is kmock's emulator (doubles.MockKubeAPI), the engine the recording double; AWS is moto in
server mode, reached through a TCP proxy that can refuse connections (a network blip, for real).
"""
from __future__ import annotations

import logging
import threading

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError, ReadTimeoutError

from automation.adapters.aws.sessions import AwsSessions, transient
from automation.adapters.engine import EngineError
from automation.adapters.aws.preflight import Preflight
from stacks.errors import NeedsAttention
from stacks.names import DRIFT_CHECK_REQUEST_ANNOTATION, RECONCILE_REQUEST_ANNOTATION
from doubles.engine import RecordingEngine
from doubles.history import MemoryHistory
from doubles.kube import CuttableProxy
from doubles.service_env import on_kmock, wait_until
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _base, _nlb


@pytest.fixture
def env():
    with on_kmock() as env:
        yield env


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "AssumeRole")


# --- 1. one rule decides what is transient ------------------------------------------------------------------

@pytest.mark.parametrize("error, expected", [
    (_client_error("Throttling", 400), True),
    (_client_error("RequestLimitExceeded", 503), True),
    (_client_error("ExpiredToken", 400), True),
    (_client_error("InternalError", 500), True),
    (_client_error("SomethingNew", 502), True),  # any 5xx
    (_client_error("AccessDenied", 403), False),
    (_client_error("InvalidClientTokenId", 403), False),
    (_client_error("ValidationError", 400), False),  # an unknown 4xx needs a person: retrying only hides it
    (EndpointConnectionError(endpoint_url="https://sts.amazonaws.com"), True),
    (ReadTimeoutError(endpoint_url="https://sts.amazonaws.com"), True),
    (NoCredentialsError(), False),
])
def test_transient_is_the_one_rule_for_aws_failures(error, expected):
    assert transient(error) is expected


def test_a_network_blip_on_assume_role_is_retried_not_stalled(moto, env):
    """Problem 1: one connection failure left the cluster Stalled/AssumeRoleFailed until a restart."""
    _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")  # the installer's NLB is there
    proxy = CuttableProxy(int(moto.url.rsplit(":", 1)[1]))
    proxy.refuse()  # AWS unreachable: every connection is turned away
    sessions = AwsSessions(base=_base(), endpoint_url=proxy.url)
    engine = RecordingEngine()
    env.create("prod-1", infraID="prod-1-x7k2p")
    try:
        with env.running(engine, guards=[Preflight(sessions)], backoff_base=0.2, backoff_cap=0.4):
            # The hub's own credentials are checked first (GetCallerIdentity), then each role is assumed.
            wait_until(lambda: env.reason("prod-1") in ("AwsUnreachable", "AssumeRoleUnavailable"),
                       what="the transient failure")
            reconciling, stalled = env.condition("prod-1", "Reconciling"), env.condition("prod-1", "Stalled")
            assert (reconciling["status"], stalled["status"]) == ("True", "False")
            assert "retrying with backoff" in reconciling["message"] and engine.calls == []
            proxy.accept()  # the network is back: no restart, no input change
            wait_until(lambda: env.ready("prod-1"), 20, what="Ready once AWS answers again")
    finally:
        proxy.close()
    assert [c.operation for c in engine.calls] == ["up"]


def test_an_assume_role_refusal_stalls_and_is_looked_at_again_without_an_input_change(env):
    """Needs a human, but may heal: Stalled, rechecked every --stalled-recheck (not a backoff loop, not forever)."""
    refusals = threading.Semaphore(2)  # the role's trust policy is fixed after two looks

    def guard(applied, desired):
        if refusals.acquire(blocking=False):
            raise NeedsAttention(f"HubCluster {desired.key}: spec.accountID: AssumeRole was refused: AccessDenied",
                                 reason="AssumeRoleFailed")

    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine, guards=[guard], stalled_recheck=0.5, backoff_base=5, backoff_cap=10):
        wait_until(lambda: env.reason("prod-1") == "AssumeRoleFailed", what="AssumeRoleFailed")
        stalled = env.condition("prod-1", "Stalled")
        assert stalled["status"] == "True" and "looked at again in 0.5s" in stalled["message"]
        assert env.condition("prod-1", "Reconciling")["status"] == "False"
        wait_until(lambda: env.ready("prod-1"), what="Ready after the recheck")  # well before the 5 s backoff
    assert [c.operation for c in engine.calls] == ["up"]
    warnings = [r for t, r, _ in env.events(name="prod-1") if t == "Warning"]
    assert warnings == ["AssumeRoleFailed", "AssumeRoleFailed"]


# --- 5. an engine error outside a run ------------------------------------------------------------------------

class _AppliedFails(RecordingEngine):
    """applied() (read before every up, outside the run) fails `times` times."""

    def __init__(self, times: int):
        super().__init__()
        self.left = times

    def applied(self, stack):
        if self.left > 0:
            self.left -= 1
            raise EngineError(f"history {stack}: the backend did not answer", reason="BackendUnavailable")
        return super().applied(stack)


def test_an_engine_error_outside_the_run_becomes_a_condition_and_an_event_not_a_traceback(env, caplog):
    engine = _AppliedFails(times=2)
    env.create("prod-1")
    with caplog.at_level(logging.WARNING), env.running(engine):
        wait_until(lambda: env.ready("prod-1"), what="Ready after the backend answers")
    assert [c.operation for c in engine.calls] == ["up"]
    assert [r for t, r, _ in env.events(name="prod-1") if t == "Warning"] == ["BackendUnavailable"] * 2
    assert not [r for r in caplog.records if r.exc_info], "no traceback: the error was reported, not raised"
    last = env.get("prod-1")["status"]["lastUpdate"]
    assert (last["operation"], last["result"]) == ("up", "Succeeded")


# --- the reconcile request ------------------------------------------------------------------------------------

def test_a_reconcile_request_runs_up_with_refresh_once_per_value(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine):
        wait_until(lambda: env.ready("prod-1"))
        env.patch("prod-1", {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "2026-11-23T10:00"}}})
        wait_until(lambda: engine.count("up") == 2, what="the requested up")
        wait_until(lambda: (env.get("prod-1")["status"].get("lastHandledReconcileRequest") == "2026-11-23T10:00"
                            and env.ready("prod-1")), what="the request recorded as handled")
        # Any other edit with the same value is not a new request: it is observed, and runs nothing.
        env.patch("prod-1", {"spec": {"network": {"routeTableIDs": ["rtb-09"]}}})
        wait_until(lambda: observed(env, "prod-1"), what="the edit observed")
    requested = engine.runs("up")[1]
    assert requested.refresh and RECONCILE_REQUEST_ANNOTATION in requested.message
    assert not engine.runs("up")[0].refresh
    assert engine.count("up") == 2


def observed(env, name: str) -> bool:
    """The cluster's status says its latest generation was reconciled (a condition, not a sleep)."""
    obj = env.get(name)
    return obj["status"].get("observedGeneration") == obj["metadata"]["generation"]


def test_a_reconcile_request_skips_the_backoff_of_a_failing_cluster(env):
    engine = RecordingEngine()
    engine.fail("up", times=1)
    env.create("prod-1")
    with env.running(engine, backoff_base=60, backoff_cap=120):  # the retry would come a minute later
        wait_until(lambda: env.reason("prod-1") == "UpdateFailed", what="the failure")
        env.patch("prod-1", {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "now"}}})
        wait_until(lambda: env.ready("prod-1"), what="Ready at once, not after the backoff")
    assert engine.count("up") == 2 and engine.runs("up")[1].refresh


def test_a_reconcile_request_on_an_invalid_cluster_is_recorded_and_runs_nothing(env):
    engine = RecordingEngine()
    env.namespace("strays", owner="444444444444")
    env.create("stray", namespace="strays", accountID="444444444444")  # no role for this account
    with env.running(engine):
        wait_until(lambda: env.reason("stray", "strays") == "AccountNotMapped")
        env.patch("stray", {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: "1"}}}, namespace="strays")
        wait_until(lambda: env.get("stray", "strays")["status"].get("lastHandledReconcileRequest") == "1")
    assert engine.calls == []


def test_a_drift_check_request_runs_a_preview_once_per_value(env):
    """The service end to end: the mapper queues the annotated key, the reconciler runs a drift check (a preview,
    no up; the periodic one is an hour away), its history entry says why, and the status records the value."""
    engine = RecordingEngine()
    history = MemoryHistory()
    env.create("prod-1")
    with env.running(engine, history=history):
        wait_until(lambda: env.ready("prod-1"))
        env.patch("prod-1", {"metadata": {"annotations": {DRIFT_CHECK_REQUEST_ANNOTATION: "check-1"}}})
        wait_until(lambda: env.get("prod-1")["status"].get("lastHandledDriftCheckRequest") == "check-1",
                   what="the request recorded as handled")
        # Any other edit with the same value is not a new request: it is observed, and runs nothing.
        env.patch("prod-1", {"spec": {"network": {"routeTableIDs": ["rtb-09"]}}})
        wait_until(lambda: observed(env, "prod-1"), what="the edit observed")
    assert engine.count("preview") == 1 and engine.count("up") == 1
    [check] = [record for record in history.records("acme.prod-1") if record.operation == "preview"]
    assert check.cause.kind == "DriftCheck"
    assert check.cause.message == f"drift check requested ({DRIFT_CHECK_REQUEST_ANNOTATION}=check-1)"
    assert env.condition("prod-1", "DriftDetected")["reason"] == "NoDrift"


# --- 2. drift is reported, and corrected or not as the policy says --------------------------------------------

def _drifted(env, name: str = "prod-1") -> dict | None:
    cond = env.condition(name, "DriftDetected")
    return cond if cond and cond["status"] == "True" else None


def test_drift_with_policy_report_sets_the_condition_keeps_ready_and_runs_no_update(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine, drift_interval=0.3, drift_jitter=0, drift_policy="report") as service:
        wait_until(lambda: env.ready("prod-1"))
        engine.drifted.add("acme.prod-1")  # the cloud changed behind the stack
        drift = wait_until(lambda: _drifted(env), what="DriftDetected")
        assert "acme.prod-1 (test:Drifted)" in drift["message"] and "not corrected" in drift["message"]
        assert env.ready("prod-1"), "Ready stays as it is"
        metrics = wait_until(lambda: (lambda m: m if "hubwright_drifted_stacks 1.0" in m else None)(
            service.metrics.exposition().decode()), what="the drift metric")
        assert "hubwright_drifted_stacks 1.0" in metrics
        wait_until(lambda: engine.count("preview") >= 3, what="two more drift checks")
        assert _drifted(env)
    assert engine.count("up") == 1, "report only: no update"
    assert ("Warning", "DriftDetected") in [(t, r) for t, r, _ in env.events(name="prod-1")]


def test_drift_with_policy_correct_runs_up_with_refresh_and_clears_the_condition(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine, drift_interval=0.3, drift_jitter=0) as service:  # correct is the default
        wait_until(lambda: env.ready("prod-1"))
        engine.drifted.add("acme.prod-1")
        wait_until(lambda: engine.count("up") == 2, what="the correcting up")
        drift = wait_until(lambda: (lambda c: c if c and c["status"] == "False" else None)(
            env.condition("prod-1", "DriftDetected")), what="DriftDetected False")
        assert drift["reason"] in ("DriftCorrected", "NoDrift")
        wait_until(lambda: "hubwright_drifted_stacks 0.0" in service.metrics.exposition().decode())
    correcting = engine.runs("up")[1]
    assert correcting.refresh and correcting.message.startswith("correcting drift")


# --- 3. no stale field at any depth of the status ------------------------------------------------------------

def test_the_running_mark_keeps_nothing_of_the_previous_runs_end(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine):
        wait_until(lambda: env.ready("prod-1"))
        done = env.get("prod-1")["status"]["lastUpdate"]
        assert done["endTime"] and done["changes"]
        gate = engine.gate("acme.prod-1")  # the next run waits here, its Running mark written
        env.patch("prod-1", {"spec": {"apiURL": "https://api.blue.example.com:6443"}})
        running = wait_until(lambda: (lambda u: u if u.get("result") == "Running" else None)(
            env.get("prod-1")["status"]["lastUpdate"]), what="the Running mark")
        gate.set()
        wait_until(lambda: env.ready("prod-1") and engine.count("up") == 2)
    assert "endTime" not in running and "permalink" not in running and not running.get("changes"), running


def test_turning_privatelink_off_removes_its_outputs_from_the_status(env):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine):
        wait_until(lambda: env.ready("prod-1"))
        assert env.get("prod-1")["status"]["outputs"]["endpointVPC"] == "vpc-0hub1"
        env.patch("prod-1", {"spec": {"privateLink": {"enabled": False}}})
        wait_until(lambda: engine.count("up") == 2 and env.ready("prod-1"))
        outputs = wait_until(lambda: (lambda o: o if "endpoint" not in o else None)(
            env.get("prod-1")["status"].get("outputs") or {}), what="the PrivateLink outputs gone")
    assert "endpointVPC" not in outputs and "serviceName" not in outputs, outputs


# --- discovery without an AWS identity (issue 47: loud failures) ---------------------------------------------

class _Counted:
    """The real AwsDiscovery, counting its discover() calls."""

    def __init__(self, lookup):
        self.lookup, self.calls = lookup, 0

    def discover(self, query, *, now):
        self.calls += 1
        return self.lookup.discover(query, now=now)


def test_discovery_without_credentials_stalls_the_cluster_counts_it_and_says_it_once(moto, env, monkeypatch):
    """The trial: a service with no AWS identity left every cluster Reconciling/NetworkNotDiscovered for ever;
    NoCredentials showed only as Events (two each) and no shipped alert fired. Now the cluster is Stalled with
    the lookup's reason, counted in hubwright_stalled_clusters, and the rechecks say nothing new."""
    from automation.adapters.aws.discovery import AwsDiscovery
    from tests.test_run_log import scraped
    import boto3
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    lookup = _Counted(AwsDiscovery(AwsSessions(base=boto3.Session(region_name="us-east-1"), endpoint_url=moto.url)))
    engine = RecordingEngine()
    env.create("prod-1", infraID="prod-1-x7k2p")
    with env.running(engine, discovery=lookup, stalled_recheck=0.3) as service:
        wait_until(lambda: env.reason("prod-1") == "NoCredentials", what="the cluster Stalled with NoCredentials")
        stalled = env.condition("prod-1", "Stalled")
        assert stalled["status"] == "True" and "no AWS credentials" in stalled["message"], stalled
        assert env.condition("prod-1", "Reconciling")["status"] == "False"
        assert env.get("prod-1")["status"]["networkError"]["reason"] == "NoCredentials"
        wait_until(lambda: scraped(service, "hubwright_stalled_clusters").get('{reason="NoCredentials"}') == 1.0,
                   what="the stalled gauge by reason")
        seen = lookup.calls
        wait_until(lambda: lookup.calls >= seen + 3, what="three more rechecks")
    assert engine.calls == []
    told = [reason for _, reason, _ in env.events(name="prod-1") if reason == "NoCredentials"]
    counts = [e.count or 1 for e in env.core.list_namespaced_event(env.ns).items if e.reason == "NoCredentials"]
    assert len(told) == 1 and counts == [1], (told, counts)
