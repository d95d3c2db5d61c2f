"""The service's logs: text for a person at a terminal (the default), or one JSON object a line for a log shipper.

    python -m automation serve --log-format json      (or HUBWRIGHT_LOG_FORMAT=json)

In json mode every record is one line {"time", "level", "logger", "message", ...} with the record's extra fields
beside them (`LOG.info(..., extra={"fields": {...}})`), so Loki, Fluent Bit or CloudWatch parse it without a
pattern. The run log (`hubwright.run`, automation.service.runs.Runs.run) writes one such line per
engine run: cluster, stack, operation, result, duration, changes, reason; docs/service.md lists the fields.
The engine's worker processes (automation.adapters.engine.worker) write to the same stderr: they read the format from
HUBWRIGHT_LOG_FORMAT / HUBWRIGHT_LOG_LEVEL (`environment()`, which `serve` exports) and log their own uncaught
errors through it, so json mode has no line that is not JSON.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Mapping, TextIO

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = "fields"  # the `extra` key that carries a record's structured fields
FORMAT_ENV, LEVEL_ENV = "HUBWRIGHT_LOG_FORMAT", "HUBWRIGHT_LOG_LEVEL"
RUN_LOG = logging.getLogger("hubwright.run")  # one line per engine run: the service's and the runners'


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time (RFC 3339, UTC, ms), level, logger, message, the record's
    structured fields, and the traceback as `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key, value in (getattr(record, FIELDS, None) or {}).items():
            line.setdefault(key, value)  # never overwrite the four fields above
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """The text format as before, with a record's structured fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, FIELDS, None)
        if not fields:
            return text
        head, newline, rest = text.partition("\n")  # a traceback stays below the line
        pairs = " ".join(f"{k}={json.dumps(v, separators=(',', ':')) if not isinstance(v, str) else v}"
                         for k, v in fields.items() if v not in (None, "", {}))
        return f"{head} [{pairs}]{newline}{rest}"


def configure(level: str = "INFO", log_format: str = "text", *, stream: TextIO | None = None) -> logging.Handler:
    """Point the root logger at one handler on `stream` (stderr) in `log_format`; returns the handler."""
    if log_format not in FORMATS:
        raise ValueError(f"--log-format: {log_format!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def environment(level: str, log_format: str) -> dict[str, str]:
    """What a child process (an engine worker) needs to log as this one does (`configure_from`)."""
    return {FORMAT_ENV: log_format, LEVEL_ENV: level}


def configure_from(env: Mapping[str, str] = os.environ) -> logging.Handler:
    """In a child process: the format and level its parent exported (text, INFO when unset); uncaught errors are
    logged as one record (with its traceback) instead of Python's bare traceback."""
    handler = configure(env.get(LEVEL_ENV) or "INFO", env.get(FORMAT_ENV) or "text")

    def uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        logging.getLogger("hubwright.worker").critical("uncaught %s: %s", kind.__name__, error,
                                                      exc_info=(kind, error, trace))
    sys.excepthook = uncaught
    return handler


def log_run(operation: str, result: str, seconds: float, *, changes: Mapping[str, int] | None, drifted: list[str],
            reason: str, error: str, stack: str, cluster: str, **more: Any) -> None:
    """An engine run's one line (`hubwright.run`), the service's (automation.service.runs) and a runner's
    (automation.runner): INFO when it did what it should (a preview that found drift says `drifted`), WARNING when
    it failed. `changes` None: the run returned nothing. `more`: further fields (a runner's name, the run's)."""
    if operation == "preview" and result == "failed":
        result = "drifted"  # the check ran; the cloud differs
    fields: dict[str, Any] = {"cluster": cluster or None, "stack": stack, "operation": operation, "result": result,
                              "duration": round(seconds, 3), **more}
    if changes is not None:
        fields["changes"] = dict(changes)
        if drifted:
            fields["drifted"] = list(drifted)
    if result in ("failed", "error", "locked"):
        fields["reason"] = reason
        fields["error"] = error[:2048]
    level = logging.WARNING if result in ("failed", "error") else logging.INFO
    RUN_LOG.log(level, "%s %s: %s %s in %.1fs%s", cluster or "-", stack or "-", operation, result, seconds,
                f" ({reason})" if fields.get("reason") else "", extra={FIELDS: fields})
