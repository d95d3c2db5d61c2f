"""The run history's stores (automation/adapters/history): FileHistory on a directory and S3History on moto's S3 in
server mode, through the same tests, and store_of, which picks one from --history-store and the Pulumi backend.

What is asserted is what is stored: the objects under the root after each call (listed from the directory or the
bucket, not through the store), so a dropped record's detail is seen gone and a refused name is seen write nothing.
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from automation.adapters.history import HistoryError, detail_key, index_key
from automation.adapters.history.files import FileHistory
from automation.adapters.history.s3 import S3History
from automation.adapters.history.select import NoStore, store_of
from doubles.history import MemoryHistory
from tests.moto_server import s3_bucket
from stacks.plandiff.compare import PropertyChange, ResourceChange, StackDiff
from stacks.runs.cause import Cause
from stacks.runs.record import DetailRef, RunRecord, detail_body

BUCKET = "hubwright-state"
STACK = "fleet.web"
CLOUD_BACKENDS = ("https://api.pulumi.com", "https://app.pulumi.example/org", "gs://state-bucket/prefix",
                  "azblob://container", "postgres://hub:pw@db:5432/state")


@pytest.fixture(autouse=True)
def _no_aws_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """No profile or endpoint of the machine's environment reaches the clients store_of makes."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
                 "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Subject:
    """A store and the objects under its root, read and written behind its back."""

    store: FileHistory | S3History
    keys: Callable[[], list[str]]  # every stored key, relative to the root, sorted
    overwrite: Callable[[str, bytes], None]


@pytest.fixture
def s3(moto: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """boto3's S3 client on moto, the bucket made; the credentials in the environment (store_of's client reads
    them as the CLI does)."""
    return s3_bucket(moto, monkeypatch, BUCKET)


def bucket_keys(client: Any, prefix: str = "") -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for page in pages for o in page.get("Contents", []))


def file_keys(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.live)])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Subject:
    if request.param == "file":
        root = tmp_path / "state" / ".hubwright" / "history"

        def overwrite(key: str, body: bytes) -> None:
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(body)

        return Subject(FileHistory(root), lambda: file_keys(root), overwrite)
    client = request.getfixturevalue("s3")
    prefix = "hub/.hubwright/history/"
    return Subject(S3History(client, BUCKET, prefix), lambda: bucket_keys(client, prefix),
                   lambda key, body: client.put_object(Bucket=BUCKET, Key=prefix + key, Body=body))


def record(n: int, *, stack: str = STACK, run_id: str | None = None, ref: DetailRef | None = None,
           result: str = "Succeeded") -> RunRecord:
    return RunRecord.model_validate({
        "id": run_id or f"web-{n}", "stack": stack, "cluster": "fleet/web", "operation": "up",
        "cause": Cause.of("Spec", "the spec changed", n), "executor": "runners",
        "started": f"2026-03-01T10:{n:02d}:00Z", "ended": f"2026-03-01T10:{n:02d}:30Z", "result": result,
        "changes": {"update": 1}, "detail": ref})


def diff(n: int = 2) -> StackDiff:
    return StackDiff(STACK, "changed", tuple(
        ResourceChange(f"urn:pulumi:{STACK}::hub::aws:ec2/vpc:Vpc::vpc-{i}", "aws:ec2/vpc:Vpc", "update",
                       {"tags": PropertyChange({"a": "1"}, {"a": str(i)})}) for i in range(n)))


def stored(subject: Subject, n: int, **kw: Any) -> RunRecord:
    """Run n of the stack as the runner and the service write it: its detail, then its record."""
    run_id = kw.pop("run_id", None) or f"web-{n}"
    ref = subject.store.put_detail(kw.get("stack", STACK), run_id, detail_body(diff(), f"log of run {n}\n"))
    return record(n, run_id=run_id, ref=ref, **kw)


def test_no_records_and_no_objects_at_first(subject: Subject) -> None:
    assert subject.store.records(STACK) == []
    assert subject.keys() == []


