"""`python -m automation sandbox run`: the sandbox's supervisor, what `sandbox up` starts detached (and what a
container would run in the foreground).

It takes the folder's lock, empties the folder of a previous run, then starts each piece and waits until it is
ready: the hub's API server (etcd + kube-apiserver + kube-controller-manager, apiserver.py), the AWS endpoint
(moto, aws.py: whenever moto's server is installed; seeded with `--fleet`/`--hub`), and with `--forge` the forge
(Gitea, gitea.py, with an organisation). Then it writes the environment to use (folder.py's `env`), says so, and
watches: SIGTERM, SIGINT or SIGHUP stop every piece and end it with 0; a piece that exits stops the others and
ends it with 1. A piece that does not start is named, with the end of its log, and what was started is stopped.

Progress goes to stderr and, for `up`, to the pipe `--ready-fd` names: a line each, `progress TEXT`,
`error TEXT`, and `ready` once the environment is written.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from automation.sandbox import aws
from automation.sandbox.apiserver import APISERVER, CONTROLLER_MANAGER, ETCD, SANDBOX_CONTROLLERS, ControlPlane
from automation.sandbox.folder import Folder, NotOurs, env_lines
from automation.sandbox.gitea import Gitea, find_gitea
from automation.sandbox.tools import MissingBinaries, find_binary

FORGE_OWNER = "hubwright"  # the forge's organisation the sandbox makes (FORGE_OWNER)
HUB, AWS, FORGE = "the hub's API server", "the AWS endpoint (moto)", "the forge (Gitea)"  # the pieces, in order
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived (raised by the handler wherever the supervisor was)."""


class PieceFailed(RuntimeError):
    def __init__(self, piece: str, cause: BaseException):
        super().__init__(f"{piece} did not start: {cause}")


def check_binaries(forge: bool) -> None:
    """MissingBinaries (one line) naming every binary the sandbox would need and cannot find."""
    missing = [name for name in (ETCD, APISERVER, CONTROLLER_MANAGER, "openssl") if find_binary(name) is None]
    if forge:
        try:
            find_gitea()
        except MissingBinaries:
            missing.append("gitea")
        if find_binary("ssh-keygen") is None:
            missing.append("ssh-keygen")
    if missing:
        raise MissingBinaries(missing)


def check_aws(fleet: Optional[Path]) -> bool:
    """Whether the sandbox has an AWS (moto's server installed); MissingBinaries-like refusal when a fleet asks
    for one that cannot be."""
    if aws.moto_installed():
        return True
    if fleet is not None:
        raise aws.MotoMissing(f"{aws.NEEDS_MOTO} (--fleet seeds it)")
    return False


class Reporter:
    """Progress for a person (stderr) and for `up` (the pipe of --ready-fd, closed once ready or failed)."""

    def __init__(self, ready_fd: Optional[int], err: TextIO = sys.stderr):
        self.err = err
        self.lock = threading.Lock()  # pieces start in threads of their own
        self.pipe: Optional[TextIO] = os.fdopen(ready_fd, "w", buffering=1) if ready_fd is not None else None

    def _send(self, kind: str, text: str = "") -> None:
        if self.pipe is None:
            return
        try:
            for line in text.splitlines() or [""]:
                self.pipe.write(f"{kind} {line}".rstrip() + "\n")
        except (BrokenPipeError, ValueError):  # `up` is gone (interrupted): go on without it
            self.close()

    def say(self, text: str) -> None:
        with self.lock:
            self.err.write(f"sandbox: {text}\n")
            self.err.flush()
            self._send("progress", text)

    def failed(self, text: str) -> None:
        with self.lock:
            self.err.write(f"sandbox: error: {text}\n")
            self.err.flush()
            self._send("error", text)
            self.close()

    def ready(self) -> None:
        self._send("ready")
        self.close()

    def close(self) -> None:
        if self.pipe is not None:
            try:
                self.pipe.close()
            except (BrokenPipeError, ValueError):
                pass
            self.pipe = None


