"""Helpers to drive the service against an API server (kmock's emulator or the envtest kube-apiserver)."""
from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, Callable, Iterator, Optional

from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.engine import RunLimits
from automation.runner.runner import Runner
from automation.service.executor import RunnerEngine
from automation.service.options import ServiceOptions
from automation.service.serve import Service
from doubles.runners import running_runners
from doubles.kube import MockKubeAPI
from doubles.factories import OWNER_ANNOTATION, cluster_doc, hub_doc
from stacks.names import GROUP, VERSION

SYSTEM_NAMESPACE = "hubwright-system"

# Fast enough for tests: short backoff, lock retry and watch renewals. No tenant controller: it is cluster-wide,
# and these services share their API server with other tests' Tenants (tests/test_tenants_envtest.py runs it).
FAST = dict(metrics_port=0, metrics_bind="127.0.0.1", leader_election=False, workers=4, backoff_base=0.05,
            backoff_cap=0.5, lock_retry=0.1, watch_timeout=30, namespace=SYSTEM_NAMESPACE, tenants=False,
            sources="none")


# The bound on waiting for real `pulumi` runs (a first up, a drift check and its correcting up): a first up of one
# resource takes about 23 s here alone, and was still going after 52 s on a loaded CI (2026-11-30).
ENGINE_RUN = 300.0


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, *, what: str = "condition",
               diagnose: Optional[Callable[[], Any]] = None) -> Any:
    """`predicate()` once it is truthy, polled; an AssertionError after `timeout` s. The bound is a safety net, not a
    speed: it is sized for a loaded machine running tests in parallel, and a passing wait costs no more for it.
    `diagnose()`, when given, is called on a timeout and its answer (say, a process's log tail) joins the message."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.02)
    detail = f"\n{diagnose()}" if diagnose is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){detail}")


def quiet(service: Service, *, horizon: float = 1.0, timeout: float = 10.0) -> None:
    """Wait (at most `timeout` s) until the service has nothing to do within `horizon` s: every change in its
    cache mapped to keys, no key ready or in flight, none scheduled sooner. A test that asserts something did
    NOT happen ("no run") waits on this condition, never on a bare sleep."""
    def nothing_to_do() -> bool:
        pipeline = service.pipeline
        return pipeline is not None and pipeline.idle(horizon)

    wait_until(nothing_to_do, timeout, what=f"the service to have nothing to do within {horizon}s")


TEST_ACCOUNTS = ("222222222222", "333333333333")  # the accounts the tests' namespaces own (doubles.factories)


class ServiceEnv:
    """`namespace`: where the test's Clusters go; `system_namespace`: the service's own (Lease, role map)."""

    def __init__(self, api_client: client.ApiClient, *, namespace: str = "acme",
                 system_namespace: str = SYSTEM_NAMESPACE, hub_name: str = "default"):
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ns = namespace
        self.system_namespace = system_namespace
        self.hub_name = hub_name

    @classmethod
    def isolated(cls, api_client: client.ApiClient) -> "ServiceEnv":
        """A tenant namespace, a system namespace and a HubConfig of their own, on an API server other tests share."""
        suffix = uuid.uuid4().hex[:6]
        env = cls(api_client, namespace=f"team-{suffix}", system_namespace=f"sys-{suffix}", hub_name=f"hub-{suffix}")
        env.namespace(env.ns)
        env.namespace(env.system_namespace)
        env.hub()
        return env

    # -- objects
    def namespace(self, name: str, annotations: dict[str, str] | None = None, *,
                  owner: str | None = "222222222222") -> None:
        """A namespace the hub administrator made a tenant: it owns `owner` (cluster_doc's default account)."""
        annotations = {**({OWNER_ANNOTATION: owner} if owner else {}), **(annotations or {})}
        body = {"metadata": {"name": name, "annotations": annotations}}
        try:
            self.core.create_namespace(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespace(name, {"metadata": {"annotations": annotations}})

    def hub(self, name: str | None = None, **spec: Any) -> dict:
        """The HubConfig. Its administrator lets several namespaces own the test accounts (spec.tenancy.sharedAccounts):
        the API server is shared by many tests' namespaces, which own the same accounts."""
        spec.setdefault("tenancy", {}).setdefault("sharedAccounts", list(TEST_ACCOUNTS))
        doc = hub_doc(**spec)
        doc["metadata"]["name"] = name or self.hub_name
        return self.custom.create_cluster_custom_object(GROUP, VERSION, "hubconfigs", doc)

    def patch_hub(self, patch: dict, name: str | None = None) -> dict:
        return self.custom.patch_cluster_custom_object(GROUP, VERSION, "hubconfigs", name or self.hub_name, patch)

    def create(self, name: str = "prod-1", namespace: str | None = None, **kw: Any) -> dict:
        namespace = namespace or self.ns
        doc = cluster_doc(name, namespace, **kw)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", doc)

    def patch(self, name: str, patch: dict, namespace: str | None = None) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace or self.ns, "hubclusters", name,
                                                          patch)

    def patch_status(self, name: str, status: dict, namespace: str | None = None) -> dict:
        return self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace or self.ns, "hubclusters",
                                                                 name, {"status": status})

    def delete(self, name: str, namespace: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace or self.ns, "hubclusters", name)

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace or self.ns, "hubclusters", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def role_map(self, data: dict[str, str], name: str = "hubwright-role-account-map") -> None:
        self.namespace(self.system_namespace)
        body = {"metadata": {"name": name, "namespace": self.system_namespace}, "data": data}
        try:
            self.core.create_namespaced_config_map(self.system_namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespaced_config_map(name, self.system_namespace, {"data": data})

    def events(self, namespace: str | None = None, name: str | None = None) -> list[tuple[str, str, str]]:
        items = self.core.list_namespaced_event(namespace or self.ns).items
        return [(e.type, e.reason, e.message) for e in items
                if name is None or e.involved_object.name == name]

    # -- reading status
    def condition(self, name: str, type_: str = "Ready", namespace: str | None = None) -> dict | None:
        obj = self.get(name, namespace) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)

    def ready(self, name: str, namespace: str | None = None) -> bool:
        cond = self.condition(name, "Ready", namespace)
        return bool(cond and cond["status"] == "True")

    def reason(self, name: str, namespace: str | None = None) -> str | None:
        cond = self.condition(name, "Ready", namespace)
        return cond["reason"] if cond else None

    # -- the service
    def service(self, engine: Any, **options: Any) -> Service:
        """The service on `engine`; with executor="runners", on a RunnerEngine whose runs `engine` executes
        (`runners()` starts the runners that do it; `running` does both)."""
        guards = options.pop("guards", [])
        audit = options.pop("audit", None) or (lambda inputs, operation: None)
        census = options.pop("census", None)
        discovery = options.pop("discovery", None)  # automation.service.discovery.Lookup: reads status.network
        history = options.pop("history", None)  # the run history's store (doubles.history.MemoryHistory, a real one)
        defaults = {**FAST, "namespace": self.system_namespace, "hub_name": self.hub_name}
        service_options = ServiceOptions(**{**defaults, **options})
        if service_options.executor == "runners":
            engine = RunnerEngine(self.api_client, local=engine, namespace=service_options.namespace,
                                  limits=RunLimits(timeout=service_options.run_timeout,
                                                   grace=service_options.cancel_grace),
                                  keep_runs=service_options.keep_runs)
        return Service(service_options, api_client=self.api_client, engine=engine,
                       guards=guards, audit=audit, census=census, discovery=discovery, history=history)

    @contextlib.contextmanager
    def runners(self, engine: Any, count: int = 2, history: Any = None) -> Iterator[list[Runner]]:
        """`count` runners (automation/runner/) in this process, executing the HubStackRuns on `engine`; `history`:
        where they store each run's detail (the service's store)."""
        with running_runners(self.api_client, engine, n=count, namespace=self.system_namespace, claim_ttl=10,
                             workers=4, history=history) as started:
            yield started

    @contextlib.contextmanager
    def running(self, engine: Any, *, runners: int = 2, **options: Any) -> Iterator[Service]:
        """The service, synced; with executor="runners", `runners` runners beside it."""
        with contextlib.ExitStack() as stack:
            if options.get("executor") == "runners" and runners:
                stack.enter_context(self.runners(engine, runners, history=options.get("history")))
            service = self.service(engine, **options)
            service.start()
            stack.callback(service.stop)
            wait_until(lambda: service.ready()[0], 20, what="the service to sync")
            yield service


@contextlib.contextmanager
def on_kmock() -> Iterator[ServiceEnv]:
    """A ServiceEnv on a fresh kmock Kubernetes emulator (doubles.MockKubeAPI), with the tenant namespace `acme`
    (owner account 222222222222) and the HubConfig `default`."""
    with MockKubeAPI() as api:
        env = ServiceEnv(client.ApiClient(api.configuration()))
        env.namespace("acme")
        env.hub()
        yield env
