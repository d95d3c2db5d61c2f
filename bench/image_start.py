"""The image's start time: `python -m bench.image_start [--runs 5] [--archive PATH] --json` (as root, with podman).

Loads the OCI archive scripts/image.sh wrote (default: the one tests/test_image_live.py cached under
$HUBWRIGHT_CACHE/images) into a podman storage of its own, starts an envtest API server, then starts each process
`--runs` times as the Deployment runs it (uid 65532, read-only root, tmpfs volumes, --network=host) and times
`podman run` to its first answer:

  serve          /readyz 200, with a stand-in AWS plugin mounted where the image puts one (and its record)
  serve_noplugin /readyz 503 naming the plugin (the -noplugin image as built)
  api            /healthz 200 (the registry API has no /readyz)
  podman_run     `podman run ... true`: the container's own share of each figure above

Prints one JSON object {process: {"runs": [seconds...], "median": seconds}} plus the image's and the archive's size.
docs/performance.md holds its current figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from doubles.envtest import free_port, project_crds, start_envtest
from doubles.podman import Podman, kubeconfig_dir, newest_archive, probe
from stacks import release

IMAGE = release.image_tag(with_plugin=False)  # what can be built here (no AWS plugin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--archive", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="(the only output format)")
    args = parser.parse_args()
    archive = args.archive or newest_archive()
    work = Path(tempfile.mkdtemp(prefix="image-start-"))
    work.chmod(0o755)
    pm = Podman(work / "podman")
    out: dict[str, object] = {"archive": str(archive), "archive_bytes": archive.stat().st_size}
    try:
        pm("load", "--quiet", "-i", str(archive), timeout=600)
        out["image_bytes"] = int(pm("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
        with start_envtest(crds=project_crds()) as env:
            kube = kubeconfig_dir(env.host, env.ca_file, env.token, work)
            plugin, record = work / release.AWS_PLUGIN, work / "aws-plugin.sha256"
            plugin.write_text("#!/bin/sh\nexit 1\n")
            plugin.chmod(0o755)
            record.write_text("ab" * 32 + "\n")
            record.chmod(0o644)

            def start(kind: str) -> float:
                port, name = free_port(), f"image-start-{uuid.uuid4().hex[:8]}"
                volumes = ["--tmpfs", "/state:rw,mode=1777", "-v", f"{kube}:/kube:ro",
                           "-e", "PULUMI_CONFIG_PASSPHRASE=bench"]
                if kind == "podman_run":
                    argv, url, want = [IMAGE, "true"], None, None
                elif kind == "api":
                    argv = [*volumes, IMAGE, "python", "-m", "automation", "api", "--kubeconfig", "/kube/config",
                            "--bind", f"127.0.0.1:{port}", "--state-dir", "/state"]
                    url, want = f"http://127.0.0.1:{port}/healthz", 200
                else:
                    stand_in = ["-v", f"{plugin}:/usr/local/bin/{release.AWS_PLUGIN}:ro",
                                "-v", f"{record}:{release.IMAGE_AWS_PLUGIN}:ro"] if kind == "serve" else []
                    argv = [*volumes, *stand_in, IMAGE, "python", "-m", "automation", "serve", "--kubeconfig",
                            "/kube/config", "--no-leader-election", "--metrics-bind", "127.0.0.1",
                            "--metrics-port", str(port), "--state-dir", "/state", "--workers", "1"]
                    url, want = f"http://127.0.0.1:{port}/readyz", 200 if kind == "serve" else 503
                started = time.monotonic()
                proc = subprocess.Popen(pm.run_argv(*argv, name=name), env=pm.env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                if url is None:
                    proc.wait(120)
                    return time.monotonic() - started
                try:
                    while (got := probe(url)) is None or got[0] != want:
                        if proc.poll() is not None or time.monotonic() - started > 180:
                            raise SystemExit(f"{kind}: no {want} from {url} (exit {proc.poll()})")
                        time.sleep(0.02)
                    return time.monotonic() - started
                finally:
                    pm("stop", "--time", "20", name, check=False, timeout=60)
                    proc.wait(60)

            for kind in ("podman_run", "serve", "serve_noplugin", "api"):
                runs = [round(start(kind), 3) for _ in range(args.runs)]
                out[kind] = {"runs": runs, "median": round(statistics.median(runs), 3)}
    finally:
        pm("system", "reset", "--force", check=False, timeout=300)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    if os.geteuid() != 0:
        raise SystemExit("needs root (podman's storage here is root's)")
    main()
