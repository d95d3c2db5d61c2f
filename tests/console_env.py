"""The console on the session's real kube-apiserver: `python -m automation console`'s own build (its flags, its
informers, its app) served by uvicorn on a loopback port in this process, and viewers with real tokens.

`console_world` (function fixture): a ServiceEnv of the test's own (tenant namespace, system namespace, HubConfig),
a second tenant namespace, and the console watching the server. `viewer(namespace, rules)` makes a ServiceAccount
bound to the tenant-admin ClusterRole (or `rules`) in that namespace and returns a real token for it.
"""
from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import httpx
import pytest
import uvicorn
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.informer import wait_synced
from automation.cli import build_parser
from automation.console.cache import informers
from automation.console.serve import build
from doubles.ports import free_port
from doubles.service_env import ServiceEnv, wait_until
from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from tests.registry_api_env import apply_tenant_admin_role
from tests.registry_rbac import service_account_token

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class ConsoleServer:
    url: str
    state: Any
    server: uvicorn.Server
    thread: threading.Thread
    watchers: list = field(default_factory=list)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        for informer in self.watchers:
            informer.stop()
        self.state.access.close()
        self.state.model.close()


def start_console(api_client: client.ApiClient, *flags: str, namespace: str = "hubwright-system",
                  hub_name: str = "default") -> ConsoleServer:
    port = free_port()
    args = build_parser("console").parse_args(["console", "--console-bind", f"127.0.0.1:{port}",
                                               "--namespace", namespace, "--hub-name", hub_name, *flags])
    app, state = build(args, api_client)
    watchers = informers(state.cache, api_client, hub_name=hub_name, namespace=namespace,
                         role_map=args.role_map_configmap, timeout_seconds=60)
    for informer in watchers:
        informer.start()
    assert wait_synced(watchers, threading.Event()), "the console's informers did not fill"
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    wait_until(lambda: server.started, 20, what="the console to listen")
    return ConsoleServer(f"http://127.0.0.1:{port}", state, server, thread, watchers)


class Browserless:
    """A viewer's HTTP session with the console (cookies kept, redirects not followed)."""

    def __init__(self, url: str):
        self.http = httpx.Client(base_url=url, follow_redirects=False, timeout=30)

    def sign_in(self, token: str) -> httpx.Response:
        form = self.http.get("/login")
        csrf = CSRF.search(form.text).group(1)
        return self.http.post("/login", data={"csrf": csrf, "token": token, "next": "/"})

    def csrf(self, path: str) -> str:
        return CSRF.search(self.http.get(path).text).group(1)

    def close(self) -> None:
        self.http.close()


@dataclass
class ConsoleWorld:
    env: ServiceEnv
    other: str  # a second tenant's namespace
    console: ConsoleServer
    api_client: client.ApiClient

    def viewer(self, namespace: str, name: str | None = None, role: str = TENANT_ADMIN_CLUSTERROLE) -> str:
        """A real token of a ServiceAccount that holds `role` (a ClusterRole) in `namespace` only."""
        name = name or f"viewer-{uuid.uuid4().hex[:6]}"
        token = service_account_token(self.api_client, namespace, name)
        rbac = client.RbacAuthorizationV1Api(self.api_client)
        try:
            rbac.create_namespaced_role_binding(namespace, {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
        except ApiException as exc:
            if exc.status != 409:
                raise
        return token

    def client(self) -> Browserless:
        return Browserless(self.console.url)

    def shows(self, predicate: Any, timeout: float = 10.0, what: str = "the console's cache") -> Any:
        return wait_until(predicate, timeout, what=what)


@pytest.fixture
def console_world(kube_apiserver) -> Iterator[ConsoleWorld]:
    api = kube_apiserver.api_client()
    apply_tenant_admin_role(api)
    env = ServiceEnv.isolated(api)
    other = f"team-{uuid.uuid4().hex[:6]}"
    env.namespace(other)
    server = start_console(api, namespace=env.system_namespace, hub_name=env.hub_name)
    try:
        yield ConsoleWorld(env, other, server, api)
    finally:
        server.stop()
        api.close()


__all__ = ["Browserless", "ConsoleWorld", "console_world", "start_console"]
