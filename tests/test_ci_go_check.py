"""scripts/go-version.sh: CI (and scripts/tools.sh) stop at once, saying what to install, when `go` is older than
the newest `go` directive of tools/*/go.mod, as Debian bookworm's golang-go (1.19) is.

Run as .ci/run runs it, with a stand-in `go` first on PATH printing what an old or a new toolchain prints.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "go-version.sh"
BASH = shutil.which("bash") or "/bin/bash"


def newest_directive() -> str:
    found = [m.group(1) for mod in (ROOT / "tools").glob("*/go.mod")
             if (m := re.search(r"^go (\d+\.\d+(?:\.\d+)?)\s*$", mod.read_text(), re.M))]
    return max(found, key=lambda v: tuple(int(p) for p in v.split(".")))


def run(path: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env["PATH"] = path
    return subprocess.run([BASH, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)


def fake_go(tmp_path: Path, version_line: str) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    go = bindir / "go"
    go.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    go.chmod(0o755)
    return f"{bindir}:/usr/bin:/bin"


@pytest.mark.live
def test_debians_go_fails_at_once_saying_what_is_needed_and_how(tmp_path):
    need = newest_directive()
    done = run(fake_go(tmp_path, "go version go1.19.8 linux/amd64"), tmp_path)
    assert done.returncode != 0
    assert f"Go >= {need} is needed" in done.stderr
    assert "found go1.19.8" in done.stderr
    assert "https://go.dev/dl" in done.stderr
    # 1.19 predates GOTOOLCHAIN: the message does not offer what would not work
    assert "GOTOOLCHAIN=go" not in done.stderr and "predates GOTOOLCHAIN" in done.stderr


@pytest.mark.live
def test_a_go_that_knows_gotoolchain_is_told_to_use_it(tmp_path):
    need = newest_directive()
    done = run(fake_go(tmp_path, "go version go1.22.1 linux/amd64"), tmp_path)
    assert done.returncode != 0
    assert f"set GOTOOLCHAIN=go{need}" in done.stderr and "found go1.22.1" in done.stderr


@pytest.mark.live
def test_exactly_the_directive_passes_and_one_patch_below_fails(tmp_path):
    need = newest_directive()
    assert run(fake_go(tmp_path, f"go version go{need} linux/amd64"), tmp_path).returncode == 0
    major, minor, *patch = (int(p) for p in need.split("."))
    if patch and patch[0] > 0:
        older = f"{major}.{minor}.{patch[0] - 1}"
    else:
        older = f"{major}.{minor - 1}.99"
    done = run(fake_go(tmp_path, f"go version go{older} linux/amd64"), tmp_path)
    assert done.returncode != 0 and f"found go{older}" in done.stderr


@pytest.mark.live
def test_no_go_at_all_is_named(tmp_path):
    bindir = tmp_path / "only-utils"  # the utilities the script uses, and no go
    bindir.mkdir()
    for tool in ("awk", "sort", "sed", "grep", "head", "tail", "dirname"):
        (bindir / tool).symlink_to(shutil.which(tool))
    done = run(str(bindir), tmp_path)
    assert done.returncode != 0 and "there is no 'go' on PATH" in done.stderr
    assert f"Go >= {newest_directive()} is needed" in done.stderr


@pytest.mark.live
def test_the_real_go_passes(tmp_path):
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        pytest.fail("no go toolchain on this machine: .ci/run installs one before the suite runs")
    done = run(f"{Path(go).parent}:/usr/bin:/bin", tmp_path)
    assert done.returncode == 0, done.stderr
    assert f">= {newest_directive()}" in done.stdout


def test_ci_and_tools_run_the_check_before_building():
    assert "./dev setup" in (ROOT / ".ci" / "run").read_text()  # ./dev setup runs scripts/setup.sh
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert setup.index("bash scripts/go-version.sh") < setup.index("bash scripts/tools.sh")
    tools = (ROOT / "scripts" / "tools.sh").read_text()
    assert tools.index("scripts/go-version.sh") < tools.index("go build")
