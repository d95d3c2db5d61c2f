"""What a run of the Pulumi CLI says, made readable: its error lines, its policy violations, its console
permalink, its outputs, the resources a preview would change, and its progress while it runs (from the engine's
events)."""
from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime, timezone
from typing import Any, Mapping

from pulumi.automation.errors import CommandError

from automation.adapters.engine.protocol import OnProgress
from components.program import INPUTS_OUTPUT
from stacks.times import rfc3339_seconds

log = logging.getLogger("automation.adapters.engine.pulumi_engine")


ANSI_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PERMALINK = re.compile(r"(?:View in Browser(?: \(Ctrl\+O\))?|View Live|Permalink):\s*(https?://\S+)")


# The CLI's aftermath of a failure, which says only that the operation stopped: "update failed", or, by timing,
# "failed to run policy: context canceled" (or remediation) instead. Left out where a line says why (which of
# them comes, and where between stdout and stderr, varies from run to run; the same failure must read the same to
# be said once).
_AFTERMATH = re.compile(r"error: ((update|preview|refresh|destroy|import) failed|(failed to run \w+: )?context canceled)")
# grpcio's words around a language host's exception: not the user's.
_GRPC_WRAPPING = "Exception calling application: "


def readable_error(err: BaseException, limit: int = 600) -> str:
    """The CLI's failure reduced to its error lines (no usage text, no tracebacks), the same for the same failure."""
    if not isinstance(err, CommandError):
        return str(err)[:limit]
    text = ANSI_ESCAPES.sub("", str(err))
    stdout, _, stderr = text.partition("\n stderr: ")
    lines: list[str] = []
    for raw in stderr.splitlines() + stdout.splitlines():
        line = raw.strip().removeprefix("stdout: ")  # CommandError puts the stream's name before its first line
        if not line:
            continue
        if line.startswith("error:") or "Exception:" in line or "Error:" in line or ": created by " in line:
            line = re.sub(r"\?no_tmp_dir=true", "", line).replace(_GRPC_WRAPPING, "")
            if line not in lines:
                lines.append(line)
    lines = [line for line in lines if not _AFTERMATH.fullmatch(line)] or lines
    message = " | ".join(lines) or " ".join(text.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


_POLICY_LINE = re.compile(r"\[(?P<level>mandatory|advisory)\]\s+(?P<rule>[A-Za-z0-9_.-]+)[ \t]*(?:\((?P<what>[^)\n]*)\))?[ \t]*\n"
                          r"(?P<message>(?:[ \t]+(?!- \[)\S.*\n?)+)?")  # its indented lines, to the next rule


def policy_violations(output: str, limit: int = 600, *, level: str = "mandatory") -> str:
    """The violations of `level` in the CLI's output, "rule (type: name): message; ...", or "" when there are none."""
    found: list[str] = []
    for m in _POLICY_LINE.finditer(ANSI_ESCAPES.sub("", output)):
        if m["level"] != level:
            continue
        message = " ".join((m["message"] or "").split())
        line = m["rule"] + (f" ({m['what'].strip()})" if m["what"] else "") + (f": {message}" if message else "")
        if line not in found:
            found.append(line)
    text = "; ".join(found)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def now_rfc3339() -> str:
    return rfc3339_seconds(datetime.now(timezone.utc))


def permalink_of(stdout: str) -> str | None:
    m = _PERMALINK.search(stdout or "")
    return m.group(1) if m else None


def applied_output(digest: str) -> str:
    """The stack output that holds the inputs with this digest (StackInputs.to_config())."""
    return f"{INPUTS_OUTPUT}.{digest}"


def program_outputs(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The program's outputs (the engine's own `inputs.<digest>` left out)."""
    return {k: ("[secret]" if v.secret else v.value) for k, v in raw.items() if not k.startswith(f"{INPUTS_OUTPUT}.")}


DRIFT_LIMIT = 50  # RunResult.drifted names at most this many resources, then "... and N more"
# Steps that change nothing: the refresh's own reads, and resources the program only reads.
NO_CHANGE_OPS = frozenset({"same", "read", "read-replacement", "refresh"})
_ROOT_TYPE = "pulumi:pulumi:Stack"
_PROVIDER_TYPE = "pulumi:providers:"


class ChangedResources:
    """Collects, from a preview's engine events, the resources it would change (op other than same/read/refresh,
    the root stack left out). `on_event` runs on the Automation API's event-log thread."""

    def __init__(self) -> None:
        self._found: dict[str, str] = {}  # urn -> "name (type)"; one entry per resource (a replace has three steps)
        self._lock = threading.Lock()

    def on_event(self, event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        meta = getattr(pre, "metadata", None)
        if meta is None or meta.type == _ROOT_TYPE:
            return
        op = str(getattr(meta.op, "value", meta.op))
        if op in NO_CHANGE_OPS:
            return
        name = meta.urn.rsplit("::", 1)[-1]
        with self._lock:
            self._found.setdefault(meta.urn, f"{name} ({meta.type})")

    def names(self, limit: int = DRIFT_LIMIT) -> list[str]:
        with self._lock:
            found = sorted(self._found.values())
        if len(found) <= limit:
            return found
        return [*found[:limit], f"... and {len(found) - limit} more"]


class ProgressEvents:
    """Resources done / planned, from an update's engine events: a resource is planned at its first step's
    resourcePreEvent and done at its resOutputsEvent (a replace's several steps count once). Counted as the CLI's
    summary counts them: the root stack in, providers out, so a run ends at the sum of its `changes`. Reports to
    `report` at most every `every` seconds from the event-log thread, and once at the end."""

    def __init__(self, report: OnProgress, every: float = 0.5):
        self._report, self._every = report, every
        self._planned: set[str] = set()
        self._done: set[str] = set()
        self._last = float("-inf")
        self._lock = threading.Lock()

    def on_event(self, event: Any) -> None:
        pre = getattr(getattr(event, "resource_pre_event", None), "metadata", None)
        out = getattr(getattr(event, "res_outputs_event", None), "metadata", None)
        with self._lock:
            if pre is not None and not pre.type.startswith(_PROVIDER_TYPE):
                self._planned.add(pre.urn)
            elif out is not None and out.urn in self._planned:
                self._done.add(out.urn)
            else:
                return
            now = time.monotonic()
            if now - self._last < self._every:
                return
            self._last = now
        self.flush()

    def flush(self) -> None:
        with self._lock:
            done, planned = len(self._done), len(self._planned)
        try:
            self._report(done, planned)
        except Exception:  # noqa: BLE001 - progress is a report: it never fails the run
            log.exception("reporting progress failed")
