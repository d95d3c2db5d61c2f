"""The plan at scale: the same bytes whatever --jobs, JSON streamed as json.dump would write it, --cluster plans
one stack as the whole plan does, and progress only on a terminal."""
from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess

import pytest

from automation.adapters.engine import plan_pool
from automation.adapters.progress import Progress
from automation.cli import main

FLEETS = {"privatelink": ("examples/hub.yaml", "examples/clusters"),
          "peering mesh": ("examples/mesh/hub.yaml", "examples/mesh/clusters"),
          "transit gateway": ("examples/transit/hub.yaml", "examples/transit/clusters")}


def plan(capsys, hub: str, clusters: str, *args: str) -> tuple[int, str, str]:
    code = main(["plan", "--hub", hub, "--clusters", clusters, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fleet", sorted(FLEETS))
@pytest.mark.parametrize("fmt", ["json", "tree"])
def test_workers_write_the_same_bytes_as_a_serial_run(capsys, monkeypatch, fleet, fmt):
    monkeypatch.setattr(plan_pool, "SERIAL_BELOW", 0)  # a pool even for a handful of stacks
    serial = plan(capsys, *FLEETS[fleet], "--format", fmt, "--jobs", "1", "--no-cache")
    pooled = plan(capsys, *FLEETS[fleet], "--format", fmt, "--jobs", "2", "--no-cache")
    assert serial[0] == pooled[0] == 0, serial[2] + pooled[2]
    assert serial[1] == pooled[1] and len(serial[1]) > 1000


@pytest.mark.parametrize("fleet", sorted(FLEETS))
def test_the_streamed_document_is_json_dump_of_the_whole(capsys, fleet):
    code, out, err = plan(capsys, *FLEETS[fleet], "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert out == json.dumps(doc, indent=2) + "\n"
    assert list(doc) == ["stacks", "mesh"] and doc["stacks"]
    if fleet == "transit gateway":  # the transit stack comes last, once the members have attached
        assert doc["stacks"][-1]["stack"] in {group.get("transitStack") for group in doc["mesh"].values()}


@pytest.mark.parametrize("fleet, key", [("privatelink", "globex/eu-1"), ("transit gateway", "acme/core-euw1")])
def test_one_cluster_is_planned_as_the_whole_plan_plans_it(capsys, fleet, key):
    _, whole, _ = plan(capsys, *FLEETS[fleet], "--format", "json")
    code, one, err = plan(capsys, *FLEETS[fleet], "--format", "json", "--cluster", key)
    assert code == 0, err
    [stack] = json.loads(one)["stacks"]
    assert stack == next(s for s in json.loads(whole)["stacks"] if s["cluster"] == key)


def test_an_unknown_cluster_is_refused_by_name(capsys):
    code, out, err = plan(capsys, *FLEETS["privatelink"], "--cluster", "acme/prod-1", "--cluster", "acme/nope")
    assert code == 2 and out == ""
    assert "--cluster acme/nope: no such cluster in the fleet (namespace/name)" in err and "(key)" not in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_shows_count_rate_and_time_left_on_a_terminal():
    stream, clock = _Terminal(), _Clock()
    with Progress("planned", "stacks", stream=stream, clock=clock) as progress:
        progress.expect(10_000)
        for _ in range(2):
            clock.now += 10
            progress.advance(400)
        assert stream.getvalue().endswith("\r\033[Kplanned 800/10,000 stacks  40.0/s  3m50s left")
    assert stream.getvalue().endswith("planned 800/10,000 stacks  40.0/s  3m50s left  done in 20s\n")


def test_progress_writes_nothing_when_stderr_is_not_a_terminal():
    stream = io.StringIO()
    with Progress("planned", "stacks", stream=stream, clock=_Clock()) as progress:
        progress.expect(5)
        progress.advance(5)
    assert stream.getvalue() == ""


def test_progress_is_rewritten_at_most_every_half_second():
    stream, clock = _Terminal(), _Clock()
    progress = Progress("planned", "stacks", stream=stream, clock=clock)
    progress.expect(100)
    for _ in range(50):
        clock.now += 0.01
        progress.advance()
    assert stream.getvalue().count("\r") == 1  # the first, then nothing for 0.5 s


def _bash_with_stderr(stderr_fd: int, script: str) -> None:
    subprocess.run(["bash", "-c", f". scripts/progress.sh; {script}"], stderr=stderr_fd, check=True,
                   env={"PATH": "/usr/bin:/bin", "TICK_SECONDS": "0.2"}, timeout=30)


@pytest.mark.live
def test_a_long_build_shows_how_long_it_has_been_going_on_a_terminal_and_nothing_elsewhere(tmp_path):
    leader, follower = pty.openpty()
    _bash_with_stderr(follower, "ticking 'pulumi v3' sleep 1 >/dev/null 2>&1")
    os.close(follower)
    shown = os.read(leader, 4096).decode()
    os.close(leader)
    assert re.search(r"\[tools\] pulumi v3: building, 0m0[0-2]s", shown) and shown.endswith("\r\033[K"), shown
    log = tmp_path / "stderr"
    with open(log, "w") as sink:
        _bash_with_stderr(sink.fileno(), "ticking 'pulumi v3' sleep 1 >/dev/null 2>&1")
    assert log.read_text() == ""


def test_every_urn_is_the_stacks_own_whatever_ran_before_in_this_process(capsys):
    """URNs name the stack and the project, as the engine's would: not what an earlier Pulumi program in the same
    process left in Pulumi's context variables (the suite's in-process Automation API runs did, and a serial plan
    after them wrote their stack's name into every URN)."""
    code, out, err = plan(capsys, *FLEETS["transit gateway"], "--format", "json")
    assert code == 0, err
    for stack in json.loads(out)["stacks"]:
        prefix = f"urn:pulumi:{stack['stack']}::hubwright::"
        assert all(r["urn"].startswith(prefix) and (r["parent"] or prefix).startswith(prefix)
                   for r in stack["resources"]), stack["stack"]
