"""What a failed run writes to the log with the real engine: `python -m bench.engine_noise` (needs `pulumi`).

PulumiEngine (the real CLI, a file backend in a temporary directory) runs `up` --failures times on a program
whose one resource the "cloud" refuses (doubles.pulumi_programs:cloudy, fail=True). Counted: every log record
of the process by logger (INFO and up), the lines they print (a traceback's included), and whether the runs'
errors read the same. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import tempfile
import time
from collections import Counter
from pathlib import Path

from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.engine.protocol import EngineError
from doubles.pulumi_programs import cloudy, engine_settings, make_inputs


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: Counter[str] = Counter()
        self.lines = 0
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records[record.name] += 1
        self.lines += len(self.format(record).splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_noise", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--failures", type=int, default=3)
    args = parser.parse_args(argv)
    lines = Lines()
    logging.getLogger().addHandler(lines)
    logging.getLogger().setLevel(logging.INFO)
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = PulumiEngine(engine_settings(Path(tmp) / "state"),
                              program_factory=functools.partial(cloudy, cloud=str(Path(tmp) / "cloud"), fail=True))
        for attempt in range(args.failures):
            try:
                engine.up(make_inputs(), message=f"attempt {attempt + 1}")
            except EngineError as exc:
                errors.append(str(exc))
        time.sleep(2)  # the last run's language-server aftermath arrives from its own thread after up() returned
    logging.getLogger().removeHandler(lines)
    print(json.dumps({"failures": args.failures, "records_by_logger": dict(sorted(lines.records.items())),
                      "log_lines": lines.lines, "log_lines_per_failed_run": round(lines.lines / args.failures, 1),
                      "distinct_errors": len(set(errors)), "error": errors[-1] if errors else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
