"""scripts/lib/cache.sh: two runs of the tools' build step at once, sharing one cache, each with its own .tools/bin
(a CI run and a clean clone's run on one machine), build once and both end with the binary.

Before the lock, both built into "$out.tmp" and one failed with `mv: cannot stat '.../gitea-v1.26.0.tmp'` (or
renamed a file the other was still writing). The build here is a stand-in, not Go: a script that counts its runs
and writes its output in two pieces, holding between them until the test lets it go, so the two runs overlap for
certain. The test waits on conditions (a line in a file, a process's exit), each with a deadline.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.live  # starts processes (tests/tiers.py)

ROOT = Path(__file__).resolve().parent.parent
BASH = shutil.which("bash") or "/bin/bash"
CONTENT = "part1\npart2\n"

# The stand-in build: OUT is its argument, else cache_build's $CACHE_TMP.
FAKE_BUILD = """#!/bin/sh
set -e
out=${1:-$CACHE_TMP}
echo run >>"$COUNT"
printf 'part1\\n' >"$out"
i=0
while [ ! -e "$RELEASE" ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
printf 'part2\\n' >>"$out"
chmod +x "$out"
"""

# One run's build step, as scripts/tools.sh's gobuild does it: into the cache once, then placed into its bin.
STEP = """set -euo pipefail
. "$ROOT/scripts/lib/cache.sh"
out="$HUBWRIGHT_CACHE/bin/tool-v1"
cache_build "$out" "$FAKE"
mkdir -p "$BIN"
place_file "$out" "$BIN/tool"
echo "built=$CACHE_BUILT"
"""

# The step as it was before scripts/lib/cache.sh: one fixed temporary name for every run.
OLD_STEP = """set -euo pipefail
out="$HUBWRIGHT_CACHE/bin/tool-v1"
mkdir -p "$HUBWRIGHT_CACHE/bin"
"$FAKE" "$out.tmp"
mv -f "$out.tmp" "$out"
"""


def wait_for(condition, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def runs(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


class Setup:
    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.cache = tmp_path / "cache"
        self.count = tmp_path / "count"
        self.release = tmp_path / "release"
        self.fake = tmp_path / "fake-build"
        self.fake.write_text(FAKE_BUILD)
        self.fake.chmod(0o755)
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, script: str) -> subprocess.Popen:
        env = dict(os.environ, ROOT=str(ROOT), HUBWRIGHT_CACHE=str(self.cache), BIN=str(self.tmp / name / "bin"),
                   FAKE=str(self.fake), COUNT=str(self.count), RELEASE=str(self.release))
        with open(self.tmp / f"{name}.out", "w") as out, open(self.tmp / f"{name}.err", "w") as err:
            proc = subprocess.Popen([BASH, "-c", script], env=env, stdout=out, stderr=err)
        self.procs.append(proc)
        return proc

    def err(self, name: str) -> str:
        return (self.tmp / f"{name}.err").read_text()

    def out(self, name: str) -> str:
        return (self.tmp / f"{name}.out").read_text()

    def temporaries(self) -> list[str]:
        return sorted(str(p.relative_to(self.cache)) for p in self.cache.rglob("*") if ".tmp" in p.name)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)


def test_two_runs_at_once_build_once_and_both_get_the_binary(tmp_path):
    s = Setup(tmp_path)
    try:
        a = s.start("a", STEP)
        wait_for(lambda: runs(s.count) == 1, "run a's build to start")
        b = s.start("b", STEP)
        wait_for(lambda: "waiting" in s.err("b"), "run b to say it waits for a's build")
        assert runs(s.count) == 1  # b is held at the lock, not building
        s.release.touch()
        assert a.wait(timeout=10) == 0, s.err("a")
        assert b.wait(timeout=10) == 0, s.err("b")
    finally:
        s.stop()
    assert runs(s.count) == 1
    assert "built=1" in s.out("a") and "built=0" in s.out("b")
    for name in ("a", "b"):
        tool = tmp_path / name / "bin" / "tool"
        assert tool.read_text() == CONTENT and os.access(tool, os.X_OK)
    assert (s.cache / "bin" / "tool-v1").read_text() == CONTENT
    assert s.temporaries() == []


def test_a_run_after_them_finds_it_cached_and_builds_nothing(tmp_path):
    s = Setup(tmp_path)
    s.release.touch()
    try:
        assert s.start("a", STEP).wait(timeout=10) == 0, s.err("a")
        assert s.start("b", STEP).wait(timeout=10) == 0, s.err("b")
    finally:
        s.stop()
    assert runs(s.count) == 1 and "built=0" in s.out("b") and "waiting" not in s.err("b")
    assert (tmp_path / "b" / "bin" / "tool").read_text() == CONTENT


def test_the_same_clone_run_again_keeps_its_binary(tmp_path):
    """Placing onto a hard link of the same file (mv refuses to rename onto it) is no error."""
    s = Setup(tmp_path)
    s.release.touch()
    try:
        assert s.start("a", STEP).wait(timeout=10) == 0, s.err("a")
        assert s.start("a", STEP).wait(timeout=10) == 0, s.err("a")
    finally:
        s.stop()
    assert runs(s.count) == 1 and (tmp_path / "a" / "bin" / "tool").read_text() == CONTENT
    assert not [p for p in (tmp_path / "a" / "bin").iterdir() if p.name != "tool"]


def test_a_failed_build_leaves_no_output_and_no_temporary(tmp_path):
    s = Setup(tmp_path)
    s.fake.write_text("#!/bin/sh\necho run >>\"$COUNT\"\nprintf 'part1\\n' >\"$CACHE_TMP\"\nexit 3\n")
    try:
        a = s.start("a", STEP)
        assert a.wait(timeout=10) != 0
    finally:
        s.stop()
    assert not (s.cache / "bin" / "tool-v1").exists()
    assert s.temporaries() == []
    assert not (tmp_path / "a" / "bin" / "tool").exists()


def test_without_the_lock_the_same_two_runs_break_each_other(tmp_path):
    """The stand-in reproduces the old failure: one fixed temporary shared by two runs."""
    s = Setup(tmp_path)
    try:
        a = s.start("a", OLD_STEP)
        wait_for(lambda: runs(s.count) == 1, "run a's build to start")
        b = s.start("b", OLD_STEP)
        wait_for(lambda: runs(s.count) == 2, "run b's build to start beside a's")
        s.release.touch()
        codes = (a.wait(timeout=10), b.wait(timeout=10))
    finally:
        s.stop()
    out = s.cache / "bin" / "tool-v1"
    failed = [name for name, code in zip("ab", codes) if code != 0]
    # Either one run's mv finds the temporary gone (the CI failure), or the output is not one build's whole file.
    assert (failed and "cannot stat" in s.err(failed[0])) or not out.exists() or out.read_text() != CONTENT
