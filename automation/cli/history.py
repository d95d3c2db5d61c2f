"""`python -m automation history NS/NAME [--run ID] [--limit N] [--format text|json|markdown] [--tenant]`: a
cluster's run history (stacks/runs/record.py), read from the history store with the backend's credentials.

    text      a table of the runs, newest first; with --run: that run alone, its record, its diff (the plan diff's
              render_diff, coloured on a terminal) and the end of its engine log
    json      {"stack", "runs": [record, ...]}; with --run: {"stack", "runs": [that record], "detail": {...}}
    markdown  the table; with --run: the record, the diff (render_markdown) and the log in a fenced block

`--run latest` is the newest run. Without --tenant this is the hub administrator's view: the whole text. With
--tenant it is what the cluster's tenant reads (stacks.runs.record.tenant_view: every ID its run's own inputs do not
hold of its own side redacted), the same the registry API answers (automation/api/history.py).

The store is --history-store's (env HUBWRIGHT_HISTORY_STORE): `backend` (the state backend's own: --backend, env
PULUMI_BACKEND_URL, else file://<--state-dir>), file:///path, s3://bucket/prefix?endpoint=... or off. Exit 1 when the
cluster has no history, the run is not in it, or the store cannot be read; 2 for a bad NS/NAME or --history-store.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Mapping, TextIO

from automation.adapters.history import HistoryError, HistoryStore
from automation.adapters.history.options import store_from
from automation.cli.plan_diff import color_wanted
from stacks.plandiff.render import render_diff, render_markdown
from stacks.errors import InvalidSpec
from stacks.names import stack_name
from stacks.options import SERVE, option
from stacks.runs.model import summary as changes_summary
from stacks.runs.record import RunRecord, diff_document, newest_first, record_json, tenant_view
from stacks.times import parse_seconds

FORMATS = ("text", "json", "markdown")
LATEST = "latest"  # --run latest: the newest run (a run's id is never a bare word: stacks.runs.model.run_name)
LIMIT = 20
CAUSE_WIDTH = 60  # characters of a cause's message in the table, then "…"
COMMAND = "python -m automation history"
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
View = dict[str, Any]  # a record as people read it (record_json, or tenant_view's)


def cluster_of(text: str) -> tuple[str, str]:
    """NS/NAME as (namespace, name); InvalidSpec naming the argument otherwise."""
    namespace, sep, name = text.partition("/")
    if not sep or not _NAMESPACE.fullmatch(namespace) or not _NAME.fullmatch(name):
        raise InvalidSpec.one(COMMAND, "NS/NAME", f"{text!r} is not a cluster's namespace/name, e.g. acme/prod-1")
    return namespace, name


def history_command(args: argparse.Namespace, *, store: HistoryStore | None = None,
                    out: TextIO | None = None) -> int:
    """The command; `store` given (a test's), --history-store is not read."""
    out = sys.stdout if out is None else out
    namespace, name = cluster_of(args.cluster)
    cluster, stack = f"{namespace}/{name}", stack_name(namespace, name)
    store = store_from(args, COMMAND) if store is None else store
    if store is None:
        return _fail(f"the run history is off (--history-store off, env {option('history-store').env}): "
                     f"cluster {cluster} has none to show")
    try:
        records = newest_first(store.records(stack), stack)
    except HistoryError as exc:
        return _fail(f"the run history of cluster {cluster} cannot be read from {store.location}: {exc}")
    if not records:
        return _fail(f"cluster {cluster} has no run history in {store.location} (stack {stack}: no run recorded)")
    if args.run is None:
        views = [_shown(r, None, args.tenant)[0] for r in records[:args.limit]]
        out.write(_render(args.format, cluster, stack, views, None, color=color_wanted(out)))
        return 0
    record = records[0] if args.run == LATEST else next((r for r in records if r.id == args.run), None)
    if record is None:
        return _fail(f"cluster {cluster} has no run {args.run} in its history ({len(records)} kept; the newest: "
                     f"{records[0].id}; `{COMMAND} {cluster}` lists them)")
    try:
        detail = store.detail(record)
    except HistoryError as exc:
        return _fail(f"run {record.id} of cluster {cluster}: its diff and log cannot be read from "
                     f"{store.location}: {exc}")
    view, shown = _shown(record, detail, args.tenant)
    out.write(_render(args.format, cluster, stack, [view], shown or {}, color=color_wanted(out)))
    return 0


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _shown(record: RunRecord, detail: Mapping[str, Any] | None, tenant: bool) -> tuple[View, dict | None]:
    if tenant:
        return tenant_view(record, detail)
    return record_json(record), None if detail is None else dict(detail)


def _render(fmt: str, cluster: str, stack: str, views: list[View], detail: dict | None, *, color: bool) -> str:
    """`detail` None: the list; {} a run without a stored detail; else the run's."""
    if fmt == "json":
        doc: dict[str, Any] = {"stack": stack, "runs": views}
        if detail is not None:
            doc["detail"] = detail or None
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if fmt == "markdown":
        return _markdown(cluster, views, detail)
    text = _table(views)
    return text if detail is None else text + "\n" + _run_text(views[0], detail, color=color)


# ---- shared ----------------------------------------------------------------------------------------------------


def _printable(text: str, keep: str = "") -> str:
    """`text` with every character that does not print escaped (an engine's text on a terminal: no escape sequence
    reaches it), but those of `keep`."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)


def duration_text(view: Mapping[str, Any]) -> str:
    start, end = parse_seconds(view.get("started")), parse_seconds(view.get("ended"))
    if start is None or end is None:
        return "?"
    seconds = max(0.0, end - start)
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _cause(view: Mapping[str, Any], width: int | None = None) -> str:
    cause = view.get("cause") or {}
    message = " ".join(str(cause.get("message") or "").split())
    if width is not None and len(message) > width:
        message = message[:width - 1] + "…"
    return f"{cause.get('kind')}: {message}" if message else str(cause.get("kind"))


def _result(view: Mapping[str, Any]) -> str:
    return f"{view['result']} ({view['reason']})" if view.get("reason") else str(view["result"])


def _row(view: Mapping[str, Any], width: int | None) -> list[str]:
    operation = view["operation"] + (" --refresh" if view.get("refresh") else "")
    return [view["id"], operation, _cause(view, width), view["started"], duration_text(view), _result(view),
            changes_summary(view.get("changes") or {})]


HEADERS = ["RUN", "OPERATION", "CAUSE", "STARTED", "DURATION", "RESULT", "CHANGES"]


# ---- text ------------------------------------------------------------------------------------------------------


def _table(views: list[View]) -> str:
    rows = [HEADERS, *([_printable(cell) for cell in _row(view, CAUSE_WIDTH)] for view in views)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n" for row in rows)


def _run_text(view: View, detail: Mapping[str, Any], *, color: bool) -> str:
    lines = [f"run {_printable(view['id'])}"]
    for label, value in _fields(view):
        first, *more = _printable(value, "\n").splitlines() or [""]
        lines.append(f"  {label:<10} {first}")
        lines += [f"  {'':<10} {line}" for line in more]
    lines.append("")
    if not detail:
        return "\n".join([*lines, "no diff or engine log was stored for this run", ""])
    lines += ["diff:", render_diff(diff_document(detail), color=color).rstrip("\n")]
    if detail.get("resourcesDropped"):
        lines.append(f"({detail['resourcesDropped']:,} more changed resources were not kept: the detail's size limit)")
    lines.append("")
    lines.append(_log_heading(detail) + ":")
    log = _printable(str(detail.get("log") or ""), "\n\t")
    return "\n".join(lines) + "\n" + (log if log.endswith("\n") or not log else log + "\n")


def _fields(view: Mapping[str, Any]) -> list[tuple[str, str]]:
    cause = view.get("cause") or {}
    generation = cause.get("generation")
    fields = [("stack", str(view["stack"])), ("cluster", str(view.get("cluster") or "-")),
              ("operation", view["operation"] + (", with refresh" if view.get("refresh") else "")),
              ("cause", _cause(view) + (f" (generation {generation})" if generation is not None
                                        and f"generation {generation}" not in _cause(view) else "")),
              ("executor", str(view.get("executor"))), ("started", str(view["started"])),
              ("ended", f"{view['ended']} ({duration_text(view)})"), ("result", _result(view)),
              ("changes", changes_summary(view.get("changes") or {}))]
    if view.get("message"):
        fields.append(("message", str(view["message"])))
    if view.get("permalink"):
        fields.append(("permalink", str(view["permalink"])))
    return fields


def _log_heading(detail: Mapping[str, Any]) -> str:
    dropped = int(detail.get("logDropped") or 0)
    return f"engine log (its end: the first {dropped:,} bytes were not kept)" if dropped else "engine log"


# ---- markdown --------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Plain text in a table cell or a list item: Markdown's and HTML's special characters escaped."""
    text = _printable(" ".join(text.split()))
    for char in "\\`*_[]~|#":
        text = text.replace(char, "\\" + char)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fence(text: str, info: str = "text") -> str:
    """`text` in a fenced code block whose fence is longer than any run of backticks in it (at least 3)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    mark = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{mark}{info}\n{body}{mark}\n"


def _markdown(cluster: str, views: list[View], detail: Mapping[str, Any] | None) -> str:
    lines = [f"## Run history of {_cell(cluster)}", "",
             "| " + " | ".join(h.capitalize() for h in HEADERS) + " |", "|---|---|---|---|---:|---|---|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in _row(view, None)) + " |" for view in views]
    out = "\n".join(lines) + "\n"
    if detail is None:
        return out
    view = views[0]
    out += f"\n### Run {_cell(view['id'])}\n\n" + "".join(f"- **{label}**: {_cell(value)}\n"
                                                          for label, value in _fields(view))
    if not detail:
        return out + "\nNo diff or engine log was stored for this run.\n"
    rerun = f"{COMMAND} {cluster} --run {view['id']}"
    out += "\n" + render_markdown(diff_document(detail), rerun=rerun)
    if detail.get("resourcesDropped"):
        out += f"\n_{detail['resourcesDropped']:,} more changed resources were not kept (the detail's size limit)._\n"
    log = _printable(str(detail.get("log") or ""), "\n\t")
    return out + f"\n#### {_cell(_log_heading(detail)).capitalize()}\n\n" + fence(log)


# ---- the command line ------------------------------------------------------------------------------------------


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{raw} is not a positive number")
    return value


def add_history_command(sub: Any, environ: Mapping[str, str] | None = None) -> None:
    environ = os.environ if environ is None else environ
    backend, store, state = option("backend"), option("history-store"), option("state-dir")
    cmd = sub.add_parser("history", help="a cluster's run history: each run's cause, result and changes, and with "
                                         "--run its diff and engine log (from the history store)",
                         description=__doc__.split("\n\n")[0].replace("`", ""))
    cmd.add_argument("cluster", metavar="NS/NAME", help="the cluster (its stack: NS.NAME)")
    cmd.add_argument("--run", metavar="ID", help="one run: its record, diff and engine log ('latest': the newest)")
    cmd.add_argument("--limit", type=_positive, default=LIMIT, metavar="N",
                     help=f"at most this many runs, newest first (default: {LIMIT})")
    cmd.add_argument("--format", choices=FORMATS, default="text")
    cmd.add_argument("--tenant", action="store_true",
                     help="what the cluster's tenant reads: every ID its run's own inputs do not hold redacted")
    cmd.add_argument("--backend", default=backend.from_environment(SERVE, environ), metavar="URL",
                     help=f"the state backend (env {backend.env}; default: file://<--state-dir>)")
    cmd.add_argument("--history-store", default=store.from_environment(SERVE, environ), metavar="SPEC",
                     help=f"backend, file:///path, s3://bucket/prefix?endpoint=... or off (env {store.env}; "
                          f"default: {store.default_for(SERVE)})")
    cmd.add_argument("--state-dir", default=state.from_environment(SERVE, environ), metavar="DIR",
                     help=f"the file:// backend's folder when --backend is unset (env {state.env}; default: "
                          f"{state.default_for(SERVE)})")
    cmd.set_defaults(func=history_command)
