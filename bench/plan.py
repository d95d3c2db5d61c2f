"""How long the offline plan takes, as a user runs it: `python -m bench.plan --clusters 10000`.

Writes a folder of N Cluster files (one per cluster, as a GitOps repository holds them; Namespaces beside them)
across two accounts and two regions, then times `python -m automation plan --format json` over it as a
subprocess, its JSON going to a file. Prints one JSON object:

  plan_s, ms_per_stack      the whole command: reading the files, resolving, planning every stack, writing JSON
  bound_s                   stacks x the mock runtime's serial cost per stack (bound_ms_per_stack: planned in this
                            process over --sample stacks) / jobs: what planning alone costs on these cores
  plan_over_bound           plan_s / bound_s
  peak_rss_mb               the largest sum, sampled every 0.1 s, of the resident memory of the command and every
                            process under it (workers, the fork server): shared pages count once per process
  peak_pss_mb               the same sum in proportional set size (shared pages split between their processes)
  json_mb                   the output's size
  one_cluster_s             `plan --cluster NS/NAME` of one cluster out of the same folder, warm: after the whole
                            plan filled the cache (--one)
  one_cluster_cold_s        the same with an empty cache (--one)
  one_cluster_again_s       the same once more: nothing moved since, so its last plan is written (--one)
  serial_identical          the output of --jobs 1 is the same bytes (--check-serial; a second, serial run)

With --diff, the whole plan above is the baseline, and then, warm (its cache filled):
  diff_one_s                `plan --baseline plan.json --format json` after one cluster file changed (its API host:
                            its zone, record and association replaced); diff_one_changed stacks, diff_one_json_kb
                            (every stack listed, the unchanged with no resources), and the same diff as a pull
                            request's comment: diff_one_markdown_kb, diff_one_markdown_sections (one per stack shown)
  diff_hub_s                the same after a hub change touching about 1 % of the stacks (the CIDR of the
                            endpoint VPCs those stacks' endpoints use, which their security groups admit); diff_hub_changed stacks (the cluster above among them) for a hub change to diff_hub_pct %
  diff_ref_s                `plan --baseline-ref HEAD~1 --format markdown` with both changes committed in a git
                            repository of the folder: the baseline planned from REF in a worktree, then the diff

Every run gets its own cache (--cache DIR in the bench's temporary folder): cold means that folder was empty.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from automation.adapters.engine.plan import plan_stack, raise_invalid
from automation.adapters.engine.plan_pool import default_jobs
from automation.adapters.engine.proctree import descendants
from bench import fleets
from stacks.model.loading import parse
from stacks.names import API_VERSION
from stacks.resolve import Fleet, resolve_fleet

TENANTS = 7
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def hub_doc(n: int) -> dict[str, Any]:
    inventory = [
        {"region": region, "vpcID": f"vpc-0hub{r}{i}", "cidr": f"10.{100 + r * 10 + i}.0.0/16",
         "subnets": [{"subnetID": f"subnet-0{r}{i}{z}", "availabilityZone": f"{region}{z}"} for z in "abc"]}
        for r, region in enumerate(fleets.REGIONS) for i in range(max(1, -(-n // (2 * 40))))
    ]
    return {"apiVersion": API_VERSION, "kind": "HubConfig", "metadata": {"name": "bench"},
            "spec": {"accountID": "111111111111", "region": "us-east-1",
                     "credentials": {"roleARN": "arn:aws:iam::111111111111:role/hubwright-hub"},
                     "roleAccountMap": {a: f"arn:aws:iam::{a}:role/hubwright" for a in fleets.ACCOUNTS},
                     "privateLink": {"endpointsPerVPC": 50},
                     "endpointVPCInventory": inventory,
                     "associatedVPCs": [{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "10.0.0.0/16"}]}}


def cluster_doc(i: int) -> dict[str, Any]:
    name = f"c{i:05d}"
    return {"apiVersion": API_VERSION, "kind": "HubCluster",
            "metadata": {"name": name, "namespace": f"tenant-{i % TENANTS}"},
            "spec": {"accountID": fleets.ACCOUNTS[i % TENANTS % 2], "region": fleets.REGIONS[(i // 2) % 2],
                     "infraID": f"{name}-abcde", "apiURL": f"https://api.{name}.example.com:6443",
                     "network": {"vpcID": f"vpc-0c{i:05d}", "cidr": f"10.{i // 256}.{i % 256}.0/24",
                                 "routeTableIDs": [f"rtb-0{i:05d}"], "nodeSecurityGroupIDs": [f"sg-0{i:05d}"]},
                     "privateLink": {"enabled": True}}}


def write_fleet(root: Path, n: int) -> tuple[Path, Path]:
    """hub.yaml and clusters/ (one file per cluster, namespaces.yaml beside them) under `root`, dated a minute ago
    (a plan trusts no stamp of a file written in the last two seconds)."""
    hub = root / "hub.yaml"
    hub.write_text(yaml.dump(hub_doc(n), Dumper=DUMPER))
    folder = root / "clusters"
    folder.mkdir()
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}
                  for name, annotations in fleets.owners(TENANTS).items()]
    (folder / "namespaces.yaml").write_text(yaml.dump_all(namespaces, Dumper=DUMPER))
    for i in range(n):
        (folder / f"c{i:05d}.yaml").write_text(yaml.dump(cluster_doc(i), Dumper=DUMPER))
    backdate(root)
    return hub, folder


def backdate(root: Path, seconds: int = 60) -> None:
    """`root` (a file, or a folder and everything under it) dated `seconds` ago."""
    old = time.time() - seconds
    for path in [root, *(root.rglob("*") if root.is_dir() else ())]:
        os.utime(path, (old, old))


def generated_fleet(n: int) -> Fleet:
    """The same fleet, parsed in memory (no files)."""
    return Fleet(hub=parse(hub_doc(n)), clusters=tuple(parse(cluster_doc(i)) for i in range(n)),
                 namespaces=fleets.owners(TENANTS))


def serial_ms_per_stack(n: int, sample: int) -> float:
    """The mock runtime's cost of one stack, planned in this process (after one to warm up)."""
    inputs = raise_invalid(resolve_fleet(generated_fleet(min(n, sample + 1))))
    plan_stack(inputs[0])
    started = time.perf_counter()
    for one in inputs[1:]:
        plan_stack(one)
    return (time.perf_counter() - started) * 1000 / max(1, len(inputs) - 1)


