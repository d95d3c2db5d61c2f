"""Apply a new central config to a running HAProxy without dropping other clusters' connections.

HAProxy runs in master-worker mode (`haproxy -W -S <master socket> -f haproxy.cfg`). For each new
rendered config, `plan_change` picks the cheapest safe step:

- **runtime**: every backend the new config needs is already loaded, identical, so only the
  cluster-ID map changes: `add map` / `set map` / `del map` through the master CLI, forwarded to the
  current worker. Nothing restarts; removing a cluster is always this path.
- **reload**: anything else (a new or changed backend, a changed frontend). The master starts a new
  worker on the same listening sockets and the old worker finishes its established connections
  (until `hard-stop-after`), so no open connection is cut and no new one is refused.

`Debouncer` batches a burst of changes into one apply; `watch` is the loop the reloader sidecar
runs next to HAProxy: `python -m automation.adapters.files.haproxy --source DIR --master-socket PATH`.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Literal, Mapping, TypeVar

from automation.adapters.atomic import write_atomically
from stacks.haproxy import CONFIG_FILE, MAP_FILE, CentralConfig

log = logging.getLogger("hubwright.ingress")


class RuntimeApiError(RuntimeError):
    """HAProxy answered a runtime command with an error."""


class ReloadFailed(RuntimeError):
    """The master did not start a worker with the new config; the old worker still serves the old one."""


# --- what is loaded, and what a new config needs ---------------------------------

@dataclass(frozen=True)
class Loaded:
    """What the running worker holds: the config's fixed part, its cluster backends, the live map."""

    fixed: str
    backends: Mapping[str, str]
    routes: Mapping[str, str]

    @classmethod
    def of(cls, config: CentralConfig) -> "Loaded":
        fixed, backends = config.sections()
        return cls(fixed, backends, config.routes())


@dataclass(frozen=True)
class Change:
    kind: Literal["none", "runtime", "reload"]
    commands: tuple[str, ...] = ()  # runtime API commands, for kind == "runtime"
    reason: str = ""


def plan_change(loaded: Loaded | None, desired: CentralConfig) -> Change:
    """The cheapest step that makes the running proxy route like `desired`. Pure."""
    if loaded is None:
        return Change("reload", reason="the running config is unknown")
    fixed, backends = desired.sections()
    if fixed != loaded.fixed:
        return Change("reload", reason="the frontend or global settings changed")
    missing = sorted(name for name, text in backends.items() if loaded.backends.get(name) != text)
    if missing:
        return Change("reload", reason=f"backends to load: {', '.join(missing)}")
    want, have, path = desired.routes(), loaded.routes, desired.map_path
    commands = [f"del map {path} {key}" for key in sorted(set(have) - set(want))]
    commands += [f"add map {path} {key} {want[key]}" for key in sorted(set(want) - set(have))]
    commands += [f"set map {path} {key} {want[key]}" for key in sorted(set(want) & set(have)) if want[key] != have[key]]
    if not commands:
        return Change("none", reason="the running proxy already routes like this")
    return Change("runtime", tuple(commands), reason="map entries only")


# --- the master CLI --------------------------------------------------------------

@dataclass(frozen=True)
class Processes:
    reloads: int
    failed: int | None  # None when this HAProxy's `show proc` does not report it
    workers: tuple[int, ...]  # the current generation only


_MASTER = re.compile(r"^(\d+)\s+master\s+(\d+)(?:\s+\[failed:\s*(\d+)\])?", re.M)


def parse_show_proc(text: str) -> Processes:
    found = _MASTER.search(text)
    if not found:
        raise RuntimeApiError(f"unexpected `show proc` answer: {text[:200]!r}")
    workers, section = [], None
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.strip("# ").lower()
            continue
        fields = line.split()
        if section == "workers" and len(fields) > 1 and fields[0].isdigit() and fields[1] == "worker":
            workers.append(int(fields[0]))
    failed = int(found[3]) if found[3] is not None else None
    return Processes(int(found[2]), failed, tuple(workers))


class MasterCLI:
    """HAProxy's master CLI socket (`-S`): `reload`, `show proc`, and `@1 <command>` for the current worker."""

    def __init__(self, path: str, *, timeout: float = 5.0):
        self.path = path
        self.timeout = timeout

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            sock.sendall(line.encode() + b"\n")
            sock.shutdown(socket.SHUT_WR)  # non-interactive: the master answers, then closes
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def worker(self, line: str) -> str:
        return self.command(f"@1 {line}")

    def processes(self) -> Processes:
        return parse_show_proc(self.command("show proc"))

    def reload(self, *, timeout: float = 30.0, poll: float = 0.05) -> Processes:
        """Reload and wait for the new worker; raise ReloadFailed if the master could not load the config."""
        before = self.processes()
        self.command("reload")  # the master re-executes; the answer is a closed connection
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(poll)
            try:
                now = self.processes()
            except (OSError, RuntimeApiError):  # the master is re-executing
                continue
            if now.failed is not None and before.failed is not None and now.failed > before.failed:
                raise ReloadFailed("HAProxy refused the new config; the previous worker keeps serving")
            if now.reloads > before.reloads and now.workers and not set(now.workers) & set(before.workers):
                return now
        raise ReloadFailed(f"no new worker within {timeout:.0f}s of the reload")


