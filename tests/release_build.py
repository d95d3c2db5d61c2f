"""One release build (`make release`, scripts/release.sh) for every test that needs its artifacts: the release's
own checks (tests/test_release_artifacts.py), the image's smoke tests (tests/test_image_live.py) and the zipapp's
(tests/test_zipapp.py).

The build is kept under $HUBWRIGHT_CACHE/release/<key>, where the key is a digest of every input: each file Git
tracks or would track outside tests/ (their paths and bytes, uncommitted edits included) and the tools it runs (.tools/bin's
pulumi, helm, syft and kubectl, by the files they resolve to, which carry their versions). The same inputs give
the same build; a changed byte anywhere builds again. Two pytest-xdist workers asking at once: one builds, under
a lock, the other waits and takes it.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from doubles.envtest import ROOT, TOOLS_BIN
from doubles.podman import release_cache

TOOLS = ("pulumi", "helm", "syft", "kubectl")
KEEP = 3  # builds kept in the cache (each about 500 MB)


def inputs_key() -> str:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=60).stdout.split(b"\0")
    digest = hashlib.sha256()
    for name in sorted(n.decode() for n in listed if n and not n.startswith(b"tests/")):  # no test is released
        path = ROOT / name
        if path.is_file() and not path.is_symlink():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for tool in TOOLS:
        digest.update(f"{tool}={(TOOLS_BIN / tool).resolve()}\0".encode())
    return digest.hexdigest()[:20]


@dataclass(frozen=True)
class Release:
    dist: Path  # what `make release` wrote
    log: str  # its stderr: each step's time (scripts/release.sh says them)
    seconds: float | None  # the build's wall time in this session; None: built earlier, for the same inputs


@pytest.fixture(scope="session")
def release_dist() -> Release:
    """The release of this tree (tests/tiers.py keeps every test that takes it on one pytest-xdist worker)."""
    return build()


def build() -> Release:
    """The release's dist/ for this tree: built, or the earlier build of the same inputs."""
    cache = release_cache()
    cache.mkdir(parents=True, exist_ok=True)
    key = inputs_key()
    done = cache / key / "dist"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a waiter then finds it done
        if (done / "SHA256SUMS").is_file():
            return Release(done, (cache / key / "release.log").read_text(), None)
        partial = cache / f"{key}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        started = time.monotonic()
        build = subprocess.run(["make", "release", f"DIST={partial / 'dist'}"], cwd=ROOT, capture_output=True,
                               text=True, timeout=1800, env={**os.environ, "PATH": f"{TOOLS_BIN}:{os.environ['PATH']}"})
        took = time.monotonic() - started
        assert build.returncode == 0, f"make release exited {build.returncode}:\n{build.stderr[-4000:]}"
        (partial / "release.log").write_text(build.stderr)
        os.replace(partial, cache / key)
        for old in sorted((p for p in cache.iterdir() if p.is_dir() and p.name != key),
                          key=lambda p: p.stat().st_mtime)[:-(KEEP - 1) or None]:
            shutil.rmtree(old, ignore_errors=True)
        return Release(done, build.stderr, took)
