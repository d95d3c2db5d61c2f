"""`python -m automation history NS/NAME`: a cluster's run history as the hub administrator reads it (the whole
text) and, with --tenant, as its tenant does (redacted), in text, JSON and Markdown; a run's diff and engine log
with --run. Driven in-process with a MemoryHistory, and once as a subprocess on a file store laid out by hand."""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from automation.adapters.history import detail_key
from automation.cli import build_parser
from automation.cli.history import add_history_command, fence, history_command
from stacks.plandiff.render import render_diff, render_markdown
from doubles.history import MemoryHistory
from stacks.disclosure import ids_in
from stacks.errors import InvalidSpec
from stacks.plandiff.compare import PropertyChange, ResourceChange, StackDiff
from stacks.runs.cause import Cause
from stacks.runs.record import RunRecord, detail_body, diff_document, read_detail, record_json

ROOT = Path(__file__).resolve().parent.parent
STACK, CLUSTER = "acme.prod-1", "acme/prod-1"
OWN = ("111111111111", "vpc-0acme1", "rtb-0acme1", "sg-0acme1", "arn:aws:iam::111111111111:role/acme-network")
PEER = ("222222222222", "rtb-0peer1", "sg-0peer1", "arn:aws:iam::222222222222:role/globex-network")
ENV = ("PULUMI_BACKEND_URL", "HUBWRIGHT_HISTORY_STORE", "HUBWRIGHT_STATE_DIR", "NO_COLOR", "TERM")