# --- applying --------------------------------------------------------------------

@dataclass
class CentralRuntime:
    """A running central proxy. `apply` writes the files (when `config_path` is set), then changes the proxy.

    In the pod the files are the mounted ConfigMap (`config_path=None`: kubelet already wrote them).
    """

    cli: MasterCLI
    config_path: str | None = None
    loaded: Loaded | None = None
    reload_timeout: float = 30.0
    history: list[Change] = field(default_factory=list)

    def apply(self, desired: CentralConfig) -> Change:
        change = plan_change(self.loaded, desired)
        if self.config_path:
            write_atomically(desired.map_path, desired.map)  # the map first: a reload reads both
            write_atomically(self.config_path, desired.config)
        if change.kind == "runtime":
            for command in change.commands:
                answer = self.cli.worker(command).strip()
                if answer:
                    raise RuntimeApiError(f"{command!r}: {answer}")
            assert self.loaded is not None
            self.loaded = Loaded(self.loaded.fixed, self.loaded.backends, desired.routes())
        elif change.kind == "reload":
            self.cli.reload(timeout=self.reload_timeout)
            self.loaded = Loaded.of(desired)
        self.history.append(change)
        log.info("shared ingress: %s (%s)", change.kind, change.reason)
        return change


# --- batching --------------------------------------------------------------------

T = TypeVar("T")


class Debouncer(Generic[T]):
    """Hold the latest offered value; apply it once nothing new came for `quiet` seconds,
    or `max_delay` seconds after the first unapplied offer, whichever is first."""

    def __init__(self, apply: Callable[[T], object], *, quiet: float = 2.0, max_delay: float = 15.0,
                 clock: Callable[[], float] = time.monotonic):
        self._apply, self.quiet, self.max_delay, self._clock = apply, quiet, max_delay, clock
        self._pending: T | None = None
        self._first = self._last = 0.0
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def offer(self, value: T) -> None:
        with self._lock:
            now = self._clock()
            if self._pending is None:
                self._first = now
            self._pending, self._last = value, now

    def due(self) -> bool:
        with self._lock:
            if self._pending is None:
                return False
            now = self._clock()
            return now - self._last >= self.quiet or now - self._first >= self.max_delay

    def flush(self, *, force: bool = False) -> bool:
        """Apply the pending value if it is due (or `force`); True when something was applied."""
        if not (self.due() or (force and self.pending)):
            return False
        with self._lock:
            value, self._pending = self._pending, None
        if value is None:  # another thread's flush took it since due() was asked
            return False
        try:
            self._apply(value)
        except BaseException:
            with self._lock:
                if self._pending is None:  # nothing newer arrived: try this one again later
                    self._pending, self._first, self._last = value, self._clock(), self._clock()
            raise
        return True


def read_source(folder: str, map_path: str | None = None) -> CentralConfig:
    """The rendered config and map in `folder` (a mounted ConfigMap: haproxy.cfg + clusters.map)."""
    with open(os.path.join(folder, CONFIG_FILE), encoding="utf-8") as fh:
        config = fh.read()
    with open(os.path.join(folder, MAP_FILE), encoding="utf-8") as fh:
        routes = fh.read()
    return CentralConfig(config=config, map=routes, map_path=map_path or os.path.join(folder, MAP_FILE))


def watch(source: str, runtime: CentralRuntime, *, interval: float = 1.0, quiet: float = 2.0,
          max_delay: float = 15.0, stop: threading.Event | None = None) -> None:
    """Poll `source` and apply changes, batched; errors are logged and retried, never fatal."""
    stop = stop or threading.Event()
    debouncer: Debouncer[CentralConfig] = Debouncer(runtime.apply, quiet=quiet, max_delay=max_delay)
    seen: CentralConfig | None = None
    while not stop.is_set():
        try:
            current = read_source(source)
            if current != seen:  # kubelet swaps a ConfigMap's files in one rename
                seen = current
                debouncer.offer(current)
            debouncer.flush()
        except ReloadFailed as exc:  # the same config would fail again: wait for the next change
            log.error("shared ingress: %s", exc)
            debouncer = Debouncer(runtime.apply, quiet=quiet, max_delay=max_delay)
        except (OSError, RuntimeApiError) as exc:  # HAProxy not up yet, or mid-restart
            log.warning("shared ingress: will retry: %s", exc)
        stop.wait(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m automation.adapters.files.haproxy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="folder with haproxy.cfg and clusters.map (the ConfigMap)")
    parser.add_argument("--master-socket", required=True, help="HAProxy's master CLI socket (haproxy -W -S PATH)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between looks at --source")
    parser.add_argument("--quiet", type=float, default=2.0, help="apply once the source was unchanged this long")
    parser.add_argument("--max-delay", type=float, default=15.0, help="apply at most this long after a change")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    # The running config is unknown at start: the first apply is a (hitless) reload.
    watch(args.source, CentralRuntime(MasterCLI(args.master_socket)), interval=args.interval,
          quiet=args.quiet, max_delay=args.max_delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
