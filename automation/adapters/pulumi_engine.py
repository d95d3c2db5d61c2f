"""PulumiEngine: the Engine protocol over the Pulumi Automation API, one stack per cluster.

Each operation opens a fresh LocalWorkspace in the stack's own directory
(``<state_dir>/workspaces/<stack>``: parallel select/create in one workspace
corrupts it), runs the CLI and drops the workspace: nothing per stack stays in
memory. The program is inline: ``program_factory(inputs)`` (default
``components.program.program``), whose returned dict is exported.

Backends (``PulumiSettings.backend_url``): ``file://<state_dir>`` by default,
``https://api.pulumi.com`` (token in ``PULUMI_ACCESS_TOKEN``), ``s3://bucket/prefix``
(AWS credentials from the environment). DIY backends (file, s3) encrypt with a
passphrase from ``PULUMI_CONFIG_PASSPHRASE`` or ``PULUMI_CONFIG_PASSPHRASE_FILE``.

Drift: ``preview`` is ``pulumi preview --refresh``: it reads every resource from the
cloud and diffs the program against that, writing nothing (no state, no history
entry); ``RunResult.drifted`` names the resources that would change. An ``up`` with
``refresh=True`` puts the drift back (a plain ``up`` diffs against the state only).

Applied inputs: every run exports its inputs as ``inputs.<digest>`` and a successful
``up`` tags the stack ``hubwright:applied=<digest>``; ``applied`` reads the two (see
APPLIED_TAG), so no number of failed updates hides the last successful one. Stacks
without them are read from their history (legacy).

Crash safety: a killed run leaves the backend lock and pending operations.
``up``/``destroy``/``preview`` on a locked stack raise ``StackLocked``; ``recover``
removes the lock when it is a stale lock of this service (see ``LockOwner`` and
``PulumiSettings.own_hosts``), clears pending operations (export, edit, import)
and refreshes. A lock held by a live process or by someone else is never touched.

Policy (``PulumiSettings.policy``, HUBWRIGHT_POLICY): every ``up`` and ``preview`` runs the policy pack in
policy/ (``--policy-pack``, with the rules' levels in ``--policy-pack-config``); a mandatory violation fails the
run with PolicyViolation, naming the rules, which the service reports as Stalled (NeedsAttention), not as a
failure to retry. ``off`` is the emergency switch: no pack at all.

Never fork after importing this module (the Automation API runs gRPC threads);
the CLI is started with subprocess (fork+exec), which is fine.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pulumi
from pulumi import automation as auto
from pulumi.automation.errors import (
    CommandError,
    ConcurrentUpdateError,
    StackAlreadyExistsError,
    StackNotFoundError,
)

from automation.adapters import proctree
from automation.adapters.engine import (EngineError, OnProgress, PolicyViolation, RunCancelled, RunLimits, RunResult,
                                        StackLocked)
from automation.adapters.policy import PACK_DIR, PolicySettings
from components.program import INPUTS_OUTPUT, program
from stacks.inputs import INPUTS_CONFIG_KEY, StackInputs, inputs_from_config
from stacks.targets import config_digest

log = logging.getLogger(__name__)

PROJECT = "hubwright"
CONFIG_KEY = f"{PROJECT}:{INPUTS_CONFIG_KEY}"  # hubwright:inputs
MESSAGE_PREFIX = "hubwright: "  # marks updates this service started (history, console)
# `applied` (the inputs of the last successful up) from the stack's own state, not from its history:
# every run exports its inputs under a key of their own, `inputs.<digest>` (applied_output), and a successful
# up then sets the stack tag APPLIED_TAG to that digest. Why both: a failed up replaces the outputs it
# registered and keeps the others (Pulumi finalises stack outputs so; tests/test_engine_drift_live.py shows it),
# so a single `inputs` output would hold a failed run's inputs; per-digest keys keep the successful run's,
# and only the tag, written after the CLI reported success, says which of them that is.
APPLIED_TAG = f"{PROJECT}:applied"
HISTORY_PAGE, HISTORY_WINDOW = 10, 50  # the legacy applied(): how far back it reads the history

ProgramFactory = Callable[[StackInputs], Mapping[str, Any]]


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class PulumiSettings:
    """Where stacks live and how the CLI runs. Secrets stay in the environment, never here."""

    state_dir: Path = Path("state")
    backend_url: str | None = None  # None: file://<state_dir>
    organization: str | None = None  # Pulumi Cloud organization (stack name org/hubwright/<stack>)
    pulumi_home: Path | None = None  # None: the CLI's default ($PULUMI_HOME or ~/.pulumi)
    secrets_provider: str | None = None  # None: passphrase (DIY backends) or the service (Cloud)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # extra CLI environment: may hold secrets
    # Locks written by hosts matching this regex are this service's (e.g. the pods of its Deployment,
    # r"hubwright-[a-z0-9]+-[a-z0-9]+"). None: this host only.
    own_hosts: str | None = None
    # A lock of this service on another host (or a Cloud update of ours) older than this is stale: longer than
    # any run may take (RunLimits.stale_lock_after, which the worker pool checks).
    stale_lock_after_s: float = RunLimits().stale_lock_after
    # The policy pack on every up and preview: mandatory (each rule at its own level), advisory, or off (the
    # emergency switch); policy_config: a pack config file in Pulumi's format; policy_pack: the pack's folder.
    policy: str = "mandatory"
    policy_config: str | None = None
    policy_pack: str = str(PACK_DIR)

    @property
    def backend(self) -> str:
        return self.backend_url or f"file://{Path(self.state_dir).resolve()}"

    @property
    def is_cloud(self) -> bool:
        return self.backend.startswith(("https://", "http://"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, limits: RunLimits = RunLimits()) -> "PulumiSettings":
        """HUBWRIGHT_STATE_DIR, PULUMI_BACKEND_URL, HUBWRIGHT_PULUMI_ORG, PULUMI_HOME,
        HUBWRIGHT_SECRETS_PROVIDER, HUBWRIGHT_LOCK_HOSTS, HUBWRIGHT_STALE_LOCK_SECONDS, HUBWRIGHT_POLICY,
        HUBWRIGHT_POLICY_CONFIG, HUBWRIGHT_POLICY_PACK."""
        env = os.environ if environ is None else environ
        home = env.get("PULUMI_HOME")
        return cls(
            state_dir=Path(env.get("HUBWRIGHT_STATE_DIR", "state")),
            backend_url=env.get("PULUMI_BACKEND_URL") or None,
            organization=env.get("HUBWRIGHT_PULUMI_ORG") or None,
            pulumi_home=Path(home) if home else None,
            secrets_provider=env.get("HUBWRIGHT_SECRETS_PROVIDER") or None,
            own_hosts=env.get("HUBWRIGHT_LOCK_HOSTS") or None,
            stale_lock_after_s=float(env.get("HUBWRIGHT_STALE_LOCK_SECONDS") or limits.stale_lock_after),
            policy=env.get("HUBWRIGHT_POLICY") or "mandatory",
            policy_config=env.get("HUBWRIGHT_POLICY_CONFIG") or None,
            policy_pack=env.get("HUBWRIGHT_POLICY_PACK") or str(PACK_DIR),
        )

    def to_json(self) -> dict[str, Any]:
        """For a worker process (automation.adapters.worker): sent on its stdin, never on a command line."""
        return {k: (str(v) if isinstance(v, Path) else dict(v) if isinstance(v, Mapping) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "PulumiSettings":
        paths = {"state_dir", "pulumi_home"}
        return cls(**{k: (Path(v) if k in paths and v is not None else v) for k, v in raw.items()})

    def check(self) -> None:
        """Fail at start-up, naming the setting, rather than at the first update."""
        scheme = self.backend.split("://", 1)[0]
        if scheme not in {"file", "s3", "gs", "azblob", "https", "http", "postgres"}:
            raise ValueError(f"backend_url: unsupported scheme {scheme!r} in {self.backend!r}")
        if not self.is_cloud and self.secrets_provider in (None, "passphrase"):
            merged = {**os.environ, **self.env}
            if "PULUMI_CONFIG_PASSPHRASE" not in merged and "PULUMI_CONFIG_PASSPHRASE_FILE" not in merged:
                raise ValueError(
                    f"backend {self.backend}: set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE "
                    "(the passphrase secrets provider of DIY backends), or configure secrets_provider"
                )
        if self.own_hosts is not None:
            re.compile(self.own_hosts)
        try:
            self.policy_settings()
        except ValueError as err:
            raise ValueError(f"HUBWRIGHT_POLICY / HUBWRIGHT_POLICY_CONFIG: {err}") from None
        if self.policy != "off" and not (Path(self.policy_pack) / "PulumiPolicy.yaml").is_file():
            raise ValueError(f"policy_pack {self.policy_pack}: no PulumiPolicy.yaml there (HUBWRIGHT_POLICY_PACK)")

    def policy_settings(self) -> PolicySettings:
        return PolicySettings.load(self.policy, self.policy_config)


def load_program(ref: str, options: Mapping[str, Any] | None = None) -> ProgramFactory:
    """The program named `module:function` (worker processes import it by name: no closures cross a process),
    called as function(inputs, **options)."""
    module, _, attr = ref.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"program {ref!r}: not an importable module:function ({err})") from None
    return functools.partial(factory, **options) if options else factory


# --------------------------------------------------------------------------- locks

_LOCK_LINE = re.compile(r"^\s*(?P<path>\S+): created by (?P<user>.*?)@(?P<host>\S+) \(pid (?P<pid>\d+)\) at (?P<at>\S+)\s*$", re.M)


@dataclass(frozen=True)
class LockOwner:
    """One DIY backend lock, as the CLI reports it in its 'stack is currently locked' error."""

    path: str
    user: str
    host: str
    pid: int
    created: datetime

    def describe(self) -> str:
        return f"{self.user}@{self.host} (pid {self.pid}) since {self.created.isoformat(timespec='seconds')}"


def parse_lock_owners(stderr: str) -> list[LockOwner]:
    owners = []
    for m in _LOCK_LINE.finditer(stderr):
        try:
            created = datetime.fromisoformat(m["at"].replace("Z", "+00:00"))
        except ValueError:
            created = datetime.now(timezone.utc)
        owners.append(LockOwner(m["path"].split("?", 1)[0], m["user"], m["host"], int(m["pid"]), created))
    return owners


def pulumi_process_alive(pid: int) -> bool:
    """True when `pid` runs here and is a pulumi process (not a zombie, not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc: the pid exists, assume it is the lock holder
    try:
        if re.search(r"^State:\s*Z", (proc / "status").read_text(), re.M):
            return False
        return b"pulumi" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def lock_is_stale(
    owner: LockOwner,
    *,
    hostname: str,
    own_hosts: str | None,
    stale_after_s: float,
    now: datetime | None = None,
    alive: Callable[[int], bool] = pulumi_process_alive,
) -> tuple[bool, str]:
    """Whether a lock may be removed: (stale, why). Only locks of this service ever are."""
    if owner.host == hostname:
        if alive(owner.pid):
            return False, f"held by {owner.describe()}, a live pulumi process on this host"
        return True, f"stale lock of {owner.describe()}: that process is gone"
    if own_hosts and re.fullmatch(own_hosts, owner.host):
        age = ((now or datetime.now(timezone.utc)) - owner.created).total_seconds()
        if age >= stale_after_s:
            return True, f"stale lock of {owner.describe()}: another replica of this service, {age:.0f}s old"
        return False, f"held by {owner.describe()}, another replica of this service, {age:.0f}s old (stale after {stale_after_s:.0f}s)"
    return False, f"held by {owner.describe()}, not this service: left alone"


# --------------------------------------------------------------------------- messages

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PERMALINK = re.compile(r"(?:View in Browser(?: \(Ctrl\+O\))?|View Live|Permalink):\s*(https?://\S+)")


def readable_error(err: BaseException, limit: int = 600) -> str:
    """The CLI's failure reduced to its error lines (no usage text, no tracebacks)."""
    if not isinstance(err, CommandError):
        return str(err)[:limit]
    text = _ANSI.sub("", str(err))
    stdout, _, stderr = text.partition("\n stderr: ")
    lines: list[str] = []
    for raw in stderr.splitlines() + stdout.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("error:") or "Exception:" in line or "Error:" in line or ": created by " in line:
            line = re.sub(r"\?no_tmp_dir=true", "", line)
            if line not in lines:
                lines.append(line)
    message = " | ".join(lines) or " ".join(text.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


_POLICY_LINE = re.compile(r"\[(?P<level>mandatory|advisory)\]\s+(?P<rule>[A-Za-z0-9_.-]+)[ \t]*(?:\((?P<what>[^)\n]*)\))?[ \t]*\n"
                          r"(?P<message>(?:[ \t]+(?!- \[)\S.*\n?)+)?")  # its indented lines, to the next rule


def policy_violations(output: str, limit: int = 600, *, level: str = "mandatory") -> str:
    """The violations of `level` in the CLI's output, "rule (type: name): message; ...", or "" when there are none."""
    found: list[str] = []
    for m in _POLICY_LINE.finditer(_ANSI.sub("", output)):
        if m["level"] != level:
            continue
        message = " ".join((m["message"] or "").split())
        line = m["rule"] + (f" ({m['what'].strip()})" if m["what"] else "") + (f": {message}" if message else "")
        if line not in found:
            found.append(line)
    text = "; ".join(found)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _permalink(stdout: str) -> str | None:
    m = _PERMALINK.search(stdout or "")
    return m.group(1) if m else None


def applied_output(digest: str) -> str:
    """The stack output that holds the inputs with this digest (StackInputs.to_config())."""
    return f"{INPUTS_OUTPUT}.{digest}"


def _outputs(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The program's outputs (the engine's own `inputs.<digest>` left out)."""
    return {k: ("[secret]" if v.secret else v.value) for k, v in raw.items() if not k.startswith(f"{INPUTS_OUTPUT}.")}


DRIFT_LIMIT = 50  # RunResult.drifted names at most this many resources, then "... and N more"
# Steps that change nothing: the refresh's own reads, and resources the program only reads.
_NO_CHANGE_OPS = frozenset({"same", "read", "read-replacement", "refresh"})
_ROOT_TYPE = "pulumi:pulumi:Stack"
_PROVIDER_TYPE = "pulumi:providers:"


class _ChangedResources:
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
        if op in _NO_CHANGE_OPS:
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


class _Progress:
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


# --------------------------------------------------------------------------- the engine


class PulumiEngine:
    """Engine (automation.adapters.engine) over pulumi.automation, in this process; safe to call from several
    threads. The service runs it in worker processes (automation.adapters.pool), one run per process: Pulumi's
    runtime keeps global state that inline programs of two stacks must not share."""

    def __init__(self, settings: PulumiSettings | None = None, *, program_factory: ProgramFactory | None = None):
        self.settings = settings or PulumiSettings()
        self.settings.check()
        self._program_factory = program_factory or program
        self._hostname = socket.gethostname()
        self._running: set[str] = set()
        self._guard = threading.Lock()
        self._command: auto.PulumiCommand | None = None
        self._env = {
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            # Dynamic providers and the language host must see this interpreter's packages.
            "PULUMI_PYTHON_CMD": sys.executable,
            **self.settings.env,
        }
        self._tags_supported = True
        self._policy = self._policy_args()
        self._cancelled_at = float("-inf")  # time.monotonic() of the last cancel()
        self._local = threading.local()  # .started: when this thread's run began

    # ----------------------------------------------------------------- protocol

    def up(self, inputs: StackInputs, *, message: str, refresh: bool = False,
           on_progress: OnProgress | None = None) -> RunResult:
        """`refresh`: read every resource from the cloud first (`pulumi up --refresh`), so that the update also
        puts back what changed behind Pulumi's back (drift); without it, an up diffs against the state only.
        `on_progress(done, planned)`: from the engine's events (_Progress)."""
        started = _now()
        progress = _Progress(on_progress) if on_progress is not None else None
        events = {"on_event": progress.on_event} if progress is not None else {}
        with self._stack(inputs.stack, inputs, create=True) as (ws, stack):
            self._write_settings(ws, stack, inputs)
            result = self._call(stack, "up", lambda: stack.up(message=_message(message), color="never",
                                                               refresh=refresh or None, **events, **self._policy))
            self._mark_applied(stack, inputs)
        if progress is not None:
            progress.flush()
        notes = []
        advisory = policy_violations(result.stdout, level="advisory")
        if advisory:
            notes.append(f"policy (advisory): {advisory}")
            log.warning("stack %s: advisory policy violations: %s", inputs.stack, advisory)
        if "pending operations from previous deployment" in result.stdout:
            notes.append("warning: the stack had pending operations from an interrupted run (call recover)")
        return RunResult(
            operation="up",
            ok=True,
            message="; ".join([f"updated: {_summary(result.summary.resource_changes)}", *notes]),
            outputs=_outputs(result.outputs),
            changes=dict(result.summary.resource_changes or {}),
            started=started,
            ended=_now(),
            permalink=_permalink(result.stdout),
        )

    def destroy(self, stack: str, *, message: str) -> RunResult:
        started = _now()
        with self._stack(stack, None, create=False) as (ws, st):
            if st is None:
                return RunResult("destroy", True, f"no stack {stack}: nothing to destroy", started=started, ended=_now())
            result = self._call(st, "destroy", lambda: st.destroy(message=_message(message), color="never"), reason="DestroyFailed")
            self._call(st, "destroy", lambda: ws.remove_stack(st.name), reason="DestroyFailed")
        shutil.rmtree(self._workdir(stack), ignore_errors=True)
        changes = dict(result.summary.resource_changes or {})
        return RunResult(
            operation="destroy",
            ok=True,
            message=f"destroyed and removed the stack: {_summary(changes)}",
            changes=changes,
            started=started,
            ended=_now(),
            permalink=_permalink(result.stdout),
        )

    def preview(self, inputs: StackInputs) -> RunResult:
        """Drift check: `pulumi preview --refresh`. The refresh reads every resource from the cloud into the
        preview's copy of the state only; then the program's inputs are diffed against it. Nothing is written: no
        state, no history entry (tests/test_engine_drift_live.py). ok=True when nothing would change; `drifted`
        names the resources that would, "name (type)", sorted, at most DRIFT_LIMIT of them."""
        started = _now()
        changed = _ChangedResources()
        with self._stack(inputs.stack, inputs, create=False) as (_, st):
            if st is None:
                return RunResult("preview", False, f"no stack {inputs.stack} yet: everything would be created", started=started, ended=_now())
            result = self._call(st, "preview", lambda: st.preview(refresh=True, color="never", on_event=changed.on_event,
                                                                  **self._policy))
        changes = {str(getattr(k, "value", k)): int(v) for k, v in (result.change_summary or {}).items()}
        drift = {k: v for k, v in changes.items() if k not in _NO_CHANGE_OPS and v}
        drifted = changed.names()
        if drift or drifted:
            shown = ", ".join(drifted[:3]) + (", ..." if len(drifted) > 3 else "")
            message = f"changes expected: {_summary(drift)}" + (f": {shown}" if shown else "")
        else:
            message = "no changes"
        return RunResult(
            operation="preview",
            ok=not (drift or drifted),
            message=message,
            changes=changes,
            started=started,
            ended=_now(),
            drifted=drifted,
        )

    def recover(self, stack: str) -> RunResult:
        """Remove this service's stale lock, drop pending operations, refresh. A live lock raises StackLocked."""
        started = _now()
        notes: list[str] = []
        with self._stack(stack, None, create=False) as (_, st):
            if st is None:
                return RunResult("recover", True, f"no stack {stack}: nothing to recover", started=started, ended=_now())
            state = self._call(st, "recover", st.export_stack, reason="RecoveryFailed")
            pending = list((state.deployment or {}).get("pending_operations") or [])
            if pending:
                state.deployment["pending_operations"] = []
                self._unlocked(st, lambda: st.import_stack(state), notes)
                dropped = ", ".join(f"{op.get('type', '?')} {op.get('resource', {}).get('urn', '?')}" for op in pending)
                notes.append(f"cleared {len(pending)} pending operation(s): {dropped}")
            self._unlocked(st, lambda: st.refresh(message=_message("recover after an interrupted run"), color="never"), notes)
        message = "; ".join(notes) + "; refreshed" if notes else "nothing to recover (no stale lock, no pending operations); refreshed"
        log.info("recover %s: %s", stack, message)
        return RunResult("recover", True, message, started=started, ended=_now())

    def applied(self, stack: str) -> StackInputs | None:
        """The inputs of the last successful `up`: the output `inputs.<digest>` named by the tag APPLIED_TAG (two
        CLI calls, however many updates failed since). None when the stack does not exist. A stack whose tag
        or output is missing (written before this engine, updated by hand with __main__.py, a backend without
        tags, a crash between the up and the tag) is read the legacy way, from its history."""
        with self._stack(stack, None, create=False) as (ws, st):
            if st is None:
                return None
            digest = self._applied_tag(st)
            if digest is not None:
                outputs = self._call(st, "applied", lambda: self._stack_outputs(ws, st))
                raw = outputs.get(applied_output(digest))
                if raw is not None:
                    return _parse_inputs(stack, raw)
            return self._applied_from_history(st)

    def _applied_from_history(self, st: Any) -> StackInputs | None:
        """LEGACY (stacks without the tag and output of `applied`): the config of the newest successful update
        in the last HISTORY_WINDOW history entries (a newer successful destroy: None). Failed updates fill the
        window too: after that many failed retries this returns None although the stack holds resources."""
        for page in range(1, HISTORY_WINDOW // HISTORY_PAGE + 1):
            entries = self._call(st, "history", lambda: st.history(page_size=HISTORY_PAGE, page=page, show_secrets=False))
            for entry in entries:
                if entry.result != "succeeded":
                    continue
                if entry.kind == "destroy":
                    return None
                raw = (entry.config or {}).get(CONFIG_KEY)
                if entry.kind == "update" and raw is not None:
                    return _parse_inputs(st.name, raw)
            if len(entries) < HISTORY_PAGE:
                break
        return None

    def cancel(self, grace: float) -> None:
        """SIGINT every `pulumi` CLI this process runs (Pulumi's graceful cancel); after `grace` seconds kill
        what is left of their trees. The runs so stopped raise RunCancelled."""
        self._cancelled_at = time.monotonic()
        clis = [pid for pid in proctree.children(os.getpid()) if proctree.program_name(pid) == "pulumi"]
        for pid in clis:
            proctree.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + grace
        while any(proctree.alive(pid) for pid in clis) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in clis:
            if proctree.alive(pid):
                proctree.kill_descendants(pid)
                proctree.kill(pid)

    # ----------------------------------------------------------------- helpers

    def workspace_dir(self, stack: str) -> Path:
        """The stack's workspace: Pulumi.yaml and Pulumi.<stack>.yaml (its config, hubwright:inputs)."""
        return self._workdir(stack)

    def _workdir(self, stack: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", stack) or stack in {".", ".."}:
            raise EngineError(f"stack {stack!r}: not a valid Pulumi stack name", reason="InvalidSpec")
        return Path(self.settings.state_dir).resolve() / "workspaces" / stack

    def _qualified(self, stack: str) -> str:
        org = self.settings.organization
        return f"{org}/{PROJECT}/{stack}" if org else stack

    def warm(self) -> None:
        """Pay the one-time costs (finding the CLI and its version) now rather than in the first run."""
        self._pulumi()

    def _pulumi(self) -> auto.PulumiCommand:
        if self._command is None:  # `pulumi version` once per engine, not per operation
            self._command = auto.PulumiCommand()
        return self._command

    def _inline(self, inputs: StackInputs | None) -> Callable[[], None] | None:
        if inputs is None:
            return None
        factory = self._program_factory

        applied_key, config = applied_output(inputs.digest()), inputs.to_config()

        def run() -> None:
            for name, value in factory(inputs).items():
                pulumi.export(name, value)
            pulumi.export(applied_key, config)  # after the program: one that raises exports nothing (see APPLIED_TAG)

        return run

    @contextmanager
    def _stack(self, name: str, inputs: StackInputs | None, *, create: bool) -> Iterator[tuple[Any, Any]]:
        """A fresh workspace in the stack's own directory, selected (or created); None when absent."""
        work_dir = self._workdir(name)
        with self._guard:
            if name in self._running:
                raise StackLocked(f"stack {name}: another operation of this service is running on it")
            self._running.add(name)
        fresh_dir = not work_dir.exists()
        self._local.started = time.monotonic()
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
            ws = auto.LocalWorkspace(
                work_dir=str(work_dir),
                pulumi_home=str(self.settings.pulumi_home) if self.settings.pulumi_home else None,
                program=self._inline(inputs),
                env_vars=self._env,
                secrets_provider=self.settings.secrets_provider,
                project_settings=auto.ProjectSettings(
                    name=PROJECT, runtime="python", backend=auto.ProjectBackend(self.settings.backend)
                ),
                pulumi_command=self._pulumi(),
            )
            qualified = self._qualified(name)
            try:
                stack = auto.Stack.create_or_select(qualified, ws) if create else auto.Stack.select(qualified, ws)
            except StackAlreadyExistsError:  # another replica created it between our select and create
                stack = auto.Stack.select(qualified, ws)
            except StackNotFoundError:
                stack = None
                if fresh_dir:  # asking about a stack must not leave a directory behind
                    shutil.rmtree(work_dir, ignore_errors=True)
            except CommandError as err:
                raise EngineError(f"stack {name}: {readable_error(err)}") from None
            yield ws, stack
        finally:
            with self._guard:
                self._running.discard(name)

    def _policy_args(self) -> dict[str, list[str]]:
        """`--policy-pack` and `--policy-pack-config` for up and preview (none when the policy is off). The config
        holds every rule's level, `advisory` applied, written once into the state dir (the root filesystem of the
        service's pod is read-only)."""
        policy = self.settings.policy_settings()
        if not policy.enabled:
            return {}
        config = json.dumps(policy.engine_config(), indent=2, sort_keys=True)
        path = Path(self.settings.state_dir).resolve() / "policy" / f"config-{config_digest(config)}.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(config)
            partial.replace(path)  # worker processes write the same bytes: the last rename wins, whole
        return {"policy_packs": [str(Path(self.settings.policy_pack).resolve())], "policy_pack_configs": [str(path)]}

    def _call(self, stack: Any, op: str, fn: Callable[[], Any], *, reason: str = "UpdateFailed", locked: bool = True) -> Any:
        """Run one CLI call; its failure becomes StackLocked (unless `locked` is False), PolicyViolation (a mandatory
        rule of the policy pack refused it) or EngineError."""
        try:
            return fn()
        except ConcurrentUpdateError as err:
            if not locked:
                raise
            raise StackLocked(f"stack {stack.name} is locked: {self._lock_text(err)}") from None
        except CommandError as err:
            if self._cancelled_at >= getattr(self._local, "started", float("inf")):
                raise RunCancelled(f"{op} {stack.name}: cancelled: {readable_error(err)}") from None
            refused = policy_violations(str(err))
            if refused:
                raise PolicyViolation(f"{op} {stack.name}: the policy pack refused it: {refused}") from None
            raise EngineError(f"{op} {stack.name}: {readable_error(err)}", reason=reason) from None

    def _lock_text(self, err: ConcurrentUpdateError) -> str:
        owners = parse_lock_owners(_ANSI.sub("", str(err)))
        if not owners:
            return "another update is in progress"
        return "; ".join(o.describe() for o in owners)

    def _unlocked(self, stack: Any, fn: Callable[[], Any], notes: list[str]) -> Any:
        """Run fn; on a lock, remove it if it is a stale lock of this service and run fn again."""
        try:
            return self._call(stack, "recover", fn, reason="RecoveryFailed", locked=False)
        except ConcurrentUpdateError as err:
            stale, why = self._judge_lock(stack, err)
        if not stale:
            raise StackLocked(f"stack {stack.name} is locked: {why}")
        self._call(stack, "recover", stack.cancel, reason="RecoveryFailed")
        notes.append(f"removed the {why}")
        log.warning("stack %s: removed the %s", stack.name, why)
        return self._call(stack, "recover", fn, reason="RecoveryFailed")

    def _judge_lock(self, stack: Any, err: ConcurrentUpdateError) -> tuple[bool, str]:
        """DIY backends name each lock's owner: stale only when every lock is a stale one of ours."""
        owners = parse_lock_owners(_ANSI.sub("", str(err)))
        if not owners:
            return self._judge_cloud_update(stack)
        verdicts = [
            lock_is_stale(o, hostname=self._hostname, own_hosts=self.settings.own_hosts,
                          stale_after_s=self.settings.stale_lock_after_s)
            for o in owners
        ]
        return all(stale for stale, _ in verdicts), "; ".join(why for _, why in verdicts)

    def _judge_cloud_update(self, stack: Any) -> tuple[bool, str]:
        """Pulumi Cloud names no lock owner: an in-progress update of ours, older than the limit, is stale."""
        entries = stack.history(page_size=1, show_secrets=False)
        if not entries or entries[0].result != "in-progress":
            return False, "an update is in progress (owner unknown)"
        latest = entries[0]
        start = latest.start_time.replace(tzinfo=latest.start_time.tzinfo or timezone.utc)
        age = (datetime.now(timezone.utc) - start).total_seconds()
        ours = (latest.message or "").startswith(MESSAGE_PREFIX)
        what = f"in-progress update {latest.message!r} started {start.isoformat(timespec='seconds')}"
        if ours and age >= self.settings.stale_lock_after_s:
            return True, f"stale {what} ({age:.0f}s old, by this service)"
        return False, f"{what}: {'by this service, ' if ours else 'not by this service: '}{age:.0f}s old"

    def _write_settings(self, ws: Any, stack: Any, inputs: StackInputs) -> None:
        """Tags, then hubwright:inputs in Pulumi.<stack>.yaml (so `pulumi up` with __main__.py builds the
        same stack). Both derive from the inputs: unchanged config (a file read) means no CLI call at all."""
        value = inputs.to_config()
        try:
            current = ws.stack_settings(stack.name).config or {}
        except (OSError, ValueError, TypeError):
            current = {}
        if current.get(CONFIG_KEY) == value:
            return
        self._write_tags(stack, inputs)
        self._call(stack, "config", lambda: stack.set_config(CONFIG_KEY, auto.ConfigValue(value)))

    def _mark_applied(self, stack: Any, inputs: StackInputs) -> None:
        """After a successful up: tag the stack with the digest of the inputs it now holds (see APPLIED_TAG).
        Not written (no tags, an error): applied() reads this stack's history instead, and the up stays a success."""
        if not self._tags_supported:
            return
        try:
            stack.set_tag(APPLIED_TAG, inputs.digest())
        except CommandError as err:
            log.warning("stack %s: tag %s not written (applied() falls back to the history): %s", stack.name,
                        APPLIED_TAG, readable_error(err))

    def _applied_tag(self, stack: Any) -> str | None:
        """The digest in the stack's APPLIED_TAG; None without one (or without tags on this backend)."""
        if not self._tags_supported:
            return None
        try:
            tags = self._call(stack, "applied", stack.list_tags)
        except EngineError as err:
            if "not supported" in str(err) or "unknown command" in str(err):
                self._tags_supported = False
                return None
            raise
        return (tags or {}).get(APPLIED_TAG) or None

    def _stack_outputs(self, ws: Any, stack: Any) -> dict[str, Any]:
        """The stack's outputs in one CLI call (`pulumi stack output --json`; Stack.outputs() makes two, the second
        for secrets: none of the outputs read here is one, a secret shows as "[secret]")."""
        env = {**({"PULUMI_HOME": ws.pulumi_home} if ws.pulumi_home else {}), **(ws.env_vars or {})}
        result = ws.pulumi_command.run(["stack", "output", "--json", "--stack", stack.name], ws.work_dir, env)
        return json.loads(result.stdout or "{}")

    def _write_tags(self, stack: Any, inputs: StackInputs) -> None:
        """Stack tags (cluster, namespace, tenant, account, region); a backend without tags is logged once."""
        if not self._tags_supported:
            return
        wanted = {k: str(v) for k, v in inputs.describe().items()}
        try:
            current = stack.list_tags()
            for key, value in wanted.items():
                if current.get(key) != value:
                    stack.set_tag(key, value)
        except ConcurrentUpdateError:
            return  # the update below reports the lock
        except CommandError as err:
            text = readable_error(err)
            if "not supported" in text or "unknown command" in text:
                self._tags_supported = False
                log.warning("backend %s does not support stack tags; stacks stay untagged: %s", self.settings.backend, text)
            else:
                log.warning("stack %s: tags not written, the update goes on: %s", stack.name, text)


def _parse_inputs(stack: str, raw: Any) -> StackInputs | None:
    """A history entry's hubwright:inputs; None (and a warning) when today's model rejects it."""
    value = raw.get("value") if isinstance(raw, Mapping) else getattr(raw, "value", raw)
    try:
        return inputs_from_config(value)
    except ValueError as err:  # pydantic's ValidationError: inputs written by an older model
        log.warning("stack %s: the last applied inputs no longer parse (%s); treating them as unknown",
                    stack, str(err).splitlines()[0])
        return None


def _message(why: str) -> str:
    why = " ".join(why.split()) or "reconcile"
    return why if why.startswith(MESSAGE_PREFIX) else MESSAGE_PREFIX + why


def _summary(changes: Mapping[str, Any] | None) -> str:
    items = [f"{k} {v}" for k, v in sorted((changes or {}).items()) if v]
    return ", ".join(items) or "no changes"
