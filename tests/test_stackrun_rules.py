"""The pure rules of stack runs (stacks/runs/): claims as leases, the order runners take runs in, retention, the
check a run passes before it reaches the engine, and the stale-lock rule for runner-held locks."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from automation.adapters.engine.locks import LockOwner, lock_is_stale
from doubles.factories import cluster, resolve_one
from stacks.names import RUN_DIGEST_ANNOTATION, RUN_FOR_ANNOTATION, RUN_OPERATION_LABEL, RUN_STACK_ANNOTATION
from stacks.runs.checks import refusal
from stacks.runs.claims import RunView, claimable, claimed, expired, live_holders, renewed
from stacks.runs.history import beyond
from stacks.runs.model import Claim, StackRunSpec, StackRunStatus, run_name, secret_name, summary
from stacks.runs.order import fair
from stacks.times import rfc3339_seconds

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def run(key: str, stack: str = "acme.prod-1", *, at: int = 0, phase: str = "Pending", holder: str | None = None,
        renewed_at: int = 0, ttl: int = 30) -> RunView:
    claim = Claim(holder=holder, acquire_time=rfc3339_seconds(T0), renew_time=rfc3339_seconds(T0 + timedelta(seconds=renewed_at)),
                  ttl_seconds=ttl) if holder else None
    return RunView(key=key, stack=stack, created=T0 + timedelta(seconds=at),
                   status=StackRunStatus(phase=phase, claim=claim))  # type: ignore[arg-type]


def test_a_claim_is_a_lease_that_lapses_ttl_after_its_last_renewal():
    held = run("acme/a", phase="Running", holder="runner-1", renewed_at=10)
    assert not claimable(held, [], T0 + timedelta(seconds=39))[0]
    ok, why = claimable(held, [], T0 + timedelta(seconds=40))
    assert ok and "takeover" in why
    taken = claimed(held, "runner-2", T0 + timedelta(seconds=40), 30)
    assert (taken.holder, taken.takeovers) == ("runner-2", 1)
    assert not expired(renewed(taken, T0 + timedelta(seconds=60)), T0 + timedelta(seconds=89))


def test_runs_of_one_stack_are_claimed_one_at_a_time_and_finished_runs_never():
    busy = run("acme/a", phase="Running", holder="runner-1")
    waiting = run("acme/b", at=1)
    other_stack = run("acme/c", "acme.prod-2", at=2)
    assert not claimable(waiting, [busy, waiting], T0 + timedelta(seconds=5))[0]
    assert claimable(other_stack, [busy, other_stack], T0 + timedelta(seconds=5))[0]
    assert claimable(waiting, [busy, waiting], T0 + timedelta(seconds=31))[0]  # its holder's claim lapsed
    assert not claimable(run("acme/d", phase="Succeeded"), [], T0)[0]


def test_runners_take_runs_fairly_between_namespaces():
    flood = [run(f"noisy/r{i}", f"noisy.c{i}", at=i) for i in range(50)]
    one = run("quiet/r0", "quiet.c0", at=40)
    order = fair([*flood, one], served={})
    assert [r.key for r in order[:2]] == ["noisy/r0", "quiet/r0"]
    # the namespace served last waits for the other's turn
    assert fair([*flood, one], served={"quiet": 5.0, "noisy": 1.0})[0].key == "noisy/r0"
    assert fair([*flood, one], served={"quiet": 1.0, "noisy": 5.0})[0].key == "quiet/r0"


def test_retention_keeps_the_newest_finished_runs_of_each_stack_and_every_unfinished_one():
    runs = [run(f"acme/a{i}", at=i, phase="Succeeded") for i in range(12)]
    runs += [run("acme/live", at=99, phase="Running", holder="r"), run("acme/b0", "acme.prod-2", phase="Failed")]
    gone = beyond(runs, keep=10)
    assert [r.key for r in gone] == ["acme/a0", "acme/a1"]


def test_a_runner_lock_is_stale_once_its_runner_holds_no_live_claim():
    lock = LockOwner("p", "root", "hubwright-runner-5d9f7-x2k4q", 7, T0)
    kw = dict(hostname="hubwright-runner-5d9f7-other", own_hosts=None, stale_after_s=1920.0, now=T0,
              runner_hosts=r"hubwright-runner-[a-z0-9]+-[a-z0-9]+")
    runs = [run("acme/a", phase="Running", holder="hubwright-runner-5d9f7-x2k4q", ttl=30)]
    live = live_holders(runs, "acme.prod-1", T0 + timedelta(seconds=45), grace=60)
    assert not lock_is_stale(lock, live_runners=live, **kw)[0]  # lapsed 15 s ago: still within the cancel grace
    stale, why = lock_is_stale(lock, live_runners=live_holders(runs, "acme.prod-1", T0 + timedelta(seconds=91),
                                                               grace=60), **kw)
    assert stale and "no live claim" in why
    assert not lock_is_stale(lock, live_runners=None, **kw)[0]  # claims unknown (the service itself): left alone
    stranger = LockOwner("p", "alice", "laptop", 9, T0)
    assert not lock_is_stale(stranger, live_runners={}, **kw)[0]


# --------------------------------------------------------------------------- the check before the engine

def secret_for(key: str, spec: StackRunSpec, inputs: str | None, digest: str | None) -> dict:
    return {"annotations": {RUN_FOR_ANNOTATION: key, RUN_STACK_ANNOTATION: spec.stack,
                            **({RUN_DIGEST_ANNOTATION: digest} if digest else {})},
            "labels": {RUN_OPERATION_LABEL: spec.operation}, "data": {"inputs": inputs} if inputs else {}}


@pytest.fixture(scope="module")
def inputs():
    return resolve_one(cluster("prod-1", "acme"))


def spec_of(inputs, **kw) -> StackRunSpec:
    values = dict(stack=inputs.stack, cluster="prod-1", operation="up", inputs_digest=inputs.digest(),
                  inputs_secret=secret_name("acme", "r1"), deadline=rfc3339_seconds(T0), requested_by="hubwright-0")
    return StackRunSpec(**{**values, **kw})


def test_a_run_the_service_made_passes(inputs):
    spec = spec_of(inputs)
    assert refusal("acme/r1", 1, spec, secret_for("acme/r1", spec, inputs.to_config(), inputs.digest()),
                   service_namespace="hubwright-system") is None


def test_a_forged_or_edited_run_is_refused_naming_why(inputs):
    spec = spec_of(inputs)
    good = secret_for("acme/r1", spec, inputs.to_config(), inputs.digest())
    sn = dict(service_namespace="hubwright-system")
    assert "changed after it was created" in refusal("acme/r1", 2, spec, good, **sn)
    assert "does not exist" in refusal("acme/r1", 1, spec, None, **sn)
    assert "is for run 'acme/r0'" in refusal("acme/r1", 1, spec, secret_for("acme/r0", spec, inputs.to_config(),
                                                                            inputs.digest()), **sn)
    # another tenant's stack, from this tenant's namespace
    assert "is not the stack of cluster" in refusal("evil/r1", 1, spec, good, **sn)
    # a digest that is not the recorded one, or inputs that are not the ones hashed
    assert "not the digest the service recorded" in refusal(
        "acme/r1", 1, spec_of(inputs, inputs_digest="0" * 32), good, **sn)
    other = resolve_one(cluster("prod-1", "acme", region="eu-west-1"))
    assert "do not match the recorded digest" in refusal(
        "acme/r1", 1, spec, secret_for("acme/r1", spec, other.to_config(), inputs.digest()), **sn)
    # a transit stack's run outside the service's namespace
    transit = spec_of(inputs, stack="_tgw_111111111111", cluster=None, operation="destroy", inputs_digest=None)
    assert "transit stack's" in refusal("acme/r1", 1, transit, good, **sn)


def test_names_sort_by_time_and_fit():
    first = run_name("acme.prod-1", "up", T0, "ab12")
    assert first < run_name("acme.prod-1", "up", T0 + timedelta(seconds=1), "0000")
    assert len(run_name("a" * 100, "preview", T0, "zz")) <= 253
    assert secret_name("acme", "r1") != secret_name("acme", "r2")
    assert summary({"create": 2, "same": 5, "update": 1}) == "2 to create, 1 to update"
    assert summary({"same": 3}) == "no changes"