class TreeMemory:
    """The peak, over samples every 0.1 s, of the summed RSS and PSS of a process and all under it."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_rss = self.peak_pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            rss = pss = 0.0
            for pid in [self.pid, *descendants(self.pid)]:
                try:
                    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
                        fields = {line.split(":")[0]: int(line.split()[1]) for line in fh if line.endswith("kB\n")}
                except OSError:
                    continue
                rss += fields.get("Rss", 0) / 1024
                pss += fields.get("Pss", 0) / 1024
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_plan(hub: Path, folder: Path, out: Path, *args: str, ok: tuple[int, ...] = (0,),
             cwd: Path | None = None) -> tuple[float, TreeMemory]:
    command = [sys.executable, "-m", "automation", "plan", "--hub", str(hub), "--clusters", str(folder), *args]
    if "--format" not in args:
        command += ["--format", "json"]
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with open(out, "wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.PIPE, cwd=cwd, env=env)
        memory = TreeMemory(proc.pid)
        _, err = proc.communicate()
    memory.stop()
    if proc.returncode not in ok:
        raise RuntimeError(f"plan failed ({proc.returncode}): {err.decode()[-2000:]}")
    return time.monotonic() - started, memory


def changed_stacks(diff: Path) -> int:
    return sum(1 for s in json.loads(diff.read_text())["stacks"] if s["change"] != "unchanged")


def change_one_cluster(folder: Path, i: int) -> None:
    path = folder / f"c{i:05d}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["apiURL"] = doc["spec"]["apiURL"].replace("https://api.", "https://api2.")
    path.write_text(yaml.dump(doc, Dumper=DUMPER))


def change_hub(hub: Path, plan: Path, share: float) -> int:
    """Move the CIDR of the endpoint VPCs that about `share` of the stacks use (whole VPCs, most used first): their
    endpoints' security groups change; the number of stacks whose endpoint is in them."""
    users: dict[str, int] = {}
    for stack in json.loads(plan.read_text())["stacks"]:
        for res in stack["resources"]:
            if res["type"] == "aws:ec2/vpcEndpoint:VpcEndpoint":
                users[res["inputs"]["vpcId"]] = users.get(res["inputs"]["vpcId"], 0) + 1
    chosen, covered, want = set(), 0, share * sum(users.values())
    for vpc, count in sorted(users.items(), key=lambda kv: (-kv[1], kv[0])):
        if covered >= want:
            break
        chosen.add(vpc)
        covered += count
    doc = yaml.safe_load(hub.read_text())
    for k, vpc in enumerate(doc["spec"]["endpointVPCInventory"]):
        if vpc["vpcID"] in chosen:  # a secondary range in use: the endpoint's security group admits it too
            vpc["cidr"] = f"172.{16 + k // 256}.{k % 256}.0/24"
    hub.write_text(yaml.dump(doc, Dumper=DUMPER))
    return covered


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args], cwd=root,
                   check=True, capture_output=True)


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--sample", type=int, default=40, help="stacks planned in-process for the bound")
    parser.add_argument("--one", action="store_true", help="also time `plan --cluster` of one cluster")
    parser.add_argument("--check-serial", action="store_true", help="also run --jobs 1 and compare the bytes")
    parser.add_argument("--diff", action="store_true", help="also time the fleet diff's cases (above)")
    parser.add_argument("--policy", choices=("off", "advisory", "mandatory"), default="mandatory",
                        help="the policy pack's rules over every stack (the plan's --policy)")
    args = parser.parse_args()

    result: dict[str, Any] = {"clusters": args.clusters, "jobs": args.jobs, "policy": args.policy}
    with tempfile.TemporaryDirectory(prefix="hubwright-bench-plan-") as tmp:
        root = Path(tmp)
        hub, folder = write_fleet(root, args.clusters)
        out, cache = root / "plan.json", root / "cache"
        one_cluster = f"tenant-{(args.clusters // 2) % TENANTS}/c{args.clusters // 2:05d}"
        if args.one:
            wall_one, _ = run_plan(hub, folder, root / "one.json", "--cluster", one_cluster,
                                   "--cache", str(root / "cache-one"))
            result["one_cluster_cold_s"] = round(wall_one, 2)
        wall, memory = run_plan(hub, folder, out, "--jobs", str(args.jobs), "--policy", args.policy,
                                "--cache", str(cache))
        bound_ms = serial_ms_per_stack(args.clusters, args.sample)
        bound = args.clusters * bound_ms / 1000 / args.jobs
        result.update({"plan_s": round(wall, 1), "ms_per_stack": round(wall * 1000 / args.clusters, 1),
                       "bound_ms_per_stack": round(bound_ms, 1), "bound_s": round(bound, 1),
                       "plan_over_bound": round(wall / bound, 2),
                       "peak_rss_mb": round(memory.peak_rss), "peak_pss_mb": round(memory.peak_pss),
                       "json_mb": round(os.path.getsize(out) / 1e6, 1)})
        if args.one:
            wall_one, _ = run_plan(hub, folder, root / "one.json", "--cluster", one_cluster, "--cache", str(cache))
            result["one_cluster_s"] = round(wall_one, 2)
            wall_one, _ = run_plan(hub, folder, root / "one.json", "--cluster", one_cluster, "--cache", str(cache))
            result["one_cluster_again_s"] = round(wall_one, 2)
        if args.check_serial:
            serial = root / "serial.json"
            run_plan(hub, folder, serial, "--jobs", "1", "--no-cache")
            result["serial_identical"] = digest(serial) == digest(out)
        if args.diff:
            git(root, "init", "-q")
            git(root, "add", "-A")
            git(root, "commit", "-q", "-m", "baseline")
            diff = root / "diff.json"
            change_one_cluster(folder, args.clusters // 2)
            backdate(folder / f"c{args.clusters // 2:05d}.yaml", 30)  # the one file a pull request changes
            wall_diff, _ = run_plan(hub, folder, diff, "--baseline", str(out), "--format", "json",
                                    "--policy", args.policy, "--cache", str(cache))
            result.update({"diff_one_s": round(wall_diff, 2), "diff_one_changed": changed_stacks(diff),
                           "diff_one_json_kb": round(os.path.getsize(diff) / 1e3, 1)})
            comment = root / "diff-one.md"
            run_plan(hub, folder, comment, "--baseline", str(out), "--format", "markdown", "--policy", args.policy,
                     "--cache", str(cache))
            result.update({"diff_one_markdown_kb": round(os.path.getsize(comment) / 1e3, 1),
                           "diff_one_markdown_sections": comment.read_text().count("<details>")})
            touched = change_hub(hub, out, 0.01)
            backdate(hub, 20)
            wall_diff, _ = run_plan(hub, folder, diff, "--baseline", str(out), "--format", "json",
                                    "--policy", args.policy, "--cache", str(cache))
            result.update({"diff_hub_s": round(wall_diff, 2), "diff_hub_changed": changed_stacks(diff),
                           "diff_hub_pct": round(100 * touched / args.clusters, 2)})
            git(root, "commit", "-q", "-a", "-m", "one cluster and the hub")
            wall_diff, _ = run_plan(hub, folder, root / "diff.md", "--baseline-ref", "HEAD~1", "--format",
                                    "markdown", "--policy", args.policy, "--cache", str(cache), cwd=root)
            result.update({"diff_ref_s": round(wall_diff, 2),
                           "diff_ref_markdown_kb": round(os.path.getsize(root / "diff.md") / 1e3, 1)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
