"""The project's envtest: a real etcd + kube-apiserver (and, when asked, kube-controller-manager) on loopback.

Shared by tests/ (whose pytest fixtures, in tests/envtest.py, hold one server per kind for a session) and bench/
(which starts its own): ``start_envtest()`` is a context manager yielding an :class:`EnvTest` (``.host``,
``.token``, ``.ca_file``, ``.configuration()``, ``.api_client()``, ``.kubeconfig()``, ``.compact()``).
The processes, their PKI and flags are the sandbox's (automation/sandbox/apiserver.py: one copy); this module adds
the Kubernetes client, etcd's compaction and pytest's skip. Binaries come from $KUBEBUILDER_ASSETS, ``.tools/bin``
(built by ``scripts/tools.sh``) or PATH (automation/sandbox/tools.py): a bench checks ``missing_binaries()``
first; under pytest a missing one skips with the reason.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import secrets
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import pytest
from automation.sandbox import tools
from automation.sandbox.apiserver import APISERVER, CONTROLLER_MANAGER, ETCD, GC_CONTROLLERS, ControlPlane
from stacks.names import CLUSTERS, TENANTS  # noqa: F401
from doubles.ports import free_port  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
TOOLS_BIN = ROOT / ".tools" / "bin"
BUILD_HINT = "run scripts/tools.sh to build them into .tools/bin"


# --------------------------------------------------------------------------- binaries

TENANT_USER = "tenant-alice"  # a user with no rights of its own (group "tenants"): what a test binds, it has


def find_binary(name: str) -> Optional[str]:
    """Path of ``name`` in $KUBEBUILDER_ASSETS, .tools/bin, else on PATH, else None (the sandbox's rule)."""
    return tools.find_binary(name)


def missing_binaries(*names: str) -> list[str]:
    return [n for n in names if find_binary(n) is None]


def require_binaries(*names: str) -> dict[str, str]:
    """Paths of the binaries, or pytest.skip naming the missing ones."""
    missing = missing_binaries(*names)
    if missing:
        pytest.skip(tools.missing_message(missing))
    return {n: find_binary(n) for n in names}  # type: ignore[misc]


def tools_env(env: Optional[dict] = None) -> dict:
    """A copy of the environment with .tools/bin first on PATH."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = f"{TOOLS_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


# --------------------------------------------------------------------------- EnvTest

class EnvTest(ControlPlane):
    """A running etcd + kube-apiserver (automation.sandbox.apiserver.ControlPlane) with the tests' clients. Build
    with :func:`start_envtest`."""

    tenant_token = ""  # bearer token of TENANT_USER, who has no rights until a test binds some

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
    bins = require_binaries(ETCD, APISERVER, *([CONTROLLER_MANAGER] if controller_manager else []))
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found: the envtest needs it to make its certificates")
    workdir = Path(tempfile.mkdtemp(prefix="hubwright-envtest-"))
    tenant_token = secrets.token_hex(16)
    env = EnvTest(workdir, bins, port=free_port, watch_cache=watch_cache,
                  etcd_compaction_interval=etcd_compaction_interval, extra_apiserver_args=extra_apiserver_args,
                  users=[(tenant_token, TENANT_USER, "tenants")])
    env.tenant_token = tenant_token
    try:
        env.start(ready_timeout)  # automation.sandbox.apiserver.StartFailed (a RuntimeError) with the log's tail
        crd_list = list(crds or [])
        if crd_list:
            with env.api_client() as api:
                install_crds(api, crd_list)
        if controller_manager:
            env.start_controller_manager(GC_CONTROLLERS)
        yield env
    finally:
        env.stop()
        if os.environ.get("HUBWRIGHT_ENVTEST_KEEP"):
            sys.stderr.write(f"envtest: kept {workdir}\n")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


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
