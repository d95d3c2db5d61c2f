"""podman as tests/test_image_live.py and bench/image_start.py run the image: a storage of their own (never the
user's), tools/containers.conf (runc, cgroupfs, no ulimits of its own), and the Deployment's way of running the
container (uid 65532, read-only root, its emptyDirs as tmpfs, the host's network: the envtest is on loopback)."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTAINERS_CONF = ROOT / "tools" / "containers.conf"


def release_cache() -> Path:
    """Where tests/release_build.py keeps the releases it built: $HUBWRIGHT_CACHE/release/<inputs>/dist."""
    return Path(os.environ.get("HUBWRIGHT_CACHE") or Path.home() / ".cache" / "hubwright") / "release"


def newest_archive() -> Path:
    """The image archive of the newest release the tests built."""
    cache = release_cache()
    found = list(cache.glob("*/dist/hubwright-*.oci.tar"))
    if not found:
        raise SystemExit(f"no image archive under {cache}: make release, or pass --archive")
    return max(found, key=lambda p: p.stat().st_mtime)


class Podman:
    def __init__(self, store: Path):
        self.store = store
        self.env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
        # podman refuses a runroot longer than 50 characters (a pytest-xdist worker's tmp_path is longer): then the
        # runtime state goes to a short folder of its own under /tmp, the images under `store`.
        self.runroot = store / "run"
        if len(str(self.runroot)) > 50:
            self.runroot = Path(tempfile.mkdtemp(prefix="hwpod-", dir="/tmp"))
        self.argv = ["podman", "--root", str(store / "root"), "--runroot", str(self.runroot),
                     "--storage-driver", os.environ.get("HUBWRIGHT_PODMAN_DRIVER", "overlay"),
                     "--runtime", "runc", "--cgroup-manager", "cgroupfs"]

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.argv, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def run_argv(self, *args: str, name: str | None = None) -> list[str]:
        """`podman run` as the Deployment runs the container: uid 65532, read-only root, its emptyDirs as tmpfs."""
        return [*self.argv, "run", "--rm", "--user", "65532", "--read-only", "--network=host",
                "--tmpfs", "/tmp:rw,mode=1777", "--tmpfs", "/var/cache/pulumi:rw,mode=1777",
                *(["--name", name] if name else []), *args]

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """`podman run` (run_argv) to completion; an AssertionError naming its output unless it exits 0."""
        return self(*self.run_argv(*args)[len(self.argv):], timeout=timeout)


def probe(url: str) -> tuple[int, dict] | None:
    """(status, JSON body) of a GET, or None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read() or b"{}")
    except (OSError, ValueError):
        return None


def kubeconfig_dir(host: str, ca_file: str, token: str, where: Path) -> Path:
    """`where`/kube, for the container at /kube: a kubeconfig for the API server, its CA, readable by uid 65532."""
    kube = where / "kube"
    kube.mkdir()
    (kube / "ca.crt").write_bytes(Path(ca_file).read_bytes())
    (kube / "config").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
        "clusters": [{"name": "envtest", "cluster": {"server": host, "certificate-authority": "/kube/ca.crt"}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}]}))
    for path in (where, kube, *kube.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return kube
