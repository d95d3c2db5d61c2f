"""What reading a stack's run history costs, and what one run stores: `python -m bench.history_store`.

For each store (FileHistory on a temporary directory, S3History on a moto_server this starts), with 10 and 1000
records in the stack's index: the time to read them (`records`) and the newest run's detail (`detail`), as
`python -m automation history` does, and to add a run (`append` of the newest again: the index's read-modify-write
at that size). The detail is a realistic one: a diff of 8 resources with a few properties each, a 20 KiB log.
Prints one JSON object:

  <store>.read_ms_p50_at_N      records(stack) + detail(newest), milliseconds, median of --reps
  <store>.append_ms_p50_at_N    append(newest, keep=N), milliseconds, median of --reps
  index_bytes_per_record        the index's size over its records (the same bytes in either store)
  detail_bytes                  one run's detail object, stored (gzip); detail_bytes_uncompressed before
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from automation.adapters.history import index_key
from automation.adapters.history.files import FileHistory, Keyed
from automation.adapters.history.s3 import S3History
from bench.discovery import moto_server
from stacks.plandiff.compare import PropertyChange, ResourceChange, StackDiff
from stacks.runs.cause import Cause
from stacks.runs.record import RunRecord, detail_body

STACK = "fleet.web"
TYPES = ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:ec2/securityGroup:SecurityGroup", "aws:iam/role:Role",
         "aws:ec2/routeTable:RouteTable", "aws:ec2/vpcEndpoint:VpcEndpoint", "aws:route53/record:Record",
         "aws:ec2/vpcPeeringConnection:VpcPeeringConnection")


def realistic_diff() -> StackDiff:
    resources = []
    for i, kind in enumerate(TYPES):
        name = kind.rsplit(":", 1)[1].lower()
        props = {"tags": PropertyChange({"Name": f"web-{name}", "hubwright/cluster": "fleet/web", "generation": "11"},
                                        {"Name": f"web-{name}", "hubwright/cluster": "fleet/web", "generation": "12"}),
                 "description": PropertyChange(f"web {name} (generation 11)", f"web {name} (generation 12)"),
                 "cidrBlocks": PropertyChange([f"10.{i}.0.0/16"], [f"10.{i}.0.0/16", f"10.{i + 100}.0.0/16"])}
        resources.append(ResourceChange(f"urn:pulumi:{STACK}::hubwright::{kind}::web-{name}", kind,
                                        "replace" if i == 3 else "update", props))
    return StackDiff(STACK, "changed", tuple(resources))


def realistic_log(size: int = 20 * 1024) -> str:
    lines: list[str] = []
    i = 0
    while sum(len(line) + 1 for line in lines) < size:
        kind = TYPES[i % len(TYPES)]
        lines.append(f"    ~ {kind} web-{kind.rsplit(':', 1)[1].lower()} updating ({i % 37}s) [diff: ~tags,description]")
        ids = hashlib.sha256(str(i).encode()).hexdigest()  # IDs as the cloud makes them: no pattern gzip can use
        lines.append(f"@ updating.... {i} resources in progress; sg-{ids[:17]} vpc-{ids[17:34]} subnet-{ids[34:51]}")
        i += 1
    return "\n".join(lines)[:size] + "\n"


def record(n: int, body: bytes, store: Keyed) -> RunRecord:
    ref = store.put_detail(STACK, f"web-{n:05d}", body)
    minute, second = divmod(n, 60)
    return RunRecord.model_validate({
        "id": f"web-{n:05d}", "stack": STACK, "cluster": "fleet/web", "operation": "up",
        "cause": Cause.of("Spec", "the spec changed (generation 12)", 12), "executor": "runners",
        "started": f"2026-03-01T{minute // 60:02d}:{minute % 60:02d}:{second:02d}Z",
        "ended": f"2026-03-01T{minute // 60:02d}:{minute % 60:02d}:{second:02d}.5Z", "result": "Succeeded",
        "message": "hubwright: cluster fleet/web: 8 resources changed (update 7, replace 1)",
        "changes": {"update": 7, "replace": 1, "same": 41}, "detail": ref,
        "known": ["vpc-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60718", "sg-0a1b2c3d4e5f60718", "123456789012"]})


def p50_ms(call: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def measure(store: Keyed, sizes: list[int], reps: int, body: bytes) -> tuple[dict[str, Any], float]:
    """The store's timings at each size; the index's bytes per record at the largest."""
    out: dict[str, Any] = {}
    per_record = 0.0
    for n in sizes:
        # The first n-1 records written as one index (n appends would cost n² to fill it), the newest appended.
        older = [record(i, body, store) for i in range(n - 1)]
        index = [r.model_dump(mode="json", by_alias=True) for r in older]
        store._write(index_key(STACK), json.dumps(index, separators=(",", ":")).encode(), "application/json")
        newest = record(n - 1, body, store)
        store.append(newest, keep=n)
        assert len(store.records(STACK)) == n
        out[f"read_ms_p50_at_{n}"] = p50_ms(lambda: store.detail(store.records(STACK)[-1]), reps)
        out[f"append_ms_p50_at_{n}"] = p50_ms(lambda: store.append(newest, keep=n), reps)
        per_record = len(store._read(index_key(STACK)) or b"") / n
    return out, round(per_record, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, action="append", help="records in the index (repeatable)")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    sizes = sorted(args.records or [10, 1000])
    body = detail_body(realistic_diff(), realistic_log())
    out: dict[str, Any] = {"detail_bytes": len(body), "detail_bytes_uncompressed": len(gzip.decompress(body))}
    with tempfile.TemporaryDirectory(prefix="hubwright-bench-history-") as tmp:
        out["file"], out["index_bytes_per_record"] = measure(FileHistory(Path(tmp)), sizes, args.reps, body)
    import boto3

    with moto_server() as url:
        client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
        client.create_bucket(Bucket="state")
        out["s3"], _ = measure(S3History(client, "state", ".hubwright/history"), sizes, args.reps, body)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
