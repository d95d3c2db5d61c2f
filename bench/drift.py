"""What the drift check costs per stack: `python -m bench.drift --json`.

Needs the real `pulumi` CLI and `pulumi-resource-pulumi-python` on PATH (scripts/tools.sh puts them in .tools/bin):

    PATH=$PWD/.tools/bin:$PATH .venv/bin/python -m bench.drift --json

For stacks of 1, 10 and 50 dynamic resources (doubles.pulumi_programs.cloudy: each resource's "cloud" is a
file, so a refresh reads one file per resource through the dynamic provider; no network, no cloud account),
on a file:// backend, the median of --runs runs (interleaved, so a change in the machine's load hits all alike):

  preview_refresh_s   PulumiEngine.preview: `pulumi preview --refresh`, the drift check (refresh + diff, no write)
  preview_s           the same preview without refresh (what the drift check ran before: blind to the cloud)
  up_noop_s           PulumiEngine.up with nothing to change (the update, its history entry, the applied tag)
  refresh_cost_s      preview_refresh_s - preview_s: what reading the cloud adds
  applied_s           PulumiEngine.applied: the tag and the stack outputs (two CLI calls)
  applied_legacy_s    the old applied(): one page of the stack's history (one CLI call; more once updates failed)

A real provider's read is a cloud API call per resource; here it is a file read, so refresh_cost_s is mostly the
CLI's and the plugin's own cost per resource, a floor for what AWS adds.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from automation.adapters.engine.pulumi_engine import PulumiEngine
from doubles.pulumi_programs import cloudy, engine_settings, make_inputs


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_stack(count: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"hubwright-bench-drift-{count}-") as tmp:
        cloud = Path(tmp) / "cloud"
        engine = PulumiEngine(engine_settings(Path(tmp) / "state"),
                              program_factory=functools.partial(cloudy, cloud=str(cloud), count=count))
        inputs = make_inputs()
        create = timed(lambda: engine.up(inputs, message="bench: create"))
        spans: dict[str, list[float]] = {k: [] for k in ("preview_refresh_s", "preview_s", "up_noop_s",
                                                          "applied_s", "applied_legacy_s")}

        def plain_preview() -> None:
            with engine._stack(inputs.stack, inputs, create=False) as (_, st):  # noqa: SLF001 - the pre-#14 preview
                st.preview(color="never")

        def legacy_applied() -> None:
            with engine._stack(inputs.stack, None, create=False) as (_, st):  # noqa: SLF001
                engine._applied_from_history(st)  # noqa: SLF001

        def drift_check() -> None:
            result = engine.preview(inputs)
            assert result.ok, result  # nothing drifted: the check's cost when there is nothing to find

        for _ in range(runs):
            spans["preview_refresh_s"].append(timed(drift_check))
            spans["preview_s"].append(timed(plain_preview))
            spans["up_noop_s"].append(timed(lambda: engine.up(inputs, message="bench: no-op")))
            spans["applied_s"].append(timed(lambda: engine.applied(inputs.stack)))
            spans["applied_legacy_s"].append(timed(legacy_applied))
        engine.destroy(inputs.stack, message="bench: done")

    medians = {k: round(statistics.median(v), 3) for k, v in spans.items()}
    medians["refresh_cost_s"] = round(medians["preview_refresh_s"] - medians["preview_s"], 3)
    medians["up_create_s"] = round(create, 3)
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drift", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50", help="resources per stack, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs of each operation per stack (the median is shown)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default prints it indented)")
    args = parser.parse_args()
    os.environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    result = {"runs": args.runs, "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
              "resources": {str(n): measure_stack(n, args.runs) for n in sizes}}
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
