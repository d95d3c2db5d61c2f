"""What a failure costs in Events and log lines: `python -m bench.failure_noise`.

The service over kmock's Kubernetes emulator (doubles.MockKubeAPI) with the recording engine (doubles.engine),
as tests/test_reconcile.py runs it. One HubCluster whose `up` fails --failures times with the same error, then
succeeds. Counted: the Events on the cluster by reason, the hubwright log lines (every logger under
`hubwright`, INFO and up), and those per failed run. The real engine's own output (the Automation API's gRPC
server) is not in this count: it needs the pulumi CLI.

Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import Counter

from doubles.engine import RecordingEngine
from doubles.service_env import on_kmock, quiet, wait_until


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.levelname} {record.getMessage()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failure_noise", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--failures", type=int, default=5, help="failed ups before the one that succeeds")
    args = parser.parse_args(argv)
    lines = Lines()
    root = logging.getLogger("hubwright")
    root.addHandler(lines)
    root.setLevel(logging.INFO)
    engine = RecordingEngine()
    with on_kmock() as env:
        engine.fail("up", f"{env.ns}.prod-1", times=args.failures,
                    message="AccessDenied: not authorized to perform ec2:CreateVpcEndpointService")
        env.create("prod-1")
        with env.running(engine, backoff_base=0.05, backoff_cap=0.2) as service:
            wait_until(lambda: env.ready("prod-1"), 60, what="Ready after the failures")
            quiet(service)
        said = env.events(name="prod-1")
    events = Counter(reason for _, reason, _ in said)
    root.removeHandler(lines)
    runs = engine.count("up")
    print(json.dumps({"failures": args.failures, "ups": runs, "events": dict(sorted(events.items())),
                      "events_total": sum(events.values()), "log_lines": len(lines.lines),
                      "log_lines_per_failed_run": round(len(lines.lines) / max(args.failures, 1), 2),
                      "update_started_repeating_the_error": sum(
                          1 for _, r, m in said if r == "UpdateStarted" and "AccessDenied" in m)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
