"""`python -m automation sandbox {up,env,down,run}`: the command line of the local sandbox.

`up` starts the supervisor (supervisor.py) detached, in a session of its own, its output in DIR/supervisor.log,
relays its progress to stderr until every piece is ready (or one failed: named, with the end of its log, and
what was started stopped), then prints the environment as `export NAME=value` lines on stdout, so that
`eval "$(python -m automation sandbox up)"` sets it. `env` prints them again; `down` stops the supervisor (SIGTERM:
it stops every piece), waits until every process is gone and removes DIR; `run` is the supervisor in the
foreground. DIR (folder.py) defaults to $XDG_STATE_HOME/hubwright/sandbox or ~/.local/state/hubwright/sandbox.
"""
from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from automation.sandbox import aws
from automation.sandbox.folder import LOG, Folder, NotOurs, default_dir
from automation.sandbox.supervisor import check_aws, check_binaries, run
from automation.sandbox.tools import MissingBinaries, kill, tail, wait_gone

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder `automation` is in: the supervisor imports it there
STATE_DIR = "$XDG_STATE_HOME/hubwright/sandbox, else ~/.local/state/hubwright/sandbox"


def _say(text: str) -> None:
    sys.stderr.write(f"sandbox: {text}\n")
    sys.stderr.flush()


def _error(text: str) -> int:
    sys.stderr.write(f"error: {text}\n")
    return 1


def _folder(args: argparse.Namespace) -> Folder:
    return Folder(Path(args.dir) if args.dir else default_dir())


def _dir_flag(args: argparse.Namespace, folder: Folder) -> str:
    return f" --dir {folder}" if args.dir else ""


def _fleet(args: argparse.Namespace) -> tuple[Optional[Path], Optional[Path]]:
    """(--fleet, --hub), absolute (the supervisor runs in DIR); SystemExit 2 unless both or neither."""
    if (args.fleet is None) != (args.hub is None):
        args.parser.error("--fleet and --hub go together (the clusters, and the HubConfig they are resolved with)")
    if args.fleet is None:
        return None, None
    fleet, hub = Path(args.fleet).absolute(), Path(args.hub).absolute()
    for flag, path in (("--fleet", fleet), ("--hub", hub)):
        if not path.exists():
            args.parser.error(f"{flag} {path}: no such file or folder")
    return fleet, hub


# --------------------------------------------------------------------------- up

def _up(args: argparse.Namespace) -> int:
    folder = _folder(args)
    fleet, hub = _fleet(args)
    try:
        check_binaries(args.forge)
        check_aws(fleet)
        folder.prepare()
    except (MissingBinaries, aws.MotoMissing, NotOurs) as exc:
        return _error(str(exc))
    if folder.running():
        return _error(f"a sandbox is already running in {folder} (supervisor pid {_supervisor(folder) or '?'}): "
                      f"`python -m automation sandbox down{_dir_flag(args, folder)}` stops it")
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", "automation", "sandbox", "run", "--dir", str(folder), "--ready-fd", str(write_fd)]
    argv += ["--fleet", str(fleet), "--hub", str(hub)] if fleet is not None and hub is not None else []
    argv += ["--forge"] if args.forge else []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))
    t0 = time.monotonic()
    with open(folder.path / LOG, "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=folder.path, env=env,
                                   start_new_session=True, pass_fds=(write_fd,))
    os.close(write_fd)
    _say(f"starting in {folder} (supervisor pid {process.pid}, its log {folder.path / LOG})")
    try:
        ready, errors = _follow(read_fd, args.timeout)
    except KeyboardInterrupt:
        _stop(process, folder)
        return 130
    finally:
        os.close(read_fd)
    if not ready:
        _stop(process, folder)
        if not errors:  # the supervisor said nothing: its own log says why
            sys.stderr.write(f"--- the end of {folder.path / LOG}:\n{tail(folder.path / LOG)}\n")
        return _error(f"the sandbox did not start; its logs are in {folder} "
                      f"(`python -m automation sandbox down{_dir_flag(args, folder)}` removes them)")
    sys.stdout.write(folder.env() or "")
    sys.stdout.flush()
    _say(f"up in {time.monotonic() - t0:.1f} s. In another shell: eval \"$(python -m automation sandbox env"
         f"{_dir_flag(args, folder)})\"; to stop it: python -m automation sandbox down{_dir_flag(args, folder)}")
    return 0


def _follow(read_fd: int, timeout: float) -> tuple[bool, list[str]]:
    """Relay the supervisor's progress from its pipe until it says ready (True), fails or goes (False: the pipe
    closed), or `timeout` s pass; and the error lines it sent."""
    deadline = time.monotonic() + timeout
    pending, errors = b"", []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            errors.append(f"the sandbox was not ready within {timeout:.0f} s")
            sys.stderr.write(f"error: {errors[-1]}\n")
            return False, errors
        readable, _, _ = select.select([read_fd], [], [], min(left, 1.0))
        if not readable:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:  # the supervisor closed the pipe without `ready`: it failed, or exited
            return False, errors
        pending += chunk
        *lines, rest = pending.split(b"\n")
        pending = rest
        for raw in lines:
            kind, _, text = raw.decode(errors="replace").partition(" ")
            if kind == "ready":
                return True, errors
            if kind == "error":
                errors.append(text)
                sys.stderr.write(f"error: {text}\n" if len(errors) == 1 else f"{text}\n")
            else:
                _say(text)
        sys.stderr.flush()


