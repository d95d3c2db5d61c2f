"""The envtest's pytest fixtures: one real etcd + kube-apiserver per kind for the session (doubles/envtest.py
starts them; tests/ and bench/ share that harness).

* ``kube_apiserver``          - default apiserver flags (watch cache on), the project's CRDs
  (``stacks.crds.crd_manifests()``) installed.
* ``kube_apiserver_nocache``  - the same with ``--watch-cache=false``: watches go straight to etcd, so
  ``env.compact()`` makes an old resourceVersion answer ``410 Gone`` at once.
* ``kube_apiserver_gc``       - the default flags plus a real kube-controller-manager running the garbage
  collector (ownerReferences are honoured: an object whose owner's uid is gone is deleted) and the ResourceQuota
  controller (a quota's ``status.used`` is computed, ``count/<plural>.<group>`` included).
* ``kube_apiserver_alone``    - a server of the module's own (``kube_apiserver_alone_gc``: with the garbage collector).

Each yields an :class:`EnvTest`; for other flags use :func:`start_envtest` directly. Import the fixtures into a
test module (several modules importing them still share one server)::

    from tests.envtest import kube_apiserver, install_crds   # noqa: F401

    def test_x(kube_apiserver):
        api = kubernetes.client.CoreV1Api(kube_apiserver.api_client())
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest

from doubles.envtest import (BUILD_HINT, ROOT, TENANT_USER, TOOLS_BIN, EnvTest, exists, find_binary,  # noqa: F401
                             free_port, install_crds, missing_binaries, project_crds, require_binaries,
                             start_envtest, tools_env)


# --------------------------------------------------------------------------- fixtures

# One server per kind per process, shared by every FixtureDef of these fixtures:
# a test module that imports them while a conftest also registers this module as
# a plugin still gets the one server (refcounted, stopped by the last user).
_SHARED: dict[str, list] = {}


@contextlib.contextmanager
def shared_envtest(key: str, **kwargs) -> Iterator[EnvTest]:
    """``start_envtest(**kwargs)`` shared under ``key`` for as long as anyone holds it."""
    entry = _SHARED.get(key)
    if entry is None:
        stack = contextlib.ExitStack()
        env = stack.enter_context(start_envtest(**kwargs))
        entry = _SHARED[key] = [stack, env, 0]
    entry[2] += 1
    try:
        yield entry[1]
    finally:
        entry[2] -= 1
        if entry[2] == 0:
            del _SHARED[key]
            entry[0].close()


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[EnvTest]:
    """etcd + kube-apiserver for the whole session, with the project's CRDs installed."""
    with shared_envtest("default", crds=project_crds()) as env:
        yield env


@pytest.fixture
def env(kube_apiserver):
    """The service's world for one test on the session's server: a tenant namespace, a system namespace and a
    HubConfig of its own (doubles.service_env.ServiceEnv.isolated), as the service tests share it."""
    from doubles.service_env import ServiceEnv

    env = ServiceEnv.isolated(kube_apiserver.api_client())
    yield env
    env.api_client.close()


@pytest.fixture(params=["local", "runners"])
def executor(request):
    """The same service test with each executor: runners = a RunnerEngine in the service, and runners
    (doubles.service_env: in-process, on the engine double) executing its HubStackRuns."""
    return request.param


@pytest.fixture(scope="session")
def kube_apiserver_nocache() -> Iterator[EnvTest]:
    """Like ``kube_apiserver`` with ``--watch-cache=false``, for ``410 Gone`` tests."""
    with shared_envtest("nocache", watch_cache=False, crds=project_crds()) as env:
        yield env


@pytest.fixture(scope="session")
def kube_apiserver_gc() -> Iterator[EnvTest]:
    """etcd + kube-apiserver + kube-controller-manager (garbage collector, ResourceQuota), the project's CRDs."""
    with shared_envtest("gc", crds=project_crds(), controller_manager=True) as env:
        yield env


@pytest.fixture(scope="module")
def kube_apiserver_alone_gc() -> Iterator[EnvTest]:
    """A server of the module's own with the garbage collector (kube-controller-manager), for a walkthrough whose
    deletions follow ownerReferences."""
    with shared_envtest("alone-gc", crds=project_crds(), controller_manager=True) as env:
        yield env


@pytest.fixture(scope="module")
def kube_apiserver_alone() -> Iterator[EnvTest]:
    """A server of the module's own, for a service that watches every namespace (the tenancy tests)."""
    with shared_envtest("alone", crds=project_crds()) as env:
        yield env