def test_records_come_back_oldest_first_whatever_the_order_appended(subject: Subject) -> None:
    runs = [stored(subject, n) for n in (2, 1, 3)]
    for run in runs:
        assert subject.store.append(run, keep=10) == []
    assert [r.id for r in subject.store.records(STACK)] == ["web-2", "web-1", "web-3"]  # as recorded
    assert subject.store.records(STACK) == runs
    assert subject.store.records("fleet.other") == []
    index = json.loads(subject.store._read(index_key(STACK)) or b"")
    assert index == [r.model_dump(mode="json", by_alias=True) for r in runs]


def test_a_record_of_the_same_id_replaces_the_old_one(subject: Subject) -> None:
    subject.store.append(stored(subject, 1), keep=10)
    subject.store.append(stored(subject, 2), keep=10)
    again = stored(subject, 1, result="Failed")
    assert subject.store.append(again, keep=10) == []
    records = subject.store.records(STACK)
    assert [(r.id, r.result) for r in records] == [("web-2", "Succeeded"), ("web-1", "Failed")]


def test_keeping_three_of_five_drops_the_oldest_two_and_their_details(subject: Subject) -> None:
    runs = [stored(subject, n) for n in range(1, 6)]
    dropped: list[RunRecord] = []
    for run in runs:
        dropped += subject.store.append(run, keep=3)
    assert [r.id for r in dropped] == ["web-1", "web-2"]
    assert [r.id for r in subject.store.records(STACK)] == ["web-3", "web-4", "web-5"]
    assert subject.keys() == [index_key(STACK), *(detail_key(STACK, f"web-{n}") for n in (3, 4, 5))]


def test_the_same_as_the_memory_double(subject: Subject) -> None:
    memory = MemoryHistory()
    for n in (4, 1, 6, 2, 6, 3):
        body = detail_body(diff(n % 3 + 1), f"run {n}")
        run = record(n, ref=subject.store.put_detail(STACK, f"web-{n}", body))
        assert run.detail == memory.put_detail(STACK, f"web-{n}", body)
        assert subject.store.append(run, keep=4) == memory.append(run, keep=4)
        assert subject.store.records(STACK) == memory.records(STACK)
    assert subject.keys() == sorted([index_key(STACK), *memory.objects])


def test_a_detail_comes_back_as_written(subject: Subject) -> None:
    body = detail_body(diff(3), "line one\nline two\n")
    ref = subject.store.put_detail(STACK, "web-1", body)
    assert ref == DetailRef.model_validate({"key": detail_key(STACK, "web-1"), "sha256": ref.sha256,
                                            "bytes": len(body)})
    subject.store.append(record(1, ref=ref), keep=3)
    (run,) = subject.store.records(STACK)
    assert subject.store.detail(run) == json.loads(gzip.decompress(body))
    assert subject.store.detail(run)["diff"]["resources"][2]["properties"]["tags"]["new"] == {"a": "2"}  # type: ignore[index]
    assert subject.store.detail(record(2)) is None  # a record without a detail


def test_a_detail_whose_bytes_changed_is_refused(subject: Subject) -> None:
    run = stored(subject, 1)
    subject.store.append(run, keep=3)
    body = bytearray(subject.store._read(detail_key(STACK, "web-1")) or b"")
    body[-5] ^= 0x01
    subject.overwrite(detail_key(STACK, "web-1"), bytes(body))
    with pytest.raises(HistoryError, match=f"run detail {detail_key(STACK, 'web-1')}: its SHA-256 is"):
        subject.store.detail(run)


def test_a_missing_detail_is_an_error_naming_it(subject: Subject) -> None:
    run = stored(subject, 1)
    subject.store._remove(detail_key(STACK, "web-1"))
    with pytest.raises(HistoryError, match=re.escape(f"{subject.store.location}/{detail_key(STACK, 'web-1')}: not in the")):
        subject.store.detail(run)


def test_an_index_that_is_no_list_of_records_is_an_error_naming_it(subject: Subject) -> None:
    for junk in (b"{not json", b'{"id": "web-1"}', b'[{"id": "web-1"}]', b"\xff\xfe"):
        subject.overwrite(index_key(STACK), junk)
        with pytest.raises(HistoryError, match=re.escape(f"run index {subject.store.location}/{index_key(STACK)}: not a list")):
            subject.store.records(STACK)


