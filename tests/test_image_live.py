"""The image as scripts/image.sh builds it, run with podman as the Deployment runs it: uid 65532, a read-only root,
the pod's volumes as tmpfs (/tmp, PULUMI_HOME, the state dir), the host's network (the envtest API server is on
loopback).

The image is the release's (tests/release_build.py: one `make release` per set of inputs, shared with the
release's and the zipapp's tests), loaded into a podman storage of the module's own, never the user's. A build from scratch takes one and a half to three minutes here, a load 15-20 s
(docs/performance.md). Prints the figures docs/performance.md holds:
the build time, the image's and the archive's size, and each process's start time (`podman run` to /readyz).

No AWS provider plugin can be had here: the image is the `-noplugin` one, and its `serve` must say so on /readyz.
A stand-in plugin (a file mounted where the image puts the plugin, and the record of it) shows the same image
ready. Skips, naming what is missing, without root, podman, runc, mmdebstrap or the engines.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from doubles.podman import Podman, kubeconfig_dir, probe
from doubles.service_env import wait_until
from automation.adapters.engine import RunResult, Trace
from automation.adapters.history.select import store_of
from automation.service.history import Recorder
from automation.service.runs import Runs
from stacks.runs.cause import Cause
from doubles.factories import cluster_doc
from stacks import release
from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.names import GROUP, VERSION
from tests.console_env import Browserless
from tests.envtest import free_port, kube_apiserver  # noqa: F401 - the fixture
from tests.registry_api_env import apply_tenant_admin_role
from tests.registry_rbac import service_account_token
from tests.release_build import Release, release_dist  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parent.parent
TOOLS_BIN = ROOT / ".tools" / "bin"
HELPERS = ("pulumi", "pulumi-resource-pulumi-python", "pulumi-language-python-exec", "pulumi-analyzer-policy-python")


def missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: mmdebstrap builds the root filesystem as root, and podman's storage here is root's"
    gone = [c for c in ("podman", "runc", "mmdebstrap") if shutil.which(c) is None]
    if gone:
        return f"{', '.join(gone)} not found: apt-get install podman runc mmdebstrap (./dev setup)"
    absent = [h for h in HELPERS if not (TOOLS_BIN / h).is_file()]
    if absent:
        return f"{', '.join(absent)} not in {TOOLS_BIN}: scripts/tools.sh builds them"
    return None


MISSING = missing()
pytestmark = [pytest.mark.live, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


FIGURES: dict[str, object] = {}


def figure(name: str, value: object) -> None:
    FIGURES[name] = value
    print(f"[image figure] {name}: {value}")


@pytest.fixture(scope="module")
def archive(release_dist: Release) -> Path:  # noqa: F811
    """The release's image (make release: scripts/image.sh, without the plugin none can have here)."""
    built = release_dist.dist / f"hubwright-{release.version()}-noplugin.oci.tar"
    assert built.is_file(), f"make release wrote no {built.name}"
    step = re.search(r"\[release\] image and SBOM: (\d+)s", release_dist.log)
    figure("build seconds (scripts/image.sh and syft, in make release)", step[1] if step else "unknown")
    figure("archive bytes", built.stat().st_size)
    return built


@pytest.fixture(scope="module")
def podman(archive, tmp_path_factory) -> Iterator[Podman]:
    """A podman storage of this module's own, the archive loaded into it."""
    pm = Podman(tmp_path_factory.mktemp("podman"))
    started = time.monotonic()
    loaded = pm("load", "--quiet", "-i", str(archive), timeout=600)
    figure("podman load seconds", round(time.monotonic() - started, 1))
    assert release.image_tag(with_plugin=False) in loaded.stdout, loaded.stdout
    figure("image bytes (podman image inspect .Size)",
           int(pm("image", "inspect", "--format", "{{.Size}}", release.image_tag(with_plugin=False)).stdout))
    try:
        yield pm
    finally:
        pm("system", "reset", "--force", check=False, timeout=300)


IMAGE = release.image_tag(with_plugin=False)