@pytest.fixture(autouse=True)
def _no_history_environment(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def pair_diff(stack: str = STACK) -> StackDiff:
    """A pair run's changes: a route in the tenant's own table to the peer, and one in the peer's table."""
    return StackDiff(stack, "changed", (
        ResourceChange(f"urn:pulumi:{stack}::hubwright::aws:ec2/route:Route::to-peer-rtb-0acme1", "aws:ec2/route:Route",
                       "add", {"routeTableId": PropertyChange(None, "rtb-0acme1")}),
        ResourceChange(f"urn:pulumi:{stack}::hubwright::aws:ec2/route:Route::back-rtb-0peer1", "aws:ec2/route:Route",
                       "update", {"routeTableId": PropertyChange("rtb-0peer1", "rtb-0peer1"),
                                  "securityGroupId": PropertyChange("sg-0acme1", "sg-0peer1")}),
    ))


PAIR_LOG = ("Updating (acme.prod-1):\n"
            "    assuming arn:aws:iam::111111111111:role/acme-network for vpc-0acme1\n"
            "    assuming arn:aws:iam::222222222222:role/globex-network in account 222222222222\n"
            "error: creating EC2 Route in rtb-0peer1 (sg-0peer1): AccessDenied\n")


def record(run_id: str, started: str, ended: str, *, stack: str = STACK, cluster: str = CLUSTER, **more) -> RunRecord:
    fields = dict(id=run_id, stack=stack, cluster=cluster, operation="up", cause=Cause.of("Spec", "inputs changed"),
                  executor="runners", started=started, ended=ended, result="Succeeded")
    return RunRecord(**{**fields, **more})


def history() -> MemoryHistory:
    """Three runs of acme/prod-1 (stored oldest first); the newest, a failed pair run, has a detail."""
    store = MemoryHistory()
    store.append(record("acme.prod-1-20240501-120000000-up-aaaa", "2024-05-01T12:00:00Z", "2024-05-01T12:01:05Z",
                        cause=Cause.of("Create", "first update of the stack"), changes={"create": 7, "same": 0}),
                 keep=10)
    store.append(record("acme.prod-1-20240502-080000000-preview-bbbb", "2024-05-02T08:00:00Z",
                        "2024-05-02T08:00:02Z", operation="preview", refresh=True, cause=Cause.of("DriftCheck",
                        "periodic drift check"), result="Drifted", changes={"update": 1}), keep=10)
    pair = "acme.prod-1-20240503-090000000-up-cccc"
    ref = store.put_detail(STACK, pair, detail_body(pair_diff(), PAIR_LOG))
    store.append(record(pair, "2024-05-03T09:00:00Z", "2024-05-03T09:12:30Z", cause=Cause.of(
        "Mesh", "inputs changed (mesh group core: joined by globex/eu-1): 0a1b2c3d -> 4e5f6a7b", generation=3),
        result="Failed", reason="AccessDenied", message="creating route in rtb-0peer1: AccessDenied for "
        "arn:aws:iam::222222222222:role/globex-network", detail=ref, known=OWN), keep=10)
    return store


NEWEST, MIDDLE, OLDEST = ("acme.prod-1-20240503-090000000-up-cccc", "acme.prod-1-20240502-080000000-preview-bbbb",
                          "acme.prod-1-20240501-120000000-up-aaaa")


def run(*argv: str, store=None, out: io.StringIO | None = None) -> tuple[int, str]:
    out = io.StringIO() if out is None else out
    args = build_parser("history").parse_args(["history", *argv])
    return history_command(args, store=history() if store is None else store, out=out), out.getvalue()


# --------------------------------------------------------------------------- text


def test_the_table_lists_the_runs_newest_first_with_cause_duration_result_and_changes():
    code, text = run(CLUSTER)
    assert code == 0
    header, *rows = text.splitlines()
    assert header.split() == ["RUN", "OPERATION", "CAUSE", "STARTED", "DURATION", "RESULT", "CHANGES"]
    assert [row.split()[0] for row in rows] == [NEWEST, MIDDLE, OLDEST]
    newest, middle, oldest = rows
    assert "Mesh: inputs changed (mesh group core" in newest and "12m30s" in newest
    assert "Failed (AccessDenied)" in newest and "no changes" in newest
    assert "preview --refresh" in middle and "DriftCheck: periodic drift check" in middle and "2.0s" in middle
    assert "Drifted" in middle and "1 to update" in middle
    assert "Create: first update of the stack" in oldest and "1m05s" in oldest and "7 to create" in oldest
    assert "2024-05-01T12:00:00Z" in oldest
    assert run(CLUSTER, "--limit", "2")[1].count("\n") == 3  # the header and the two newest
    for column in ("OPERATION", "CAUSE", "RESULT", "CHANGES"):  # the columns line up
        at = header.index(column)
        assert all(row[at - 2:at] == "  " and row[at] != " " for row in rows), column


def test_a_run_shows_its_record_its_diff_and_its_engine_log():
    code, text = run(CLUSTER, "--run", NEWEST)
    assert code == 0
    table, _, rest = text.partition("\n\n")
    assert [line.split()[0] for line in table.splitlines()[1:]] == [NEWEST]  # that run alone
    assert f"run {NEWEST}\n" in rest
    assert "  cause      Mesh: inputs changed (mesh group core: joined by globex/eu-1): 0a1b2c3d -> 4e5f6a7b " \
           "(generation 3)\n" in rest
    assert "  operation  up\n" in rest and "  executor   runners\n" in rest
    assert "  result     Failed (AccessDenied)\n" in rest
    assert "  ended      2024-05-03T09:12:30Z (12m30s)\n" in rest
    # the diff, as the plan diff renders it (no colour: not a terminal), and the log
    assert render_diff(diff_document(read_detail(history().objects[detail_key(STACK, NEWEST)],
                                                 history().records(STACK)[-1].detail)), color=False) in rest
    assert "\x1b[" not in rest
    assert rest.endswith("engine log:\n" + PAIR_LOG)
    # the hub administrator reads the whole text: the peer's IDs too
    for peer in PEER:
        assert peer in rest
    assert run(CLUSTER, "--run", "latest")[1] == text


def test_a_run_without_a_stored_detail_says_so():
    code, text = run(CLUSTER, "--run", OLDEST)
    assert code == 0 and "no diff or engine log was stored for this run" in text


def test_the_diff_is_coloured_on_a_terminal_only(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    assert "\x1b[32m" in run(CLUSTER, "--run", NEWEST, out=Terminal())[1]
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run(CLUSTER, "--run", NEWEST, out=Terminal())[1]


def test_what_the_engine_wrote_reaches_the_terminal_escaped():
    store = MemoryHistory()
    body = detail_body(StackDiff(STACK, "unchanged", ()), "ok\n\x1b]0;owned\x07\x1b[2Jgone\r\n")
    ref = store.put_detail(STACK, "r-1", body)
    store.append(record("r-1", "2024-05-01T12:00:00Z", "2024-05-01T12:00:01Z", detail=ref,
                        message="bad \x1b[31m text"), keep=5)
    text = run(CLUSTER, "--run", "r-1", store=store)[1]
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\\x1b]0;owned\\x07\\x1b[2Jgone\\r\n" in text and "bad \\x1b[31m text" in text


# --------------------------------------------------------------------------- --tenant


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_the_tenant_reads_nothing_of_its_peer(fmt):
    code, text = run(CLUSTER, "--run", NEWEST, "--tenant", "--format", fmt)
    assert code == 0
    for peer in PEER:
        assert peer not in text, (fmt, peer)
    assert "rtb-0acme1" in text and "sg-0acme1" in text  # its own side stays
    assert "rtb-[redacted]" in text and "[redacted account]" in text and "arn:[redacted]" in text
    assert "known" not in (json.loads(text)["runs"][0] if fmt == "json" else {})


def test_the_tenant_reads_the_runs_names_and_the_details_reference_whole():
    """Only text is redacted: not a run's id, stack or cluster (a name may hold 12 digits), nor the detail's SHA-256."""
    store, stack = MemoryHistory(), "acme.c-123456789012"
    for attempt in itertools.count():  # a detail whose SHA-256 holds 12 decimal digits in a row
        body = detail_body(StackDiff(stack, "unchanged", ()), f"attempt {attempt}\n")
        if ids_in(hashlib.sha256(body).hexdigest()):
            break
    run_id = f"{stack}-20240503-090000000-up-n4me"
    ref = store.put_detail(stack, run_id, body)
    store.append(record(run_id, "2024-05-03T09:00:00Z", "2024-05-03T09:00:01Z", stack=stack,
                        cluster="acme/c-123456789012", detail=ref, message="account 123456789012"), keep=5)
    doc = json.loads(run("acme/c-123456789012", "--tenant", "--format", "json", "--run", "latest", store=store)[1])
    view = doc["runs"][0]
    assert (view["id"], view["stack"], view["cluster"]) == (run_id, stack, "acme/c-123456789012")
    assert view["detail"] == ref.model_dump(mode="json") and view["message"] == "account [redacted account]"


# --------------------------------------------------------------------------- json and markdown


def test_json_is_the_records_and_with_a_run_its_detail():
    code, text = run(CLUSTER, "--format", "json")
    assert code == 0
    doc = json.loads(text)
    records = history().records(STACK)
    assert doc == {"stack": STACK, "runs": [record_json(r) for r in reversed(records)]}
    assert all("known" not in view for view in doc["runs"])
    assert [view["id"] for view in json.loads(run(CLUSTER, "--format", "json", "--limit", "1")[1])["runs"]] == [NEWEST]

    one = json.loads(run(CLUSTER, "--format", "json", "--run", NEWEST)[1])
    assert one["runs"] == [record_json(records[-1])]
    assert one["detail"]["log"] == PAIR_LOG and one["detail"]["diff"] == pair_diff().to_json()
    assert one["detail"]["logDropped"] == 0 and one["detail"]["resourcesDropped"] == 0
    assert json.loads(run(CLUSTER, "--format", "json", "--run", OLDEST)[1])["detail"] is None


def test_markdown_is_a_table_and_with_a_run_its_diff_and_its_log_fenced():
    code, text = run(CLUSTER, "--format", "markdown")
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == "## Run history of acme/prod-1"
    assert lines[2] == "| Run | Operation | Cause | Started | Duration | Result | Changes |"
    assert [line.split(" | ")[0] for line in lines[4:]] == [f"| {NEWEST}", f"| {MIDDLE}", f"| {OLDEST}"]
    assert "-&gt; 4e5f6a7b" in lines[4]  # escaped as a cell's text

    code, text = run(CLUSTER, "--format", "markdown", "--run", NEWEST)
    detail = json.loads(run(CLUSTER, "--format", "json", "--run", NEWEST)[1])["detail"]
    assert render_markdown(diff_document(detail), rerun=f"python -m automation history {CLUSTER} --run {NEWEST}") \
        in text
    assert text.endswith("#### Engine log\n\n```text\n" + PAIR_LOG + "```\n")


def test_a_log_with_backticks_gets_a_longer_fence():
    log = "plain\n```\nnot the end\n`````\nstill not\n"
    block = fence(log)
    assert block.startswith("``````text\n") and block.endswith("\n``````\n") and log in block
    assert fence("no ticks") == "```text\nno ticks\n```\n"


# --------------------------------------------------------------------------- errors and options


def test_no_history_or_an_unknown_run_exits_1_naming_the_cluster(capsys):
    code, text = run("acme/prod-2")
    assert (code, text) == (1, "")
    err = capsys.readouterr().err
    assert "acme/prod-2" in err and "no run history" in err and "memory://history" in err
    code, _ = run(CLUSTER, "--run", "acme.prod-1-20990101-000000000-up-zzzz")
    err = capsys.readouterr().err
    assert code == 1 and CLUSTER in err and "acme.prod-1-20990101-000000000-up-zzzz" in err and NEWEST in err


def test_a_store_that_fails_exits_1(capsys):
    store = history()
    store.objects[detail_key(STACK, NEWEST)] = gzip.compress(b"{}")  # not what the record hashed
    code, _ = run(CLUSTER, "--run", NEWEST, store=store)
    assert code == 1 and "SHA-256" in capsys.readouterr().err
    assert run(CLUSTER, store=store)[0] == 0  # the list does not read details


@pytest.mark.parametrize("given", ["acme", "acme/", "/prod-1", "acme/prod-1/x", "Acme/prod-1", "../x/y", "a/../b"])
def test_a_bad_cluster_is_refused(given):
    with pytest.raises(InvalidSpec) as refused:
        run(given)
    assert "NS/NAME" in str(refused.value) and repr(given) in str(refused.value)


def test_the_store_is_the_one_history_store_names(tmp_path, capsys):
    args = build_parser("history").parse_args(["history", CLUSTER, "--history-store", "off"])
    assert history_command(args) == 1 and "the run history is off" in capsys.readouterr().err
    args = build_parser("history").parse_args(["history", CLUSTER, "--history-store", "gs://bucket"])
    with pytest.raises(InvalidSpec) as refused:
        history_command(args)
    assert "--history-store" in str(refused.value) and "HUBWRIGHT_HISTORY_STORE" in str(refused.value)
    # the default on Pulumi Cloud: off, said (its console keeps the stacks' own history)
    args = build_parser("history").parse_args(["history", CLUSTER, "--backend", "https://api.pulumi.com"])
    assert history_command(args) == 1 and "the run history is off" in capsys.readouterr().err
    # an empty file store: no history (the default root under --state-dir)
    args = build_parser("history").parse_args(["history", CLUSTER, "--state-dir", str(tmp_path)])
    assert history_command(args) == 1
    assert f"file://{tmp_path}/.hubwright/history" in capsys.readouterr().err


def test_the_defaults_come_from_the_option_table_and_the_environment():
    def parsed(environ: dict[str, str]) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_history_command(parser.add_subparsers(), environ)
        return parser.parse_args(["history", CLUSTER])
    plain = parsed({})
    assert (plain.backend, plain.history_store, plain.state_dir) == (None, "backend", "state")
    assert (plain.limit, plain.format, plain.run, plain.tenant) == (20, "text", None, False)
    set_ = parsed({"PULUMI_BACKEND_URL": "s3://b/p", "HUBWRIGHT_HISTORY_STORE": "off", "HUBWRIGHT_STATE_DIR": "/s"})
    assert (set_.backend, set_.history_store, set_.state_dir) == ("s3://b/p", "off", "/s")
    with pytest.raises(SystemExit):
        build_parser("history").parse_args(["history", CLUSTER, "--limit", "0"])


# --------------------------------------------------------------------------- the real command on a file store


def lay_out(root: Path, store: MemoryHistory, stack: str) -> None:
    """`store`'s stack as a file store holds it: <root>/<stack>/index.json and <root>/<stack>/runs/<id>.json.gz."""
    (root / stack / "runs").mkdir(parents=True)
    records = store.records(stack)
    (root / stack / "index.json").write_text(json.dumps([r.model_dump(mode="json", by_alias=True) for r in records]))
    for r in records:
        body = store.objects.get(detail_key(stack, r.id))
        if body is not None:
            (root / stack / "runs" / f"{r.id}.json.gz").write_bytes(body)


@pytest.mark.live  # starts the CLI (tests/tiers.py)
def test_the_command_reads_a_file_backends_history(tmp_path):
    state = tmp_path / "state"
    lay_out(state / ".hubwright" / "history", history(), STACK)
    env = {k: v for k, v in os.environ.items() if k not in ENV}

    def cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "automation", "history", *argv], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)

    listed = cli(CLUSTER, "--state-dir", str(state))
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == [NEWEST, MIDDLE, OLDEST]
    one = cli(CLUSTER, "--backend", f"file://{state}", "--run", NEWEST, "--format", "json", "--tenant")
    assert one.returncode == 0, one.stderr
    doc = json.loads(one.stdout)
    assert doc["runs"][0]["id"] == NEWEST and "rtb-0acme1" in one.stdout
    assert not any(peer in one.stdout for peer in PEER)
    env.update(HUBWRIGHT_STATE_DIR=str(state), PYTHONPATH=str(ROOT))  # the environment's default, from elsewhere
    text = cli(CLUSTER, "--run", NEWEST, cwd=tmp_path)
    assert text.returncode == 0 and text.stdout.endswith(PAIR_LOG), text.stderr
    missing = cli("globex/eu-1")
    assert missing.returncode == 1 and "globex/eu-1" in missing.stderr and "no run history" in missing.stderr
    bad = cli(CLUSTER, "--history-store", "gs://bucket/x")
    assert bad.returncode == 2 and "--history-store" in bad.stderr and "Traceback" not in bad.stderr