def test_an_index_holding_another_stacks_record_is_refused(subject: Subject) -> None:
    """Its detail key would be the other stack's: reading or dropping it would reach there."""
    for other in (record(1, stack="fleet.db"), record(1, run_id="../../fleet.db/runs/web-1")):
        subject.overwrite(index_key(STACK), json.dumps([other.model_dump(mode="json", by_alias=True)]).encode())
        with pytest.raises(HistoryError, match="holds run"):
            subject.store.records(STACK)
        with pytest.raises(HistoryError, match="holds run"):
            subject.store.append(record(2), keep=1)


BAD_STACKS = ("..", ".", "", "../fleet.web", "a/b", "/etc", "fleet.web\n", "web%2f..", "x" * 101)
BAD_RUNS = ("..", ".", "", "../web-1", "a/b", "Web-1", "web_1", "web-1\n", "web-1/../../x")


def test_a_stack_or_run_id_that_could_leave_the_root_is_refused(subject: Subject, tmp_path: Path) -> None:
    before = file_keys(tmp_path)
    for stack in BAD_STACKS:
        with pytest.raises(HistoryError, match="no stack name"):
            subject.store.put_detail(stack, "web-1", b"x")
        with pytest.raises(HistoryError, match="no stack name"):
            subject.store.records(stack)
        with pytest.raises(HistoryError, match="no stack name"):
            subject.store.append(record(1).model_copy(update={"stack": stack}), keep=3)
    for run_id in BAD_RUNS:
        with pytest.raises(HistoryError, match="no run id"):
            subject.store.put_detail(STACK, run_id, b"x")
        bad = record(1, ref=DetailRef(key=detail_key(STACK, "web-1"), sha256="0" * 64, bytes=1))
        with pytest.raises(HistoryError, match="no run id"):
            subject.store.append(bad.model_copy(update={"id": run_id}), keep=3)
        with pytest.raises(HistoryError, match="no run id"):
            subject.store.detail(bad.model_copy(update={"id": run_id}))
    assert subject.keys() == [] and file_keys(tmp_path) == before


# store_of: --history-store and the backend


def test_off_keeps_no_history(tmp_path: Path) -> None:
    assert store_of("off", backend=None, state_dir=tmp_path) is None
    assert store_of("off", backend="s3://bucket", state_dir=tmp_path) is None


def test_the_file_backend_by_default_keeps_it_beside_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = store_of("backend", backend=None, state_dir=Path("state"))
    assert isinstance(store, FileHistory)
    root = tmp_path.resolve() / "state" / ".hubwright" / "history"
    assert store.root == root and store.location == f"file://{root}"
    store.put_detail(STACK, "web-1", b"x")
    assert file_keys(root) == [detail_key(STACK, "web-1")]


def test_a_file_backend_url_keeps_it_beside_that_state(tmp_path: Path) -> None:
    store = store_of("backend", backend=f"file://{tmp_path}/shared", state_dir=tmp_path / "unused")
    assert isinstance(store, FileHistory) and store.root == tmp_path / "shared" / ".hubwright" / "history"


def test_a_file_url_is_the_root_itself(tmp_path: Path) -> None:
    store = store_of(f"file://{tmp_path}/runs", backend="https://api.pulumi.com", state_dir=tmp_path)
    assert isinstance(store, FileHistory) and store.root == tmp_path / "runs"


@pytest.mark.parametrize("backend", CLOUD_BACKENDS)
def test_a_backend_without_objects_to_write_is_refused_naming_the_way_out(tmp_path: Path, backend: str) -> None:
    with pytest.raises(NoStore) as said:  # the commands take it as "off", said once (history.options.store_from)
        store_of("backend", backend=backend, state_dir=tmp_path)
    shown = backend.replace(":pw@", ":***@")
    assert str(said.value).startswith(f"--history-store backend: the backend {shown} keeps no objects hubwright can "
                                      "write") and "set --history-store to a file:// or s3:// URL" in str(said.value)
    assert ":pw@" not in str(said.value)