def _stop(process: subprocess.Popen, folder: Folder, timeout: float = 60) -> None:
    """Stop a supervisor `up` started: SIGTERM (it stops its pieces); after `timeout` s SIGKILL to it and to what
    it left running in the folder."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    folder.kill_leftovers()


# --------------------------------------------------------------------------- env, down

def _env(args: argparse.Namespace) -> int:
    folder = _folder(args)
    if not folder.running():
        return _error(f"no sandbox running in {folder}: `python -m automation sandbox up{_dir_flag(args, folder)}` "
                      "starts one")
    text = folder.env()
    if text is None:
        return _error(f"the sandbox in {folder} is not ready (yet): its log is {folder.path / LOG}")
    sys.stdout.write(text)
    return 0


def _supervisor(folder: Folder) -> Optional[int]:
    """The running supervisor's pid (written in its lock file), else its state's."""
    try:
        return int((folder.path / "lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return folder.pids().get("supervisor")


def _named(pids: dict[str, int], which: list[int]) -> str:
    return ", ".join(f"{name} (pid {pid})" for name, pid in pids.items() if pid in which)


def _down(args: argparse.Namespace) -> int:
    folder = _folder(args)
    if not folder.path.exists():
        _say(f"no sandbox in {folder}: nothing to stop")
        return 0
    if not folder.ours():
        return _error(f"{folder} is not a sandbox's folder: left alone")
    pids = folder.pids()
    if not folder.running():
        leftovers = folder.kill_leftovers(args.timeout)  # a supervisor killed hard leaves its pieces
        folder.remove()
        _say(f"no sandbox running in {folder}" + (f"; killed {', '.join(leftovers)} left by a supervisor that was "
                                                  "killed" if leftovers else "") + "; removed the folder")
        return 0
    supervisor = _supervisor(folder)
    if supervisor is None:
        return _error(f"a sandbox is running in {folder} but its supervisor's pid is unknown")
    pids["supervisor"] = supervisor
    _say(f"stopping the sandbox in {folder} (supervisor pid {supervisor})")
    kill(supervisor, signal.SIGTERM)
    left = wait_gone(pids.values(), args.timeout, folder.running)
    if left:
        _say(f"still running after {args.timeout:.0f} s: {_named(pids, left)}; killing them")
        for pid in left:
            kill(pid)
        left = wait_gone(left, 10)
        if left:
            return _error(f"could not stop {_named(pids, left)}")
    folder.remove()
    _say(f"stopped; removed {folder}")
    return 0


def _run(args: argparse.Namespace) -> int:
    fleet, hub = _fleet(args)
    folder = _folder(args)
    folder.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chdir(folder.path)  # every piece runs in the folder: nothing lands where the command was started
    return run(folder.path, fleet=fleet, hub=hub, forge=args.forge, ready_fd=args.ready_fd)


# --------------------------------------------------------------------------- the parser

def add_sandbox_command(sub: Any) -> None:
    sandbox = sub.add_parser(
        "sandbox", help="the hub's pieces on this machine, on loopback: a real kube-apiserver, AWS faked by moto, "
                        "a Gitea (up, env, down, run)",
        description="The hub's pieces a laptop can run, on loopback: a real etcd, kube-apiserver and "
                    "kube-controller-manager, AWS faked by moto (when moto[server] is installed; seeded from a fleet "
                    "with --fleet and --hub) and, with --forge, a real Gitea. `up` starts them in the background "
                    "and prints their environment; `env` prints it again; `down` stops them and removes their "
                    f"folder ({STATE_DIR}, or --dir).")
    commands = sandbox.add_subparsers(dest="sandbox_command", required=True, metavar="{up,env,down,run}")

    def with_dir(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--dir", help=f"the sandbox's folder: its state, logs and data (default: {STATE_DIR}; "
                                          "never the current directory)")
        parser.set_defaults(parser=parser)
        return parser

    def with_pieces(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--fleet", metavar="CLUSTERS", help="seed the fake AWS with what these clusters need (a "
                                                                "Cluster YAML file or a folder of them; with --hub)")
        parser.add_argument("--hub", metavar="HUB.yaml", help="the HubConfig the --fleet is resolved with")
        parser.add_argument("--forge", action="store_true",
                            help="also run a Gitea, with an organisation (FORGE_URL, FORGE_OWNER, FORGE_TOKEN)")

    up = with_dir(commands.add_parser(
        "up", help="start the sandbox in the background; print its environment as `export` lines",
        description="Start the sandbox's supervisor in the background, wait until every piece is ready, and print "
                    "the environment to use as `export NAME=value` lines (eval \"$(python -m automation sandbox "
                    "up)\"): KUBECONFIG; with moto installed AWS_ENDPOINT_URL and credentials; with --forge "
                    "FORGE_URL, FORGE_OWNER, FORGE_TOKEN and the forge's SSH host, port and known_hosts file."))
    with_pieces(up)
    up.add_argument("--timeout", type=float, default=180, help="seconds to wait for every piece (default 180)")
    up.set_defaults(func=_up)

    env = with_dir(commands.add_parser("env", help="print the running sandbox's environment again"))
    env.set_defaults(func=_env)

    down = with_dir(commands.add_parser("down", help="stop the sandbox (every process) and remove its folder"))
    down.add_argument("--timeout", type=float, default=60, help="seconds to wait before killing (default 60)")
    down.set_defaults(func=_down)

    foreground = with_dir(commands.add_parser(
        "run", help="the sandbox's supervisor in the foreground (what `up` starts; a container's command)",
        description="Run the sandbox's supervisor in the foreground: the environment is printed once ready; "
                    "SIGINT or SIGTERM stop every piece and exit 0."))
    with_pieces(foreground)
    foreground.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)  # `up`'s pipe
    foreground.set_defaults(func=_run)
