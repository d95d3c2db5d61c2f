"""The run history end to end (issue 52), as a user meets it: the service on the REAL kube-apiserver, the REAL
`pulumi` CLI (a WorkerPool, dynamic resources whose cloud is a file: tests/history_live_programs.py), with each
executor and each store:

- the local executor, the file backend: the history under <state>/.hubwright/history;
- runners (in this process, on the same pool), the S3 backend on moto: the history in the state's bucket.

A create, a spec edit, a drift check and a destroy each leave a record with the right cause, a diff that is what the
engine did (the CloudThing added, its value old → new, the drift, the removal) and the engine's log; the cluster's
lastUpdate names its run; with runners `kubectl get hubstackruns` shows the cause and the run holds only the
detail's reference (nothing of the diff or log in etcd). Then `python -m automation history` reads it back.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from automation.adapters.engine.pool import WorkerPool
from automation.adapters.history.select import store_of
from doubles.kubectl import Kubectl
from doubles.pulumi_programs import ROOT, change_cloud, engine_settings
from doubles.service_env import ENGINE_RUN, ServiceEnv, wait_until
from stacks.names import GROUP, STACKRUNS, VERSION
from stacks.runs.record import RunRecord
from tests.envtest import env, kube_apiserver  # noqa: F401 - the fixtures
from tests.history_live_programs import TAGGED
from tests.moto_server import CREDENTIALS, s3_bucket

pytestmark = pytest.mark.live
BUCKET = "hubwright-history"
THING = "prod-1-thing"


@dataclasses.dataclass
class World:
    env: ServiceEnv
    pool: WorkerPool
    store: Any
    cloud: Path
    state: Path
    backend: str | None
    executor: str

    @property
    def stack(self) -> str:
        return f"{self.env.ns}.prod-1"

    def records(self) -> list[RunRecord]:
        return self.store.records(self.stack)

    def record(self, kind: str, operation: str) -> RunRecord:
        return wait_until(lambda: next((r for r in reversed(self.records())
                                        if r.cause.kind == kind and r.operation == operation), None),
                          ENGINE_RUN, what=f"a {operation} run caused by {kind}")


@pytest.fixture(params=["local-file", "runners-s3"])
def world(request, env, tmp_path: Path, pulumi_cli, monkeypatch) -> Iterator[World]:  # noqa: F811
    executor, where = request.param.split("-")
    backend = None
    if where == "s3":
        moto = request.getfixturevalue("moto")
        s3_bucket(moto, monkeypatch, BUCKET)
        port = moto.url.rsplit(":", 1)[-1]
        backend = f"s3://{BUCKET}?endpoint=127.0.0.1:{port}&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"
    settings = engine_settings(tmp_path / "state", backend_url=backend)
    settings = dataclasses.replace(settings, env={**settings.env, **CREDENTIALS})
    pool = WorkerPool(settings, program=TAGGED, program_options={"cloud": str(tmp_path / "cloud")}, size=1)
    store = store_of("backend", backend=backend, state_dir=tmp_path / "state")
    try:
        yield World(env, pool, store, tmp_path / "cloud", tmp_path / "state", backend, executor)
    finally:
        pool.close()


@contextlib.contextmanager
def serving(world: World) -> Iterator[None]:
    # Its own namespace only: the session's API server holds other tests' clusters (the same infraIDs among them).
    with world.env.running(world.pool, executor=world.executor, runners=1, history=world.store,
                           watch_namespace=world.env.ns, drift_interval=2.0, drift_jitter=0, drift_policy="report"):
        yield


def changed(record: RunRecord, store: Any) -> dict[str, Any]:
    """{resource name: (change, {property: (old, new)})} of the record's diff."""
    detail = store.detail(record)
    assert detail is not None, f"run {record.id} has no detail"
    return {r["urn"].rsplit("::", 1)[-1]: (r["change"], {k: (v["old"], v["new"]) for k, v in r["properties"].items()})
            for r in detail["diff"]["resources"]}


def test_each_run_leaves_its_cause_diff_and_log_in_the_history(world: World, kube_apiserver):  # noqa: F811
    env, store = world.env, world.store
    with serving(world):
        env.create("prod-1")
        wait_until(lambda: env.ready("prod-1"), ENGINE_RUN, what="the first up")
        create = world.record("Create", "up")
        assert create.result == "Succeeded" and create.executor == world.executor
        assert changed(create, store)[THING][0] == "add"
        assert create.changes.get("create") == 2  # the thing and the stack: the engine's own count
        detail = store.detail(create)
        assert "Resources:" in detail["log"] and THING in detail["log"]  # the CLI's own output
        last = env.get("prod-1")["status"]["lastUpdate"]
        assert (last["run"], last["cause"]) == (create.id, "Create")

        env.patch("prod-1", {"spec": {"tags": {"team": "blue"}}})
        edit = world.record("Spec", "up")
        assert edit.cause.generation == 2 and edit.result == "Succeeded"
        assert changed(edit, store)[THING] == ("update", {"value": ("{}", '{"team": "blue"}')})
        wait_until(lambda: env.get("prod-1")["status"]["lastUpdate"].get("run") == edit.id, ENGINE_RUN,
                   what="lastUpdate to name the edit's run")

        change_cloud(world.cloud, THING, "changed-by-hand")
        drift = wait_until(lambda: next((r for r in reversed(world.records()) if r.operation == "preview"
                                         and r.result == "Drifted"), None), ENGINE_RUN, what="a drift check")
        assert drift.cause.kind == "DriftCheck" and THING in changed(drift, store)
        assert changed(drift, store)[THING][0] == "update"

        if world.executor == "runners":
            runs = env.custom.list_namespaced_custom_object(GROUP, VERSION, env.ns, STACKRUNS)["items"]
            by_name = {r["metadata"]["name"]: r for r in runs}
            assert by_name[edit.id]["spec"]["cause"]["kind"] == "Spec"
            reference = by_name[edit.id]["status"]["detail"]
            assert reference == edit.detail.model_dump(mode="json") and "diff" not in json.dumps(by_name[edit.id])
            table = Kubectl(kube_apiserver.kubeconfig(), world.state / "kubectl")("get", STACKRUNS, "-n", env.ns).stdout
            header, *rows = table.splitlines()
            assert "CAUSE" in header.split() and any(edit.id in row and "Spec" in row.split() for row in rows), table

        env.delete("prod-1")
        wait_until(lambda: env.get("prod-1") is None, ENGINE_RUN, what="the destroy")
    destroy = world.record("Delete", "destroy")
    assert destroy.result == "Succeeded" and changed(destroy, store)[THING][0] == "remove"

    def history(*flags: str) -> str:
        out = subprocess.run([sys.executable, "-m", "automation", "history", f"{env.ns}/prod-1", *flags,
                              "--state-dir", str(world.state), *(["--backend", world.backend] if world.backend else [])],
                             cwd=world.state.parent, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    kinds = [run["cause"]["kind"] for run in json.loads(history("--format", "json", "--limit", "100"))["runs"]]
    assert {"Create", "Spec", "DriftCheck", "Delete"} <= set(kinds)
    shown = history("--run", edit.id)
    assert f"~ pulumi-python:dynamic:Resource {THING}" in shown and '"{}" → "{\\"team\\": \\"blue\\"}"' in shown
