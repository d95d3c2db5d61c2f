"""The project's envtest: a real etcd + kube-apiserver (and, when asked, kube-controller-manager) on loopback.

Shared by tests/ (whose pytest fixtures, in tests/envtest.py, hold one server per kind for a session) and bench/
(which starts its own): ``start_envtest()`` is a context manager yielding an :class:`EnvTest` (``.host``,
``.token``, ``.ca_file``, ``.configuration()``, ``.api_client()``, ``.kubeconfig()``, ``.compact()``).
Binaries come from ``.tools/bin`` (built by ``scripts/tools.sh``) or PATH: a bench checks
``missing_binaries()`` first; under pytest a missing one skips with the reason.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import pytest
from stacks.names import CLUSTERS, TENANTS
from doubles.ports import free_port  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
TOOLS_BIN = ROOT / ".tools" / "bin"
BUILD_HINT = "run scripts/tools.sh to build them into .tools/bin"


# --------------------------------------------------------------------------- binaries

TENANT_USER = "tenant-alice"  # a user with no rights of its own (group "tenants"): what a test binds, it has


def find_binary(name: str) -> Optional[str]:
    """Path of ``name`` in .tools/bin, else on PATH, else None."""
    candidate = TOOLS_BIN / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def missing_binaries(*names: str) -> list[str]:
    return [n for n in names if find_binary(n) is None]


def require_binaries(*names: str) -> dict[str, str]:
    """Paths of the binaries, or pytest.skip naming the missing ones."""
    missing = missing_binaries(*names)
    if missing:
        pytest.skip(f"{', '.join(missing)} not found in {TOOLS_BIN} or on PATH: {BUILD_HINT}")
    return {n: find_binary(n) for n in names}  # type: ignore[misc]


def tools_env(env: Optional[dict] = None) -> dict:
    """A copy of the environment with .tools/bin first on PATH."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = f"{TOOLS_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


# --------------------------------------------------------------------------- helpers


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _make_pki(d: Path) -> None:
    """CA, a serving cert for 127.0.0.1/localhost and a service-account key pair."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found: the envtest needs it to make its certificates")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=hubwright-envtest-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=kube-apiserver", cwd=d)
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", "server.crt",
             "-extfile", "server.ext", cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _stop(proc: Optional[subprocess.Popen], timeout: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# --------------------------------------------------------------------------- EnvTest

class EnvTest:
    """A running etcd + kube-apiserver. Build with :func:`start_envtest`."""

    def __init__(self, workdir: Path, host: str, token: str, ca_file: str,
                 etcd_url: str, apiserver_log: Path, etcd_log: Path):
        self.workdir = workdir
        self.host = host                # https://127.0.0.1:PORT
        self.token = token              # bearer token of a system:masters user
        self.tenant_token = ""          # bearer token of TENANT_USER, who has no rights until a test binds some
        self.ca_file = ca_file          # CA that signed the serving certificate
        self.etcd_url = etcd_url        # http://127.0.0.1:PORT (v3 HTTP gateway too)
        self.apiserver_log = apiserver_log
        self.etcd_log = etcd_log
        self.etcd_proc: Optional[subprocess.Popen] = None
        self.apiserver_proc: Optional[subprocess.Popen] = None
        self.controller_manager_proc: Optional[subprocess.Popen] = None
        self.controller_manager_log = workdir / "kube-controller-manager.log"

    # -- clients
    def configuration(self, token: Optional[str] = None):
        """A fresh ``kubernetes.client.Configuration`` for this server (as the admin, or as `token`'s user)."""
        from kubernetes import client
        cfg = client.Configuration()
        cfg.host = self.host
        token = token or self.token
        # kubernetes>=36 reads api_key["BearerToken"], older ones api_key["authorization"].
        cfg.api_key = {"BearerToken": f"Bearer {token}", "authorization": f"Bearer {token}"}
        cfg.ssl_ca_cert = self.ca_file
        cfg.verify_ssl = True
        return cfg

    def api_client(self, token: Optional[str] = None):
        """A new ``kubernetes.client.ApiClient`` (close it, or use it as a context manager)."""
        from kubernetes import client
        return client.ApiClient(self.configuration(token))

    def kubeconfig(self) -> Path:
        """Write a kubeconfig for this server (for tools that want a file) and return its path."""
        path = self.workdir / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
            "clusters": [{"name": "envtest", "cluster": {
                "server": self.host, "certificate-authority": self.ca_file}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}],
        }))
        return path

    # -- raw HTTP
    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", timeout: float = 10) -> tuple[int, Any]:
        """(status, decoded JSON or text) of one request to the apiserver."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.host + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type,
            "Accept": "application/json"})
        ctx = ssl.create_default_context(cafile=self.ca_file)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    # -- etcd
    def _etcd(self, path: str, body: dict, timeout: float = 10) -> dict:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def etcd_revision(self) -> int:
        """etcd's current revision (the apiserver's newest resourceVersion)."""
        out = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": "1"})
        return int(out["header"]["revision"])

    def compact(self, revision: Optional[int] = None) -> int:
        """Compact etcd at ``revision`` (default: the current one) and return it.

        Afterwards a watch or list from an older resourceVersion that reaches etcd
        answers ``410 Gone`` (``kube_apiserver_nocache`` sends every watch to etcd;
        with the watch cache on, only versions older than the cache's window do).
        """
        rev = self.etcd_revision() if revision is None else int(revision)
        self._etcd("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    # -- lifecycle
    def stop(self) -> None:
        _stop(self.controller_manager_proc)
        _stop(self.apiserver_proc)
        _stop(self.etcd_proc)

    def __repr__(self) -> str:
        return f"EnvTest(host={self.host!r}, etcd_url={self.etcd_url!r})"


def next_second(api_client: Any, timeout: float = 10.0) -> None:
    """Return once the API server's clock has moved past the second it shows now: an object created after this
    has a ``creationTimestamp`` (whole seconds) strictly later than every object created before it. The clock read
    is the server's own (the ``Date`` of its answers), polled; a test that orders objects by age waits on this,
    not on a guessed ``sleep``."""
    from email.utils import parsedate_to_datetime
    from kubernetes import client
    from doubles.service_env import wait_until
    version = client.VersionApi(api_client)

    def server_time() -> Any:
        return parsedate_to_datetime(version.get_code_with_http_info(_request_timeout=5)[2]["Date"])

    start = server_time()
    wait_until(lambda: server_time() > start, timeout, what=f"the API server's clock to pass {start}")


def take_lease(api_client: Any, name: str, namespace: str, holder: str, duration: int,
               timeout: float = 10.0) -> None:
    """Hand a Lease to ``holder`` as another replica would after a partition. The holder renews it every retry
    period, so a read-modify-replace can meet a 409 Conflict: read again and retry until the write lands."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    leases = client.CoordinationV1Api(api_client)
    deadline = time.monotonic() + timeout
    while True:
        lease = leases.read_namespaced_lease(name, namespace, _request_timeout=5)
        lease.spec.holder_identity = holder
        lease.spec.lease_duration_seconds = duration
        try:
            leases.replace_namespaced_lease(name, namespace, lease, _request_timeout=5)
            return
        except ApiException as e:
            if e.status != 409 or time.monotonic() > deadline:
                raise


def _wait_ready(env: EnvTest, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if env.apiserver_proc is not None and env.apiserver_proc.poll() is not None:
            raise RuntimeError(f"kube-apiserver exited with {env.apiserver_proc.returncode}:\n"
                               f"{_tail(env.apiserver_log)}")
        if env.etcd_proc is not None and env.etcd_proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {env.etcd_proc.returncode}:\n{_tail(env.etcd_log)}")
        try:
            status, last = env.request("GET", "/readyz", timeout=2)
            if status == 200:
                return
        except (OSError, ssl.SSLError) as e:
            last = e
        time.sleep(0.25)
    raise RuntimeError(f"kube-apiserver not ready after {timeout:.0f}s (last: {last!r}):\n"
                       f"{_tail(env.apiserver_log)}")


@contextlib.contextmanager
def start_envtest(*, watch_cache: bool = True,
                  etcd_compaction_interval: str = "0",
                  extra_apiserver_args: Sequence[str] = (),
                  crds: Optional[Iterable[dict]] = None,
                  controller_manager: bool = False,
                  ready_timeout: float = 90) -> Iterator[EnvTest]:
    """Start etcd + kube-apiserver on 127.0.0.1 with free ports in a temp dir.

    ``watch_cache=False`` sends watches straight to etcd (``410 Gone`` right after
    :meth:`EnvTest.compact`). ``etcd_compaction_interval`` is the apiserver's own
    periodic compaction (``"0"``: off, so only explicit ``compact()`` calls
    compact; e.g. ``"5s"`` for a short window). ``crds`` are installed and waited
    for before the server is handed over. ``controller_manager=True`` then starts
    kube-controller-manager with the garbage collector and the ResourceQuota
    controller only (after the CRDs, so both see them at their first discovery).
    Skips when a binary is missing.
    """
    bins = require_binaries("etcd", "kube-apiserver", *(["kube-controller-manager"] if controller_manager else []))
    workdir = Path(tempfile.mkdtemp(prefix="hubwright-envtest-"))
    env: Optional[EnvTest] = None
    try:
        _make_pki(workdir)
        token, tenant_token = secrets.token_hex(16), secrets.token_hex(16)
        (workdir / "tokens.csv").write_text(f'{token},envtest-admin,envtest-admin,"system:masters"\n'
                                            f'{tenant_token},{TENANT_USER},{TENANT_USER},"tenants"\n')
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        env = EnvTest(workdir, f"https://127.0.0.1:{api_port}", token, str(workdir / "ca.crt"),
                      etcd_url, workdir / "kube-apiserver.log", workdir / "etcd.log")
        env.tenant_token = tenant_token

        with open(env.etcd_log, "wb") as log:
            env.etcd_proc = subprocess.Popen([
                bins["etcd"], "--name=envtest", f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=envtest=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=1073741824",
            ], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=workdir, start_new_session=True)

        args = [
            bins["kube-apiserver"],
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--cert-dir={workdir / 'certs'}",
            f"--tls-cert-file={workdir / 'server.crt'}",
            f"--tls-private-key-file={workdir / 'server.key'}",
            f"--client-ca-file={workdir / 'ca.crt'}",
            f"--token-auth-file={workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={workdir / 'sa.pub'}",
            f"--service-account-signing-key-file={workdir / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--allow-privileged=true",
            "--profiling=false",
            f"--watch-cache={'true' if watch_cache else 'false'}",
            f"--etcd-compaction-interval={etcd_compaction_interval}",
            "--shutdown-delay-duration=0s",
            *extra_apiserver_args,
        ]
        with open(env.apiserver_log, "wb") as log:
            env.apiserver_proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=workdir, start_new_session=True)
        _wait_ready(env, ready_timeout)

        crd_list = list(crds or [])
        if crd_list:
            with env.api_client() as api:
                install_crds(api, crd_list)
        if controller_manager:
            _start_controller_manager(env, bins["kube-controller-manager"])
        yield env
    finally:
        if env is not None:
            env.stop()
        if os.environ.get("HUBWRIGHT_ENVTEST_KEEP"):
            sys.stderr.write(f"envtest: kept {workdir}\n")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _start_controller_manager(env: EnvTest, binary: str) -> None:
    """kube-controller-manager against ``env``: garbage collection and ResourceQuota usage, nothing else.

    No serving port (``--secure-port=0``), no leader election, the admin's kubeconfig. Both controllers
    rediscover resources every 30 s; the CRDs installed before it starts are seen at once. Raises with the
    log's tail when it exits within its first seconds.
    """
    with open(env.controller_manager_log, "wb") as log:
        env.controller_manager_proc = subprocess.Popen([
            binary, f"--kubeconfig={env.kubeconfig()}",
            "--controllers=garbage-collector-controller,resourcequota-controller",
            "--secure-port=0", "--leader-elect=false", "--use-service-account-credentials=false",
            "--concurrent-gc-syncs=5", "--concurrent-resource-quota-syncs=5",
            "--resource-quota-sync-period=10s", "--v=1",
        ], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=env.workdir, start_new_session=True)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if env.controller_manager_proc.poll() is not None:
            raise RuntimeError(f"kube-controller-manager exited with {env.controller_manager_proc.returncode}:\n"
                               f"{_tail(env.controller_manager_log)}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- CRDs

def install_crds(api_client, crds: Iterable[dict], timeout: float = 60) -> list[str]:
    """Create (or replace) CRD manifests and wait until each is Established and served.

    ``api_client`` is a ``kubernetes.client.ApiClient``; ``crds`` are
    ``apiextensions.k8s.io/v1`` CustomResourceDefinition dicts. Returns the
    CRD names. Raises ``TimeoutError`` naming the CRD and its conditions.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(body=crd)
        except ApiException as e:
            if e.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            body = json.loads(json.dumps(crd))
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        names.append(name)

    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        conditions: list = []
        while True:
            obj = ext.read_custom_resource_definition(name)
            conditions = [(c.type, c.status, c.message) for c in (obj.status.conditions or [])]
            if any(t == "Established" and s == "True" for t, s, _ in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s: {conditions}")
            time.sleep(0.1)
        # Established can precede the REST handler by a moment: wait until a list works.
        spec = crd["spec"]
        version = next((v["name"] for v in spec["versions"] if v.get("served", True)),
                       spec["versions"][0]["name"])
        while True:
            try:
                client.CustomObjectsApi(api_client).list_cluster_custom_object(
                    spec["group"], version, spec["names"]["plural"], limit=1)
                break
            except ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return names


def project_crds() -> list[dict]:
    """The project's CRDs from ``stacks.crds.crd_manifests()``; [] until that module exists."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        from stacks.crds import crd_manifests  # type: ignore[import-not-found]
    except ModuleNotFoundError as e:
        if e.name in ("stacks", "stacks.crds"):
            return []
        raise
    return list(crd_manifests())


# --------------------------------------------------------------------------- registry

def exists(read: Any) -> bool:
    """Whether `read()` finds its object: a 404 says it is gone; any other error is raised."""
    from kubernetes.client.rest import ApiException

    try:
        read()
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def delete_tenant(api_client, name: str) -> None:
    """Delete a Tenant for good: zero its count, drop its finalizers (no controller may be running), delete it."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from stacks.names import GROUP, VERSION

    custom = client.CustomObjectsApi(api_client)
    try:
        custom.patch_cluster_custom_object_status(GROUP, VERSION, TENANTS, name, {"status": {"clusters": 0}})
        custom.patch_cluster_custom_object(GROUP, VERSION, TENANTS, name, {"metadata": {"finalizers": None}})
        custom.delete_cluster_custom_object(GROUP, VERSION, TENANTS, name)
    except ApiException as exc:
        if exc.status != 404:
            raise
