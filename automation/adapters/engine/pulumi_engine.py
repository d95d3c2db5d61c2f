"""PulumiEngine: the Engine protocol over the Pulumi Automation API, one stack per cluster.

Each operation opens a fresh LocalWorkspace in the stack's own directory (``<state_dir>/workspaces/<stack>``:
parallel select/create in one workspace corrupts it), runs the CLI and drops the workspace: nothing per stack stays
in memory. The program is inline: ``program_factory(inputs)`` (default ``components.program.program``), whose
returned dict is exported.

Backends (``PulumiSettings.backend_url``): ``file://<state_dir>`` by default, ``https://api.pulumi.com`` (token in
``PULUMI_ACCESS_TOKEN``), ``s3://bucket/prefix`` (AWS credentials from the environment). DIY backends (file, s3)
encrypt with a passphrase from ``PULUMI_CONFIG_PASSPHRASE`` or ``PULUMI_CONFIG_PASSPHRASE_FILE``.

Drift: ``preview`` is ``pulumi preview --refresh``: it reads every resource from the cloud and diffs the program
against that, writing nothing (no state, no history entry); ``RunResult.drifted`` names the resources that would
change. An ``up`` with ``refresh=True`` puts the drift back (a plain ``up`` diffs against the state only).

Applied inputs: every run exports its inputs as ``inputs.<digest>`` and a successful ``up`` tags the stack
``hubwright:applied=<digest>``; ``applied`` reads the two (see APPLIED_TAG), so no number of failed updates hides the
last successful one. Stacks without them are read from their history (legacy: applied_inputs.py).

Crash safety: a killed run leaves the backend lock and pending operations. ``up``/``destroy``/``preview`` on a
locked stack raise ``StackLocked``; ``recover`` removes the lock when it is a stale lock of this service (see
``LockOwner`` and ``PulumiSettings.own_hosts``), clears pending operations (export, edit, import) and refreshes. A
lock held by a live process or by someone else is never touched.

Policy (``PulumiSettings.policy``, HUBWRIGHT_POLICY): every ``up`` and ``preview`` runs the policy pack in
policy/ (``--policy-pack``, with the rules' levels in ``--policy-pack-config``); a mandatory violation fails the
run with PolicyViolation, naming the rules, which the service reports as Stalled (NeedsAttention), not as a
failure to retry. ``off`` is the emergency switch: no pack at all.

Never fork after importing this module (the Automation API runs gRPC threads);
the CLI is started with subprocess (fork+exec), which is fine.
"""
from __future__ import annotations

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

from automation.adapters.engine import proctree
from automation.adapters.engine.grpc_noise import quiet_language_server
from automation.adapters.engine.applied_inputs import HISTORY_PAGE, HISTORY_WINDOW, from_history, parse_inputs
from automation.adapters.engine.protocol import (EngineError, OnProgress, Operation, PolicyViolation, RunCancelled,
                                                 RunResult, StackLocked)
from automation.adapters.engine.locks import describe_locks, judge_locks
from automation.adapters.engine.run_output import (ANSI_ESCAPES, NO_CHANGE_OPS, ChangedResources, ProgressEvents,
                                                   applied_output, now_rfc3339, permalink_of, policy_violations,
                                                   program_outputs, readable_error)
from automation.adapters.engine.settings import ProgramFactory, PulumiSettings
from automation.adapters.engine.trace import EngineTrace
from automation.adapters.engine.workspace import Workspace
from components.program import program
from stacks.inputs import INPUTS_CONFIG_KEY, StackProgramInputs
from stacks.targets import config_digest

log = logging.getLogger(__name__)

PROJECT = "hubwright"
CONFIG_KEY = f"{PROJECT}:{INPUTS_CONFIG_KEY}"  # hubwright:inputs
PULUMI_GOGC = "400"  # the pulumi CLI's GOGC unless the service's environment sets one
MESSAGE_PREFIX = "hubwright: "  # marks updates this service started (history, console)
# `applied` (the inputs of the last successful up) from the stack's own state, not from its history:
# every run exports its inputs under a key of their own, `inputs.<digest>` (applied_output), and a successful
# up then sets the stack tag APPLIED_TAG to that digest. Why both: a failed up replaces the outputs it
# registered and keeps the others (Pulumi finalises stack outputs so; tests/test_engine_drift_live.py shows it),
# so a single `inputs` output would hold a failed run's inputs; per-digest keys keep the successful run's,
# and only the tag, written after the CLI reported success, says which of them that is.
APPLIED_TAG = f"{PROJECT}:applied"