@dataclass
class Piece:
    rank: int  # the order of its variables in the environment
    name: str  # for a person: "the hub's API server"
    processes: Callable[[], dict[str, Any]]  # name -> Popen
    stop: Callable[[], None]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Supervisor:
    folder: Folder
    fleet: Optional[Path] = None
    hub: Optional[Path] = None
    forge: bool = False
    report: Reporter = field(default_factory=lambda: Reporter(None))
    pieces: list[Piece] = field(default_factory=list)
    saving: threading.Lock = field(default_factory=threading.Lock)

    # -- the pieces -------------------------------------------------------------------------------------------
    def _apiserver(self) -> Piece:
        plane = ControlPlane(self.folder.sub("apiserver"))
        piece = Piece(0, HUB, plane.processes, plane.stop)
        self.pieces.append(piece)  # stopped whatever happens next
        t0 = time.monotonic()
        plane.start()
        self._save()
        plane.start_controller_manager(SANDBOX_CONTROLLERS)
        kubeconfig = plane.kubeconfig(self.folder.path / "kubeconfig", "hubwright-sandbox")
        piece.env = {"KUBECONFIG": str(kubeconfig)}
        self.report.say(f"{HUB} is ready at {plane.host} ({time.monotonic() - t0:.1f} s): etcd, "
                        f"kube-apiserver, kube-controller-manager; admin kubeconfig {kubeconfig}")
        return piece

    def _aws(self) -> Piece:
        work = self.folder.sub("aws")
        t0 = time.monotonic()
        moto = aws.start_moto(log=work / "moto.log")
        piece = Piece(1, AWS, lambda: {"moto": moto.process}, lambda: aws.stop_moto(moto.process))
        self.pieces.append(piece)
        account, region = aws.DEFAULT_ACCOUNT, "us-east-1"
        if self.fleet is not None and self.hub is not None:
            summary = aws.seed_fleet(moto.url, self.hub, self.fleet)
            account, region = summary.hub_account_id, summary.hub_region
            (work / "seeded.txt").write_text(str(summary) + "\n")
            for line in summary.lines():
                self.report.say(line)
        # A local run stops at the Pulumi AWS provider plugin on every machine (docs/quickstart.md): the CLI does
        # not fetch one, which would then act on this fake AWS in ways nothing here tests.
        piece.env = {**aws.service_env(moto.url, account, region),
                     "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"}
        self.report.say(f"{AWS} is ready at {moto.url} ({time.monotonic() - t0:.1f} s)"
                        + ("" if self.fleet else ": empty (--fleet and --hub seed it)"))
        return piece

    def _forge(self) -> Piece:
        work = self.folder.sub("forge")
        t0 = time.monotonic()
        forge = Gitea(work / "gitea")
        piece = Piece(2, FORGE, lambda: {"gitea": forge.process} if forge.process else {}, forge.stop)
        self.pieces.append(piece)
        forge.start()
        self._save()
        forge.bootstrap()
        owner = forge.create_org(FORGE_OWNER)
        known_hosts = work / "known_hosts"
        known_hosts.write_text(forge.known_hosts() + "\n")
        password = work / "admin-password"
        password.write_text(forge.password + "\n")
        password.chmod(0o600)
        piece.env = {"FORGE_URL": forge.url, "FORGE_OWNER": owner, "FORGE_TOKEN": forge.token,
                     "FORGE_SSH_HOST": forge.ssh_host, "FORGE_SSH_PORT": str(forge.ssh_port),
                     "FORGE_KNOWN_HOSTS": str(known_hosts)}
        self.report.say(f"{FORGE} is ready at {forge.url} ({time.monotonic() - t0:.1f} s): organisation "
                        f"{owner}, SSH on {forge.ssh_host}:{forge.ssh_port}; web sign-in {forge.admin} with the "
                        f"password in {password}")
        return piece

    # -- running ----------------------------------------------------------------------------------------------
    def _save(self) -> None:
        with self.saving:
            processes = {name: process.pid for piece in list(self.pieces)
                         for name, process in piece.processes().items()}
            self.folder.write_state({"supervisor": os.getpid(), "processes": processes})

    def _start(self, name: str, start: Callable[[], Piece]) -> Piece:
        try:
            return start()
        except (Stopped, PieceFailed):
            raise
        except Exception as exc:
            raise PieceFailed(name, exc) from exc

    def run(self) -> int:
        try:
            self.folder.prepare()
        except NotOurs as exc:
            self.report.failed(str(exc))
            return 1
        lock = self.folder.lock()
        if lock is None:
            self.report.failed(f"a sandbox is already running in {self.folder} (supervisor pid "
                               f"{self.folder.pids().get('supervisor', '?')})")
            return 1
        os.ftruncate(lock, 0)
        os.write(lock, f"{os.getpid()}\n".encode())
        for name, pid in self.folder.kill_leftovers().items():  # a supervisor killed hard left them running here
            self.report.say(f"killed {name} (pid {pid}), left by a supervisor that was killed")
        self.folder.clear()
        self._save()
        for signum in SIGNALS:
            signal.signal(signum, _raise_stopped)
        try:
            return self._run()
        except Stopped:
            self.report.say("stopping")
            return 0
        except (PieceFailed, MissingBinaries, aws.MotoMissing) as exc:
            self.report.failed(str(exc))
            return 1
        finally:
            for signum in SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            self.report.close()
            self.folder.forget()
            for piece in reversed(self.pieces):
                piece.stop()
            sys.stderr.write("sandbox: stopped\n")
            os.close(lock)

    def _run(self) -> int:
        t0 = time.monotonic()
        check_binaries(self.forge)
        with_aws = check_aws(self.fleet)
        if not with_aws:
            self.report.say(f"no AWS endpoint: {aws.NEEDS_MOTO}")
        # The AWS endpoint and the forge start in threads beside the API server; on a stop or a failure the pool
        # is waited for (each start is bounded), then every piece started is stopped (run's finally).
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="piece") as pool:
            beside: list[Future] = []
            if with_aws:
                beside.append(pool.submit(self._start, AWS, self._aws))
            if self.forge:
                beside.append(pool.submit(self._start, FORGE, self._forge))
            self._start(HUB, self._apiserver)
            for future in beside:
                future.result()
        self._save()
        env = {name: value for piece in sorted(self.pieces, key=lambda p: p.rank) for name, value in piece.env.items()}
        self.folder.write_env(env)
        self.report.say(f"ready in {time.monotonic() - t0:.1f} s; the environment is in {self.folder.path / 'env'}")
        if self.report.pipe is None:  # in the foreground: the environment on stdout too
            sys.stdout.write(env_lines(env))
            sys.stdout.flush()
        self.report.ready()
        return self._watch()

    def _watch(self) -> int:
        """Until a signal (Stopped, raised out of the sleep) or a piece's process exits."""
        while True:
            time.sleep(1)
            for piece in self.pieces:
                for name, process in piece.processes().items():
                    if process.poll() is not None:
                        sys.stderr.write(f"sandbox: error: {name} ({piece.name}) exited with {process.returncode}: "
                                         "stopping the sandbox\n")
                        return 1


def _raise_stopped(signum: int, frame: Any) -> None:
    for other in SIGNALS:  # once: a second signal must not cut the stop short
        signal.signal(other, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def run(folder: Path, *, fleet: Optional[Path] = None, hub: Optional[Path] = None, forge: bool = False,
        ready_fd: Optional[int] = None) -> int:
    """The supervisor, in this process, until a signal: its exit code."""
    return Supervisor(Folder(folder), fleet, hub, forge, Reporter(ready_fd)).run()
