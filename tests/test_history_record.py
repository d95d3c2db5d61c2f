"""The run history's record (issue 52), direct: what caused a run (stacks/runs/cause.py), and the gate recording each
run with its cause, diff and log (automation/service/runs.py, history.py) into a store (doubles.history)."""
from __future__ import annotations

import pytest

from automation.adapters.engine import EngineError, RunResult, StackLocked, Trace
from automation.service.history import Recorder
from automation.service.runs import Runs, current
from doubles.history import MemoryHistory
from stacks.inputs import StackInputs
from stacks.resolve import resolve_fleet
from stacks.runs.cause import Cause, up_cause
from stacks.runs.record import read_detail, tenant_view
from stacks.status import ClusterStatus, LastUpdate
from doubles.factories import fleet
from tests.test_mesh import hub, member


def inputs_of(*indices: int, key: str) -> StackInputs:
    found = resolve_fleet(fleet(hub(), tuple(member(i) for i in indices)))[key]
    assert isinstance(found, StackInputs)
    return found


def status(inputs: StackInputs | None, generation: int = 1, last: str | None = "Succeeded") -> ClusterStatus:
    update = LastUpdate(operation="up", result=last) if last else None  # type: ignore[arg-type]
    return ClusterStatus(inputs_hash=inputs.digest() if inputs else None, observed_generation=generation,
                         last_update=update)


# --------------------------------------------------------------------------- the cause

def test_the_cause_of_an_up_names_what_moved():
    alone = inputs_of(1, key="globex/c01")
    joined = inputs_of(0, 1, key="globex/c01")  # c01 joins after c00: its stack owns the pair
    assert [p.peer.key for p in joined.mesh.pairs] == ["acme/c00"]

    assert up_cause(ClusterStatus(), None, alone, 1).kind == "Create"
    assert up_cause(status(None, last="Failed"), None, alone, 1).kind == "Retry"
    spec = up_cause(status(alone, generation=1), alone, joined, 2)
    assert (spec.kind, spec.generation) == ("Spec", 2) and "generation 2" in spec.message
    mesh = up_cause(status(alone), alone, joined, 1)
    assert mesh.kind == "Mesh" and "joined by acme/c00" in mesh.message, mesh.message
    left = up_cause(status(joined), joined, alone, 1)
    assert left.kind == "Mesh" and "left by acme/c00" in left.message
    moved_hub = alone.model_copy(update={"hub": alone.hub.model_copy(update={"account_id": "999999999999"})})
    assert up_cause(status(alone), alone, moved_hub, 1).kind == "Hub"
    tagged = alone.model_copy(update={"tags": {**alone.tags, "team": "x"}})
    assert up_cause(status(alone), alone, tagged, 1).kind == "Fleet"
    assert up_cause(status(alone, last="Failed"), alone, alone, 1).kind == "Retry"
    assert up_cause(status(alone, last="Running"), alone, alone, 1).kind == "Leader"


# --------------------------------------------------------------------------- the gate records every run

DIFF = {"stack": "acme.prod-1", "change": "changed", "resources": [
    {"urn": "urn:pulumi:acme.prod-1::hubwright::aws:ec2/route:Route::pair-route", "type": "aws:ec2/route:Route",
     "change": "add", "properties": {"routeTableId": {"old": None, "new": "rtb-0peer000000000001"},
                                     "vpcPeeringConnectionId": {"old": None, "new": "pcx-0aaa000000000001"}}}]}
LOG = ("Updating (acme.prod-1):\n + aws:ec2:Route pair-route creating in rtb-0peer000000000001\n"
       "assuming arn:aws:iam::222222222222:role/hubwright in 222222222222\n Resources: + 1 created\n")
OWN = frozenset({"111111111111", "vpc-0own0000000000001"})


def gate(store: MemoryHistory, executor: str = "local") -> tuple[Runs, Recorder]:
    recorder = Recorder(store, executor=executor, keep=3)  # type: ignore[arg-type]
    return Runs(recorder=recorder), recorder


def test_a_run_is_recorded_with_its_cause_diff_and_log_and_its_id_comes_back():
    store = MemoryHistory()
    runs, _ = gate(store)
    seen = []

    def call() -> RunResult:
        seen.append(current())
        return RunResult("up", True, "updated", changes={"create": 1}, started="2026-11-30T10:00:00Z",
                         ended="2026-11-30T10:00:09Z", trace=Trace(DIFF, LOG))

    cause = Cause.of("Spec", "inputs changed (generation 2)", 2)
    out = runs.run("up", call, stack="acme.prod-1", cluster="acme/prod-1", cause=cause, shown_to=OWN)
    [record] = store.records("acme.prod-1")
    assert seen[0] is not None and seen[0].id == record.id == out.run_id and out.trace is None
    assert (record.cause, record.operation, record.result, record.executor) == (cause, "up", "Succeeded", "local")
    assert record.changes == {"create": 1} and record.duration == 9.0 and record.known == tuple(sorted(OWN))
    detail = store.detail(record)
    assert detail is not None and detail["diff"] == DIFF and detail["log"] == LOG
    assert current() is None  # only while in the gate