def test_the_image_is_the_release_it_is_tagged_and_labelled_as(podman):
    said = podman.run(IMAGE, "python", "-m", "automation", "--version")
    assert said.stdout == f"hubwright {release.version()}\n", said.stderr
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", IMAGE).stdout)
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == release.version()
    assert labels["org.opencontainers.image.title"] == release.NAME
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"] == "https://github.com/hubwright/hubwright"
    revision = labels["org.opencontainers.image.revision"]  # the commit it was built at (others may commit since)
    commit_time = int(subprocess.run(["git", "show", "-s", "--format=%ct", revision], cwd=ROOT, capture_output=True,
                                     text=True, check=True).stdout)
    created = datetime.datetime.fromtimestamp(commit_time, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert labels["org.opencontainers.image.created"] == created  # SOURCE_DATE_EPOCH: the last commit's
    assert labels[release.AWS_PLUGIN_LABEL] == release.NO_AWS_PLUGIN  # built without the plugin, and says so
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true" and env["USER"] == "hubwright"
    assert env["PULUMI_HOME"] == "/var/cache/pulumi"
    assert config["User"] == "65532" and config["Entrypoint"] == ["/usr/bin/tini", "--"]
    inside = podman.run(IMAGE, "sh", "-c", "id -u; pulumi version; command -v ssh-keyscan; "
                        f"cat {release.IMAGE_AWS_PLUGIN}; command -v {release.AWS_PLUGIN} || echo none; "
                        "touch /app/x 2>&1 || true")
    uid, cli, keyscan, record, plugin, touch = inside.stdout.splitlines()
    pinned = [line.split("==")[1] for line in (ROOT / "requirements.txt").read_text().splitlines()
              if line.startswith("pulumi==")]
    assert (uid, cli, keyscan) == ("65532", f"v{pinned[0]}", "/usr/bin/ssh-keyscan")
    assert (record, plugin) == (release.NO_AWS_PLUGIN, "none") and "Read-only file system" in touch


def test_a_wrong_plugin_sum_fails_the_build_naming_both_sums(tmp_path):
    plugin = tmp_path / "pulumi-resource-aws"
    plugin.write_bytes(b"#!/bin/sh\nexit 1\n")
    right = hashlib.sha256(plugin.read_bytes()).hexdigest()
    wrong = hashlib.sha256(b"another file").hexdigest()
    failed = subprocess.run(["bash", "scripts/image.sh", "--out", str(tmp_path / "x.oci.tar"), "--store",
                             str(tmp_path / "store"), "--aws-plugin", str(plugin), "--aws-plugin-sha256", wrong],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0 and right in failed.stderr and wrong in failed.stderr, failed.stderr
    assert not (tmp_path / "x.oci.tar").exists()


def test_the_plan_of_the_examples_is_the_checkouts_byte_for_byte(podman, tmp_path):
    """examples/ mounted read-only; the same arguments, relative to it, in the image and in the checkout."""
    args = ["plan", "--hub", "hub.yaml", "--clusters", "clusters"]
    inside = podman.run("-v", f"{ROOT / 'examples'}:/in:ro", "--workdir", "/in", "-e", "PYTHONPATH=/app", IMAGE,
                        "python", "-m", "automation", *args, timeout=300)
    here = subprocess.run([sys.executable, "-m", "automation", *args], cwd=ROOT / "examples", capture_output=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert here.returncode == 0, here.stderr
    assert inside.stdout.encode() == here.stdout and b"stack " in here.stdout


def test_the_history_command_reads_a_stores_runs_as_the_checkout_does(podman, tmp_path):
    """A file store laid out by the service's own recorder (two runs of acme/prod-1, one with its diff and log),
    mounted read-only; `python -m automation history` in the image and in the checkout say the same, in each format."""
    state = tmp_path / "state"
    recorder = Recorder(store_of("backend", backend=None, state_dir=state), executor="local")
    gate = Runs(recorder=recorder)
    gate.run("up", lambda: RunResult("up", True, "updated", changes={"create": 1}, trace=Trace(
        {"stack": "acme.prod-1", "change": "changed", "resources": [
            {"urn": "urn:pulumi:acme.prod-1::hubwright::aws:ec2/vpcEndpoint:VpcEndpoint::prod-1-endpoint",
             "type": "aws:ec2/vpcEndpoint:VpcEndpoint", "change": "add",
             "properties": {"vpcId": {"old": None, "new": "vpc-0hub1"}}}]}, "Updating (acme.prod-1):\nResources:\n")),
             stack="acme.prod-1", cluster="acme/prod-1", cause=Cause.of("Create", "first update of the stack", 1))
    gate.run("preview", lambda: RunResult("preview", True, "no changes"), stack="acme.prod-1", cluster="acme/prod-1",
             cause=Cause.of("DriftCheck", "drift check", 1))
    subprocess.run(["chmod", "-R", "a+rX", str(state)], check=True)  # the image runs as 65532, the files are 0600
    for flags in (["--format", "json"], ["--run", "latest"], ["--format", "markdown", "--run", "latest"]):
        args = ["history", "acme/prod-1", "--state-dir", "/state", *flags]
        inside = podman.run("-v", f"{state}:/state:ro", IMAGE, "python", "-m", "automation", *args, timeout=120)
        here = subprocess.run([sys.executable, "-m", "automation", *args[:3], str(state), *flags], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert here.returncode == 0, here.stderr
        assert inside.stdout == here.stdout and "prod-1" in here.stdout, flags


# --------------------------------------------------------------------------- the processes, against the envtest

@pytest.fixture
def kube(kube_apiserver, tmp_path) -> Path:  # noqa: F811
    """A directory for the container (mounted at /kube): a kubeconfig for the envtest, its CA, a token file."""
    kube = kubeconfig_dir(kube_apiserver.host, kube_apiserver.ca_file, kube_apiserver.token, tmp_path)
    (kube / "token").write_text("not-a-jwt-agent-token\n")
    (kube / "token").chmod(0o644)
    return kube


@contextlib.contextmanager
def container(podman: Podman, where: Path, *args: str) -> Iterator[tuple[subprocess.Popen, float, Path]]:
    """`podman run` in the background; yields it, the monotonic time it was started and its log; stopped after
    (SIGTERM to tini, which passes it on)."""
    name = f"hubwright-test-{uuid.uuid4().hex[:8]}"
    log = where / f"{name}.log"
    with open(log, "wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(podman.run_argv(*args, name=name), env=podman.env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        yield proc, started, log
    finally:
        podman("stop", "--time", "20", name, check=False, timeout=60)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def answered(proc: subprocess.Popen, url: str, log: Path, ok: bool | None = None) -> tuple[int, dict]:
    """The first answer of `url` (a 200 when ok), polled until then or until the container exits."""
    def answer():
        assert proc.poll() is None, f"the container exited {proc.returncode}:\n{log.read_text()[-4000:]}"
        got = probe(url)
        return got if got is not None and (ok is None or (got[0] == 200) == ok) else None
    return wait_until(answer, 180, what=url, diagnose=lambda: log.read_text()[-4000:])


SERVE = ["python", "-m", "automation", "serve", "--kubeconfig", "/kube/config", "--no-leader-election",
         "--metrics-bind", "127.0.0.1", "--state-dir", "/state", "--workers", "1"]
STATE = ["--tmpfs", "/state:rw,mode=1777", "-e", "PULUMI_CONFIG_PASSPHRASE=image-test", "-v", "{kube}:/kube:ro"]


def test_serve_without_the_plugin_is_not_ready_and_names_it(podman, kube, tmp_path):
    port = free_port()
    with container(podman, tmp_path, *[a.format(kube=kube) for a in STATE], IMAGE, *SERVE, "--metrics-port",
                   str(port)) as (proc, started, log):
        status, body = answered(proc, f"http://127.0.0.1:{port}/readyz", log)
        figure("serve (no plugin) podman run -> first /readyz answer, seconds", round(time.monotonic() - started, 2))
        assert status == 503 and not body["ok"], body
        assert release.AWS_PLUGIN in body["problem"] and IMAGE in body["problem"], body
        assert answered(proc, f"http://127.0.0.1:{port}/healthz", log)[0] == 200  # alive, only not ready
        assert release.AWS_PLUGIN in log.read_text()  # said in the log too


def test_serve_with_a_stand_in_plugin_is_ready(podman, kube, tmp_path):
    """The same image with a file where the plugin goes (and the build's record of it): ready once synced."""
    plugin, record = tmp_path / "pulumi-resource-aws", tmp_path / "aws-plugin.sha256"
    plugin.write_text("#!/bin/sh\necho stand-in >&2\nexit 1\n")
    plugin.chmod(0o755)
    record.write_text(hashlib.sha256(plugin.read_bytes()).hexdigest() + "\n")
    port = free_port()
    with container(podman, tmp_path, *[a.format(kube=kube) for a in STATE],
                   "-v", f"{plugin}:/usr/local/bin/{release.AWS_PLUGIN}:ro",
                   "-v", f"{record}:{release.IMAGE_AWS_PLUGIN}:ro",
                   IMAGE, *SERVE, "--metrics-port", str(port)) as (proc, started, log):
        status, body = answered(proc, f"http://127.0.0.1:{port}/readyz", log, ok=True)
        figure("serve podman run -> /readyz 200, seconds", round(time.monotonic() - started, 2))
        assert body["ok"] and body["role"] == "leader" and all(body["synced"].values()), body
    assert proc.returncode in (0, 143), log.read_text()[-4000:]  # SIGTERM: a clean stop


def test_the_registry_api_answers(podman, kube, tmp_path):
    """The registry API has /healthz only (no /readyz): its readiness is that it answers."""
    port = free_port()
    with container(podman, tmp_path, "--tmpfs", "/state:rw,mode=1777", "-v", f"{kube}:/kube:ro", IMAGE,
                   "python", "-m", "automation", "api", "--kubeconfig", "/kube/config", "--bind", f"127.0.0.1:{port}",
                   "--state-dir", "/state") as (proc, started, log):
        status, _ = answered(proc, f"http://127.0.0.1:{port}/healthz", log, ok=True)
        figure("api podman run -> /healthz 200, seconds", round(time.monotonic() - started, 2))
        assert probe(f"http://127.0.0.1:{port}/version") == (200, {"name": release.NAME,
                                                                     "version": release.version()})


def test_the_console_signs_a_serviceaccount_in_and_shows_its_fleet(podman, kube, kube_apiserver, tmp_path):  # noqa: F811
    """The console of the built image: its pages, templates and assets are in it, and a ServiceAccount's token signs
    in (TokenReview) and sees its namespace's clusters (SubjectAccessReview)."""
    api = kube_apiserver.api_client()
    apply_tenant_admin_role(api)
    namespace = f"image-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hubclusters", cluster_doc("prod-1", namespace))
    token = service_account_token(api, namespace, "viewer")
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_ADMIN_CLUSTERROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}]})
    port = free_port()
    with container(podman, tmp_path, "--tmpfs", "/state:rw,mode=1777", "-v", f"{kube}:/kube:ro", IMAGE,
                   "python", "-m", "automation", "console", "--kubeconfig", "/kube/config", "--console-bind",
                   f"127.0.0.1:{port}", "--history-store", "off") as (proc, started, log):
        answered(proc, f"http://127.0.0.1:{port}/healthz", log, ok=True)
        figure("console podman run -> /healthz 200, seconds", round(time.monotonic() - started, 2))
        viewer = Browserless(f"http://127.0.0.1:{port}")
        try:
            assert viewer.sign_in(token).status_code == 303, log.read_text()[-4000:]
            fleet = viewer.http.get("/", params={"q": namespace})
            assert fleet.status_code == 200 and f"{namespace}/prod-1" in fleet.text
            assert "default-src 'none'" in fleet.headers["content-security-policy"]
            script = viewer.http.get("/assets/console.js")
            assert script.status_code == 200 and script.content == (ROOT / "automation" / "console" / "static" /
                                                                    "console.js").read_bytes()
        finally:
            viewer.close()
    api.close()