@pytest.mark.parametrize("spec", ["", "on", "Backend", "gs://bucket", "https://api.pulumi.com", "/var/history",
                                  "file://", "s3:///prefix"])
def test_any_other_spec_is_refused_naming_the_option(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ValueError, match="--history-store"):
        store_of(spec, backend=None, state_dir=tmp_path)


def test_an_s3_url_builds_the_client_the_pulumi_cli_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    local = store_of("s3://state/p?endpoint=10.0.0.9:9000&disableSSL=true&s3ForcePathStyle=true",
                     backend=None, state_dir=tmp_path)
    assert isinstance(local, S3History)
    assert local.client.meta.endpoint_url == "http://10.0.0.9:9000"
    assert local.client.meta.config.s3 == {"addressing_style": "path"}
    assert local.client.meta.region_name == "eu-central-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    cloud = store_of("backend", backend="s3://state/hub?region=ap-south-1", state_dir=tmp_path)
    assert isinstance(cloud, S3History) and cloud.location == "s3://state/hub/.hubwright/history"
    assert cloud.client.meta.endpoint_url.startswith("https://") and cloud.client.meta.region_name == "ap-south-1"
    assert cloud.client.meta.config.s3 == {"addressing_style": "auto"}
    assert store_of("s3://state?endpoint=h:1", backend=None, state_dir=tmp_path).client.meta.region_name == "eu-west-1"  # type: ignore[union-attr]
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert store_of("s3://state", backend=None, state_dir=tmp_path).client.meta.region_name == "us-east-1"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="--history-store s3://state.profile=nope.*nope"):
        store_of("s3://state?profile=nope", backend=None, state_dir=tmp_path)


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1]


def test_the_s3_backend_keeps_it_in_its_bucket_beside_the_state(s3: Any, moto: Any, tmp_path: Path) -> None:
    backend = f"s3://{BUCKET}/hub?endpoint=127.0.0.1:{port_of(moto.url)}&disableSSL=true&s3ForcePathStyle=true"
    store = store_of("backend", backend=backend, state_dir=tmp_path)
    assert isinstance(store, S3History) and store.location == f"s3://{BUCKET}/hub/.hubwright/history"
    store.append(record(1, ref=store.put_detail(STACK, "web-1", detail_body(diff(), "log"))), keep=3)
    assert bucket_keys(s3) == [f"hub/.hubwright/history/{index_key(STACK)}",
                               f"hub/.hubwright/history/{detail_key(STACK, 'web-1')}"]
    (run,) = store.records(STACK)
    assert store.detail(run)["log"] == "log"  # type: ignore[index]


def test_an_s3_url_is_the_root_itself(s3: Any, moto: Any, tmp_path: Path) -> None:
    query = f"endpoint=127.0.0.1:{port_of(moto.url)}&disableSSL=true&s3ForcePathStyle=true"
    for spec, prefix in ((f"s3://{BUCKET}/runs/hub/?{query}&region=us-east-1", "runs/hub/"),
                         (f"s3://{BUCKET}?{query}", "")):
        store = store_of(spec, backend="https://api.pulumi.com", state_dir=tmp_path)
        assert isinstance(store, S3History) and store.location == f"s3://{BUCKET}/{prefix}".rstrip("/")
        store.put_detail(STACK, "web-1", b"x")
        assert f"{prefix}{detail_key(STACK, 'web-1')}" in bucket_keys(s3)


def test_an_s3_failure_is_an_error_naming_the_object(s3: Any) -> None:
    store = S3History(s3, "no-such-bucket", "p")
    with pytest.raises(HistoryError, match=f"s3://no-such-bucket/p/{index_key(STACK)}: NoSuchBucket"):
        store.records(STACK)
    with pytest.raises(HistoryError, match=f"s3://no-such-bucket/p/{detail_key(STACK, 'web-1')}: NoSuchBucket"):
        store.put_detail(STACK, "web-1", b"x")
