"""`python -m automation sandbox` as a person runs it: the real command in a process of its own, started from an
empty folder (it must leave nothing where it is run), its folder under $XDG_STATE_HOME (the default) or --dir.

One sandbox (the API server, moto seeded from the examples, Gitea) serves the lifecycle's assertions: `up` prints
an environment that `eval` takes and kubectl, boto3 and the forge's API answer to; `env` prints it again; a second
`up` is refused naming the running one; `down` leaves no process and no folder, and says so again when run twice.
Then what fails: a missing binary (a copy of the package, outside any checkout, with PATH and $KUBEBUILDER_ASSETS
empty) is one line and starts nothing; a piece that exits is named with its log's end and what was started is
stopped; `run` in the foreground stops everything on SIGINT and exits 0.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import httpx
import pytest

from automation.sandbox.folder import Folder
from automation.adapters.engine.proctree import alive
from doubles.service_env import wait_until
from tests.envtest import require_binaries

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stacks", "components", "policy")  # beside automation/, what `python -m automation` imports


def cli(*args: object, cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "automation", "sandbox", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def exports(text: str) -> dict[str, str]:
    """{name: value} of `export NAME=value` lines, read as a shell would."""
    found = {}
    for line in text.splitlines():
        word, assignment = shlex.split(line)
        assert word == "export", line
        name, _, value = assignment.partition("=")
        found[name] = value
    return found


def running_in(folder: Path) -> list[str]:
    """The processes whose working folder or command line is in `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if alive(int(entry.name)) and (cwd.startswith(str(folder)) or str(folder) in cmdline):
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@pytest.fixture
def person(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty folder to run the command from, and an environment: the checkout importable, no AWS or
    HUBWRIGHT_ variable of the caller's, the state folder under tmp_path."""
    where = tmp_path / "cwd"
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HUBWRIGHT_", "KUBECONFIG", "FORGE_"))}
    env.update(PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(tmp_path / "state"), HOME=str(tmp_path / "home"))
    return where, env


def test_up_env_down_with_one_sandbox(person, tmp_path: Path):
    where, env = person
    kubectl = require_binaries("kubectl")["kubectl"]
    folder = tmp_path / "state" / "hubwright" / "sandbox"  # the default --dir under $XDG_STATE_HOME
    up = cli("up", "--forge", "--fleet", ROOT / "examples" / "clusters", "--hub", ROOT / "examples" / "hub.yaml",
             cwd=where, env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert "the hub's API server is ready" in up.stderr and "3 clusters seeded" in up.stderr
        found = exports(up.stdout)
        assert found["KUBECONFIG"] == str(folder / "kubeconfig")
        assert {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "FORGE_URL",
                "FORGE_OWNER", "FORGE_TOKEN", "FORGE_KNOWN_HOSTS"} <= set(found)
        assert (folder / "env").read_text() == up.stdout

        # eval "$(... up)" in a shell: kubectl reaches the hub as its admin
        shell = subprocess.run(["bash", "-c", 'eval "$1" && "$2" get namespaces -o name', "_", up.stdout, kubectl],
                               env=env, capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0, shell.stderr
        assert "namespace/default" in shell.stdout.split()
        # the fake AWS holds the hub account's seeded network, reached with the printed credentials
        ec2 = boto3.client("ec2", endpoint_url=found["AWS_ENDPOINT_URL"], region_name=found["AWS_REGION"],
                           aws_access_key_id=found["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=found["AWS_SECRET_ACCESS_KEY"],
                           aws_session_token=found.get("AWS_SESSION_TOKEN"))
        assert ec2.describe_vpcs()["Vpcs"]
        # the forge answers its API with the token, and the organisation is there
        answer = httpx.get(f"{found['FORGE_URL']}/api/v1/orgs/{found['FORGE_OWNER']}",
                           headers={"Authorization": f"token {found['FORGE_TOKEN']}"}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert Path(found["FORGE_KNOWN_HOSTS"]).read_text().startswith("[127.0.0.1]:")

        again = cli("env", cwd=where, env=env)
        assert (again.returncode, again.stdout) == (0, up.stdout)

        pids = Folder(folder).pids()
        assert set(pids) >= {"supervisor", "etcd", "kube-apiserver", "kube-controller-manager", "moto", "gitea"}
        assert all(alive(pid) for pid in pids.values())
        second = cli("up", cwd=where, env=env)
        assert second.returncode == 1
        assert f"already running in {folder} (supervisor pid {pids['supervisor']})" in second.stderr
        assert all(alive(pid) for pid in pids.values())  # the refusal touched nothing
    finally:
        down = cli("down", cwd=where, env=env)
    assert down.returncode == 0, down.stderr
    assert not [name for name, pid in pids.items() if alive(pid)]
    assert not folder.exists() and running_in(tmp_path) == []
    twice = cli("down", cwd=where, env=env)
    assert twice.returncode == 0 and "nothing to stop" in twice.stderr
    assert list(where.iterdir()) == []  # nothing where the command was run


def test_a_missing_binary_is_one_line_and_starts_nothing(person, tmp_path: Path):
    """Outside a checkout (a copy of the package: no .tools/bin beside it), with PATH and $KUBEBUILDER_ASSETS
    empty: one line naming every binary and where to get it."""
    where, env = person
    copy, empty = tmp_path / "installed", tmp_path / "empty-bin"
    empty.mkdir()
    shutil.copytree(ROOT / "automation", copy / "automation", ignore=shutil.ignore_patterns("__pycache__"))
    for package in PACKAGES:
        (copy / package).symlink_to(ROOT / package)
    env.update(PYTHONPATH=str(copy), PATH=str(empty), KUBEBUILDER_ASSETS=str(empty))
    folder = tmp_path / "sandbox"
    up = cli("up", "--dir", folder, cwd=where, env=env, timeout=60)
    assert up.returncode == 1
    assert up.stdout == "" and len(up.stderr.splitlines()) == 1, up.stderr
    assert up.stderr.startswith("error: etcd, kube-apiserver, kube-controller-manager, openssl not found in "
                                "$KUBEBUILDER_ASSETS or PATH: ")
    assert "setup-envtest" in up.stderr and "scripts/tools.sh" not in up.stderr
    assert not folder.exists() and running_in(folder) == []


def test_a_piece_that_fails_is_named_with_its_log_and_what_started_is_stopped(person, tmp_path: Path):
    where, env = person
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in ("etcd", "kube-controller-manager"):
        (assets / name).symlink_to(require_binaries(name)[name])
    (assets / "kube-apiserver").write_text("#!/bin/sh\necho 'E1201 unknown flag: --no-such-flag' >&2\nexit 3\n")
    (assets / "kube-apiserver").chmod(0o755)
    env["KUBEBUILDER_ASSETS"] = str(assets)
    folder = tmp_path / "sandbox"
    up = cli("up", "--dir", folder, cwd=where, env=env)
    assert up.returncode == 1 and up.stdout == ""
    assert "error: the hub's API server did not start: kube-apiserver exited with 3" in up.stderr
    assert "E1201 unknown flag: --no-such-flag" in up.stderr  # the end of its log
    assert running_in(folder) == []  # etcd, started first, was stopped
    assert (folder / "supervisor.log").exists()  # the logs stay for a look; `down` removes them
    down = cli("down", "--dir", folder, cwd=where, env=env)
    assert down.returncode == 0 and not folder.exists()


def test_run_in_the_foreground_stops_everything_on_sigint(person, tmp_path: Path):
    where, env = person
    folder = tmp_path / "sandbox"
    process = subprocess.Popen([sys.executable, "-m", "automation", "sandbox", "run", "--dir", str(folder)],
                               cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (folder / "env").exists() or process.poll() is not None, 120,
                   what="the sandbox to be ready")
        assert process.poll() is None, process.communicate()[1]
        pids = Folder(folder).pids()
        assert set(pids) >= {"supervisor", "etcd", "kube-apiserver", "kube-controller-manager"}
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert exports(out)["KUBECONFIG"] == str(folder / "kubeconfig")  # printed once ready
    assert not [name for name, pid in pids.items() if alive(pid)] and running_in(folder) == []
    assert not (folder / "env").exists()  # a stopped sandbox has no environment to give
    assert cli("env", "--dir", folder, cwd=where, env=env).returncode == 1
    assert cli("down", "--dir", folder, cwd=where, env=env).returncode == 0 and not folder.exists()