def test_a_failed_run_is_recorded_with_its_log_and_the_error_names_the_run():
    store = MemoryHistory()
    runs, _ = gate(store)

    def call() -> RunResult:
        error = EngineError("up acme.prod-1: the route in rtb-0peer000000000001 failed")
        error.trace = Trace(None, LOG + "error: InvalidRouteTableID.NotFound\n")
        raise error

    with pytest.raises(EngineError) as failed:
        runs.run("up", call, stack="acme.prod-1", cluster="acme/prod-1", cause=Cause.of("Retry", "again"),
                 shown_to=OWN)
    [record] = store.records("acme.prod-1")
    assert failed.value.run_id == record.id and record.result == "Failed" and record.reason == "UpdateFailed"
    assert "rtb-[redacted]" in str(failed.value)  # what the tenant's status reads, as before
    assert "InvalidRouteTableID.NotFound" in store.detail(record)["log"]  # the administrator's whole log

    def locked() -> RunResult:
        raise StackLocked("locked by another update")
    with pytest.raises(StackLocked):
        runs.run("up", locked, stack="acme.prod-1", cluster="acme/prod-1", cause=Cause.of("Spec", "x"))
    assert store.records("acme.prod-1")[-1].result == "Locked"


def test_a_tenant_reads_nothing_of_the_peer_in_its_runs_diff_and_log():
    """The attack: acme's tenant reads its pair run's record, diff and log; the peer's route table, the peering, the
    peer's account and role are redacted; its own IDs stay."""
    store = MemoryHistory()
    runs, _ = gate(store)
    runs.run("up", lambda: RunResult("up", True, "created route in rtb-0peer000000000001 of 222222222222",
                                     trace=Trace(DIFF, LOG + "own vpc-0own0000000000001 in 111111111111\n")),
             stack="acme.prod-1", cluster="acme/prod-1", cause=Cause.of("Mesh", "joined"), shown_to=OWN)
    [record] = store.records("acme.prod-1")
    shown, detail = tenant_view(record, store.detail(record))
    text = repr(shown) + repr(detail)
    for secret in ("rtb-0peer000000000001", "pcx-0aaa000000000001", "222222222222", "arn:aws:iam::"):
        assert secret not in text, secret
    assert "known" not in shown and "vpc-0own0000000000001" in text and "111111111111" in text


def test_the_store_keeps_the_last_runs_and_a_failing_store_fails_no_run():
    store = MemoryHistory()
    runs, recorder = gate(store)
    for i in range(5):
        runs.run("up", lambda: RunResult("up", True, trace=Trace(None, f"run {i}\n")),
                 stack="acme.prod-1", cluster="acme/prod-1", cause=Cause.of("Spec", f"edit {i}"))
    kept = store.records("acme.prod-1")
    assert len(kept) == 3 and len(store.objects) == 3  # the dropped runs' details went with them

    class Broken(MemoryHistory):
        def append(self, record, *, keep):  # type: ignore[override]
            raise OSError("the bucket is away")

    class Count:
        failed = 0

        def history_failed(self) -> None:
            Count.failed += 1
    recorder.store, recorder.metrics = Broken(), Count()
    out = runs.run("up", lambda: RunResult("up", True), stack="acme.prod-1", cause=Cause.of("Spec", "x"))
    assert out.ok and out.run_id is None and Count.failed == 1


def test_a_runners_detail_is_taken_by_reference_at_the_key_its_run_derives():
    store = MemoryHistory()
    runs, _ = gate(store, executor="runners")
    stored = store.put_detail("acme.prod-1", "acme-prod-1-run", b"x")  # what a runner stored under the run's name
    forged = {**stored.model_dump(mode="json"), "key": "globex.db/runs/theirs.json.gz"}
    out = runs.run("up", lambda: RunResult("up", True, run_id="acme-prod-1-run", detail=forged),
                   stack="acme.prod-1", cluster="acme/prod-1", cause=Cause.of("Spec", "x"))
    [record] = store.records("acme.prod-1")
    assert out.run_id == record.id == "acme-prod-1-run" and record.executor == "runners"
    assert record.detail is not None and record.detail.key == "acme.prod-1/runs/acme-prod-1-run.json.gz"
    with pytest.raises(ValueError):
        read_detail(b"tampered", record.detail)


def test_an_hourly_drift_check_does_not_push_the_updates_out():
    store = MemoryHistory()
    runs, _ = gate(store)  # keep=3
    runs.run("up", lambda: RunResult("up", True), stack="acme.prod-1", cause=Cause.of("Spec", "the edit"))
    for _ in range(12):
        runs.run("preview", lambda: RunResult("preview", True), stack="acme.prod-1",
                 cause=Cause.of("DriftCheck", "drift check"))
    runs.run("preview", lambda: RunResult("preview", False), stack="acme.prod-1",
             cause=Cause.of("DriftCheck", "drift check"))
    kept = store.records("acme.prod-1")
    # keep=3 counts the edit and the check that found drift; the clean checks keep their own newest ten
    assert [r.cause.kind for r in kept][:1] == ["Spec"] and [r.result for r in kept][-1] == "Drifted"
    assert sum(r.result == "Succeeded" and r.operation == "preview" for r in kept) == 10