class StandInRegistry(http.server.ThreadingHTTPServer):
    """Takes the agent's facts (201), as the registry would for a valid token."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, dict]] = []
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                registry.received.append((self.path, self.headers["Authorization"], body))
                answer = json.dumps({"stored": True}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_the_facts_agent_pushes_its_clusters_facts_once(podman, kube, kube_apiserver):  # noqa: F811
    registry = StandInRegistry()
    threading.Thread(target=registry.serve_forever, daemon=True).start()
    try:
        ran = podman.run("-v", f"{kube}:/kube:ro", IMAGE, "python", "-m", "automation", "agent",
                                      "--api", f"http://127.0.0.1:{registry.server_address[1]}",
                                      "--token-file", "/kube/token", "--tenant", "acme", "--namespace", "acme",
                                      "--cluster", "eu-1", "--kubeconfig", "/kube/config",
                                      "--once", timeout=120)
    finally:
        registry.shutdown()
    [(path, auth, body)] = registry.received
    with kube_apiserver.api_client() as api:
        version = client.VersionApi(api).get_code().git_version
    assert path == "/tenants/acme/clusters/eu-1/facts" and auth == "Bearer not-a-jwt-agent-token"
    assert body["facts"]["kubernetesVersion"] == version, (body, ran.stderr)
    assert "not-a-jwt-agent-token" not in ran.stdout + ran.stderr  # never logged