# --------------------------------------------------------------------------- the engine

class PulumiEngine:
    """Engine (automation.adapters.engine) over pulumi.automation, in this process; safe to call from several
    threads. The service runs it in worker processes (automation.adapters.engine.pool), one run per process: Pulumi's
    runtime keeps global state that inline programs of two stacks must not share."""

    def __init__(self, settings: PulumiSettings | None = None, *, program_factory: ProgramFactory | None = None):
        self.settings = settings or PulumiSettings()
        self.settings.check()
        self._program_factory = program_factory or program
        quiet_language_server()  # a failed run is its EngineError, not 60 lines of grpc traceback after it
        self._hostname = socket.gethostname()
        self._running: set[str] = set()
        self._guard = threading.Lock()
        self._command: auto.PulumiCommand | None = None
        self._env = {
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            # Go's collector for the CLI and its Go plugins (the AWS provider): each CLI call allocates about 20 MB
            # of tables at start and GOGC=100 collects through them; at 400 a call costs a third less CPU (0.82 s,
            # not 1.25 s, `pulumi version`, docs/engine.md). An operator's own GOGC is passed on.
            "GOGC": os.environ.get("GOGC", PULUMI_GOGC),
            # Dynamic providers and the language host must see this interpreter's packages.
            "PULUMI_PYTHON_CMD": sys.executable,
            **self.settings.env,
        }
        self._tags_supported = True
        self._policy = self._policy_args()
        self._cancelled_at = float("-inf")  # time.monotonic() of the last cancel()
        self._local = threading.local()  # .started: when this thread's run began

    # ----------------------------------------------------------------- protocol

    def up(self, inputs: StackProgramInputs, *, message: str, refresh: bool = False,
           on_progress: OnProgress | None = None) -> RunResult:
        """`refresh`: read every resource from the cloud first (`pulumi up --refresh`), so that the update also
        puts back what changed behind Pulumi's back (drift); without it, an up diffs against the state only.
        `on_progress(done, planned)`: from the engine's events (ProgressEvents)."""
        started = now_rfc3339()
        progress = ProgressEvents(on_progress) if on_progress is not None else None
        with self._traced("up", inputs.stack) as trace, self._stack(inputs.stack, inputs, create=True) as (ws, stack):
            self._write_settings(ws, stack, inputs)
            # show_secrets=False: the SDK's closing `stack history` then skips decrypting the config (a passphrase
            # stack derives its key again: about 1.3 s of CPU per run). The summary's config is not read here.
            # suppress_outputs: the outputs (the whole inputs, `inputs.<digest>`) are read apart, never from the log.
            result = self._call(stack, "up", lambda: stack.up(message=_message(message), color="never",
                                                               refresh=refresh or None, show_secrets=False,
                                                               suppress_outputs=True,
                                                               **trace.streams(progress), **self._policy))
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
            outputs=program_outputs(result.outputs),
            changes=dict(result.summary.resource_changes or {}),
            started=started,
            ended=now_rfc3339(),
            permalink=permalink_of(result.stdout),
            trace=trace.trace("up", inputs.stack),
        )

    def destroy(self, stack: str, *, message: str) -> RunResult:
        started = now_rfc3339()
        with self._traced("destroy", stack) as trace, self._stack(stack, None, create=False) as (ws, st):
            if st is None:
                return RunResult("destroy", True, f"no stack {stack}: nothing to destroy", started=started,
                                 ended=now_rfc3339(), trace=trace.trace("destroy", stack))
            result = self._call(st, "destroy", lambda: st.destroy(message=_message(message), color="never",
                                                                  show_secrets=False, suppress_outputs=True,
                                                                  **trace.streams()),
                                reason="DestroyFailed")
            self._call(st, "destroy", lambda: ws.remove_stack(st.name), reason="DestroyFailed")
        shutil.rmtree(self._workdir(stack), ignore_errors=True)
        changes = dict(result.summary.resource_changes or {})
        return RunResult(
            operation="destroy",
            ok=True,
            message=f"destroyed and removed the stack: {_summary(changes)}",
            changes=changes,
            started=started,
            ended=now_rfc3339(),
            permalink=permalink_of(result.stdout),
            trace=trace.trace("destroy", stack),
        )

    def forget(self, stack: str) -> str:
        with self._stack(stack, None, create=False) as (ws, st):
            if st is None:
                return f"no stack {stack}: nothing to forget"
            count = len(self._call(st, "forget", lambda: st.export_stack(), reason="ForgetFailed").deployment
                        .get("resources") or [])
            self._call(st, "forget", lambda: ws.remove_stack(st.name, force=True), reason="ForgetFailed")
        shutil.rmtree(self._workdir(stack), ignore_errors=True)
        return f"removed stack {stack} from the state backend ({count} entries); its resources stay in the cloud"

    def preview(self, inputs: StackProgramInputs) -> RunResult:
        """Drift check: `pulumi preview --refresh`. The refresh reads every resource from the cloud into the
        preview's copy of the state only; then the program's inputs are diffed against it. Nothing is written: no
        state, no history entry (tests/test_engine_drift_live.py). ok=True when nothing would change; `drifted`
        names the resources that would, "name (type)", sorted, at most DRIFT_LIMIT of them."""
        started = now_rfc3339()
        changed = ChangedResources()
        with self._traced("preview", inputs.stack) as trace, self._stack(inputs.stack, inputs, create=False) as (_, st):
            if st is None:
                return RunResult("preview", False, f"no stack {inputs.stack} yet: everything would be created",
                                 started=started, ended=now_rfc3339(), trace=trace.trace("preview", inputs.stack))
            result = self._call(st, "preview", lambda: st.preview(refresh=True, color="never", suppress_outputs=True,
                                                                  **trace.streams(changed), **self._policy))
        changes = {str(getattr(k, "value", k)): int(v) for k, v in (result.change_summary or {}).items()}
        drift = {k: v for k, v in changes.items() if k not in NO_CHANGE_OPS and v}
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
            ended=now_rfc3339(),
            drifted=drifted,
            trace=trace.trace("preview", inputs.stack),
        )

    def recover(self, stack: str, *, live_runners: Mapping[str, str] | None = None) -> RunResult:
        """Remove this service's stale lock, drop pending operations, refresh. A live lock raises StackLocked.
        `live_runners`: the runners with a live claim on the stack (a runner's recover knows them; locks.py)."""
        started = now_rfc3339()
        notes: list[str] = []
        self._local.live_runners = live_runners
        with self._traced("recover", stack) as trace, self._stack(stack, None, create=False) as (_, st):
            if st is None:
                return RunResult("recover", True, f"no stack {stack}: nothing to recover", started=started,
                                 ended=now_rfc3339(), trace=trace.trace("recover", stack))
            state = self._call(st, "recover", st.export_stack, reason="RecoveryFailed")
            pending = list((state.deployment or {}).get("pending_operations") or [])
            if pending:
                state.deployment["pending_operations"] = []
                self._unlocked(st, lambda: st.import_stack(state), notes)
                dropped = ", ".join(f"{op.get('type', '?')} {op.get('resource', {}).get('urn', '?')}" for op in pending)
                notes.append(f"cleared {len(pending)} pending operation(s): {dropped}")
            self._unlocked(st, lambda: st.refresh(message=_message("recover after an interrupted run"), color="never",
                                                  **trace.streams()), notes)
        message = "; ".join(notes) + "; refreshed" if notes else "nothing to recover (no stale lock, no pending operations); refreshed"
        log.info("recover %s: %s", stack, message)
        return RunResult("recover", True, message, started=started, ended=now_rfc3339(),
                         trace=trace.trace("recover", stack))

    def applied(self, stack: str) -> StackProgramInputs | None:
        """The inputs of the last successful `up`: the output `inputs.<digest>` named by the tag APPLIED_TAG (two
        CLI calls, however many updates failed since). None when the stack does not exist. A stack whose tag
        or output is missing (written before this engine, updated by hand with __main__.py, a backend without
        tags, a crash between the up and the tag) is read the legacy way, from its history."""
        with self._stack(stack, None, create=False) as (ws, st):
            if st is None:
                return None
            digest = self._applied_tag(st)
            if digest is not None:
                outputs = self._call(st, "applied", lambda: ws.masked_outputs(st.name))  # none read is a secret
                raw = outputs.get(applied_output(digest))
                if raw is not None:
                    return parse_inputs(stack, raw)
            return self._applied_from_history(st)

    def _applied_from_history(self, st: Any, *, window: int = HISTORY_WINDOW) -> StackProgramInputs | None:
        """LEGACY (stacks without the tag and output of `applied`): applied_inputs.from_history, over this stack's
        last `window` history entries through the CLI."""
        def page(number: int) -> Any:
            return self._call(st, "history", lambda: st.history(page_size=HISTORY_PAGE, page=number, show_secrets=False))

        return from_history(st.name, CONFIG_KEY, page, window=window)

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

    def _inline(self, inputs: StackProgramInputs | None) -> Callable[[], None] | None:
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
    def _traced(self, operation: Operation, stack: str) -> Iterator[EngineTrace]:
        """The run's EngineTrace, which _call gives a failed CLI call's output; an EngineError leaving the block
        carries the run's Trace (diff and log so far)."""
        self._local.trace = trace = EngineTrace(self.settings.log_bytes)
        try:
            yield trace
        except EngineError as err:
            err.trace = err.trace or trace.trace(operation, stack)
            raise
        finally:
            self._local.trace = None

    @contextmanager
    def _stack(self, name: str, inputs: StackProgramInputs | None, *, create: bool) -> Iterator[tuple[Any, Any]]:
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
            ws = Workspace(
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
        except CommandError as err:
            if isinstance(err, ConcurrentUpdateError) and not locked:
                raise
            trace = getattr(self._local, "trace", None)
            if trace is not None:  # what the CLI said, in the run's log (a call that streamed it: already there)
                trace.add_error(str(err))
            if isinstance(err, ConcurrentUpdateError):
                raise StackLocked(f"stack {stack.name} is locked: {describe_locks(ANSI_ESCAPES.sub('', str(err)))}") \
                    from None
            if self._cancelled_at >= getattr(self._local, "started", float("inf")):
                raise RunCancelled(f"{op} {stack.name}: cancelled: {readable_error(err)}") from None
            refused = policy_violations(str(err))
            if refused:
                raise PolicyViolation(f"{op} {stack.name}: the policy pack refused it: {refused}") from None
            raise EngineError(f"{op} {stack.name}: {readable_error(err)}", reason=reason) from None

    def _unlocked(self, stack: Any, fn: Callable[[], Any], notes: list[str]) -> Any:
        """Run fn; on a lock, remove it if it is a stale lock of this service and run fn again."""
        try:
            return self._call(stack, "recover", fn, reason="RecoveryFailed", locked=False)
        except ConcurrentUpdateError as err:
            stale, why = judge_locks(stack, ANSI_ESCAPES.sub("", str(err)), hostname=self._hostname,
                                     own_hosts=self.settings.own_hosts, runner_hosts=self.settings.runner_hosts,
                                     live_runners=getattr(self._local, "live_runners", None),
                                     stale_after_s=self.settings.stale_lock_after_s, ours=MESSAGE_PREFIX)
        if not stale:
            raise StackLocked(f"stack {stack.name} is locked: {why}")
        self._call(stack, "recover", stack.cancel, reason="RecoveryFailed")
        notes.append(f"removed the {why}")
        log.warning("stack %s: removed the %s", stack.name, why)
        return self._call(stack, "recover", fn, reason="RecoveryFailed")

    def _write_settings(self, ws: Any, stack: Any, inputs: StackProgramInputs) -> None:
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

    def _mark_applied(self, stack: Any, inputs: StackProgramInputs) -> None:
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

    def _write_tags(self, stack: Any, inputs: StackProgramInputs) -> None:
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


def _message(why: str) -> str:
    why = " ".join(why.split()) or "reconcile"
    return why if why.startswith(MESSAGE_PREFIX) else MESSAGE_PREFIX + why


def _summary(changes: Mapping[str, Any] | None) -> str:
    items = [f"{k} {v}" for k, v in sorted((changes or {}).items()) if v]
    return ", ".join(items) or "no changes"
