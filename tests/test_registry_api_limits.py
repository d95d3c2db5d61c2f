"""The registry API under a stalled Kubernetes API and a hostile caller (#31, items 5, 6, 7, 8 and 10).

The stall and the flood go through the real `python -m automation api` process against the envtest kube-apiserver
(the stall through doubles/stall_proxy.py); the 403 body, the fleet list's tenants, the bounded fact scan and /docs
through the FastAPI application on the same kube-apiserver.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from fastapi.testclient import TestClient
from kubernetes import client

from automation.api import listing, serve
from automation.api.app import FORBIDDEN, ApiSettings, ClientCache, Registry, create_app
from automation.api.docs import CSP, STATIC
from stacks.names import GROUP, VERSION
from tests.envtest import EnvTest, free_port, kube_apiserver  # noqa: F401 - the fixture
from tests.registry_api_env import fleet, registry_api  # noqa: F401 - the fixtures
from doubles.service_env import wait_until
from doubles.stall_proxy import StallProxy

ROOT = Path(__file__).resolve().parent.parent


def _get(url: str, token: str | None = None, timeout: float = 30) -> tuple[int, dict, dict]:
    """(status, JSON body, headers by lower-case name) of one GET; (0, {}, {}) when nothing listens yet."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null"), _lower(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), _lower(error.headers)
    except urllib.error.URLError:
        return 0, {}, {}


def _lower(headers) -> dict:
    return {name.lower(): value for name, value in headers.items()}


def _kubeconfig(env: EnvTest, path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
        "clusters": [{"name": "envtest", "cluster": {"server": server, "certificate-authority": env.ca_file}}],
        "users": [{"name": "admin", "user": {"token": env.token}}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}]}))
    return path


@contextmanager
def api_process(kubeconfig: Path, tmp_path: Path, *flags: str) -> Iterator[str]:
    """The real API process on a free port; its base URL. Stopped with SIGTERM afterwards."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("KUBERNETES_SERVICE_HOST", "HUBWRIGHT_FACTS_DB", "KUBECONFIG"):
        env.pop(name, None)
    log = tmp_path / "api.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "automation", "api", "--kubeconfig", str(kubeconfig),
             "--bind", f"127.0.0.1:{port}", "--state-dir", str(tmp_path), *flags],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until(lambda: proc.poll() is not None or _get(f"{base}/healthz", timeout=2)[0] == 200, 30,
                   what="/healthz")
        assert proc.poll() is None, log.read_text()
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# --------------------------------------------------------------------------- item 5: a stalled Kubernetes API

def test_a_stalled_kubernetes_api_is_a_504_and_healthz_never_waits(kube_apiserver, tmp_path):
    """The path to the API server stalls (no answer, no reset): more requests than the API has worker threads
    each answer 504 once the read timeout passes, /healthz answers at once meanwhile, and the API recovers."""
    upstream = urlsplit(kube_apiserver.host)
    with StallProxy((upstream.hostname, upstream.port)) as proxy:
        config = _kubeconfig(kube_apiserver, tmp_path / "kubeconfig", f"https://127.0.0.1:{proxy.port}")
        with api_process(config, tmp_path, "--kube-connect-timeout", "2", "--kube-read-timeout", "2",
                         "--caller-concurrency", "200", "--caller-burst", "1000") as base:
            token = kube_apiserver.token
            assert _get(f"{base}/tenants?limit=1", token)[0] == 200
            proxy.stall()
            paths = ["/tenants?limit=1", "/clusters?limit=1", "/tenants/t-stalled/clusters",
                     "/tenants/t-stalled/clusters/c-x/facts", "/tenants/t-stalled"] * 12  # 60 > 40 workers
            started, held = time.monotonic(), proxy.connections
            with ThreadPoolExecutor(len(paths)) as pool:
                flood = [pool.submit(_get, base + path, token, 60) for path in paths]
                # the worker threads are waiting on the stalled API server: each holds a connection of its own
                wait_until(lambda: proxy.connections - held >= 20, 20, what="20 workers waiting on the stall")
                health = []
                for _ in range(5):
                    asked = time.monotonic()
                    status = _get(f"{base}/healthz", timeout=10)[0]
                    health.append((status, time.monotonic() - asked))
                answers = [future.result() for future in flood]
            took = time.monotonic() - started
            assert all(status == 200 for status, _ in health), health
            assert max(seconds for _, seconds in health) < 1.0, health  # never behind the stalled routes
            assert {status for status, _, _ in answers} == {504}, [(s, b) for s, b, _ in answers if s != 504]
            assert all("did not answer in time" in body["detail"] for _, body, _ in answers)
            # 60 requests on 40 workers: at most two rounds of a few 2-second calls each, not for ever.
            assert took < 30, took
            proxy.resume()
            wait_until(lambda: _get(f"{base}/tenants?limit=1", token, 10)[0] == 200, 20, what="recovery")


# --------------------------------------------------------------------------- item 6: one caller's flood

def _seed(kube: client.ApiClient, namespace: str, count: int, run: str) -> None:
    objects = client.CustomObjectsApi(kube)

    def create(i: int) -> None:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "hubclusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubCluster",
            "metadata": {"name": f"c-{run}-{i:04d}", "namespace": namespace, "labels": {"run": run}},
            "spec": {"facts": {"index": str(i)}}})
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def test_one_tenant_flooding_fact_filtered_lists_does_not_starve_another(kube_apiserver, fleet, tmp_path):
    """Tenant B sends 40 concurrent fact-filtered lists over and over; tenant A's list stays within 10x its own
    p99 alone (the bench, bench/registry_flood.py, measures the real ratio), and B's excess gets 429 with
    Retry-After, answered before it takes a worker."""
    victim, victim_ns = fleet.tenant()
    attacker, attacker_ns = fleet.tenant()
    read = [{"apiGroups": [GROUP], "resources": ["hubclusters"], "verbs": ["get", "list"]}]
    victim_token = fleet.user(victim_ns, f"victim-{fleet.suffix}", read)
    attacker_token = fleet.user(attacker_ns, f"attacker-{fleet.suffix}", read)
    _seed(fleet.kube, victim_ns, 5, fleet.suffix)
    _seed(fleet.kube, attacker_ns, 600, fleet.suffix)
    fleet.clusters += [(victim_ns, f"c-{fleet.suffix}-{i:04d}") for i in range(5)]
    fleet.clusters += [(attacker_ns, f"c-{fleet.suffix}-{i:04d}") for i in range(600)]
    config = kube_apiserver.kubeconfig()
    with api_process(config, tmp_path) as base:
        victim_list = f"{base}/tenants/{victim}/clusters"
        flood_list = f"{base}/tenants/{attacker}/clusters?fact=index%3Dnone"

        def victim_p99(count: int) -> float:
            samples = []
            for _ in range(count):
                started = time.perf_counter()
                status, body, _ = _get(victim_list, victim_token)
                samples.append(time.perf_counter() - started)
                assert status == 200 and len(body["items"]) == 5, (status, body)
                time.sleep(0.05)  # within the victim's own rate
            return _p99(samples)

        for _ in range(3):
            victim_p99(1)  # warm: the victim's client and connection
        alone = victim_p99(40)
        stop = threading.Event()
        answers: list[tuple[int, dict]] = []

        def flood() -> None:
            while not stop.is_set():
                status, _, headers = _get(flood_list, attacker_token, 60)
                answers.append((status, headers))
                if status == 429:
                    time.sleep(0.05)

        threads = [threading.Thread(target=flood, daemon=True) for _ in range(40)]
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: any(status == 429 for status, _ in answers), 20,
                       what="the flood past the attacker's first burst")
            under_flood = victim_p99(40)
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
    statuses = {status for status, _ in answers}
    assert statuses <= {200, 429} and 429 in statuses and 200 in statuses, statuses
    assert all(int(headers.get("retry-after", "0")) >= 1 for status, headers in answers if status == 429)
    assert under_flood < max(10 * alone, 0.5), (alone, under_flood)


def test_a_callers_rate_is_limited_with_retry_after(kube_apiserver, tmp_path):
    with api_process(kube_apiserver.kubeconfig(), tmp_path, "--caller-rate", "1", "--caller-burst", "3") as base:
        statuses = [_get(f"{base}/tenants?limit=1", kube_apiserver.token) for _ in range(6)]
        assert [status for status, _, _ in statuses[:3]] == [200, 200, 200]
        limited = [(body, headers) for status, body, headers in statuses[3:] if status == 429]
        assert limited and all(int(headers["retry-after"]) >= 1 and "too many" in body["detail"]
                               for body, headers in limited)
        # Another caller is not affected by this one, and requests without a token are not counted.
        assert _get(f"{base}/tenants?limit=1", "not-a-token")[0] == 401
        assert all(_get(f"{base}/healthz")[0] == 200 for _ in range(5))


def test_a_fact_filtered_list_scans_a_bounded_number_of_chunks(registry_api, fleet, monkeypatch):
    """A filter that matches only the last cluster no longer makes one request scan the whole fleet: each page
    scans at most MAX_CHUNKS chunks, and the continue tokens reach the match, once."""
    monkeypatch.setattr(listing, "CHUNK", 3)
    monkeypatch.setattr(listing, "MAX_CHUNKS", 2)
    tenant, namespace = fleet.tenant()
    made = [fleet.cluster(tenant, namespace, id=f"c-{fleet.suffix}-{i:02d}",  # listed in this order
                          spec={"facts": {"tier": "gold" if i == 13 else "lead"}})["id"] for i in range(14)]
    calls: list[int] = []
    original = client.CustomObjectsApi.list_namespaced_custom_object

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("limit"))
        return original(self, *args, **kwargs)
    monkeypatch.setattr(client.CustomObjectsApi, "list_namespaced_custom_object", counted)

    first = registry_api.ok("GET", f"/tenants/{tenant}/clusters?fact=tier%3Dgold")
    assert first["items"] == [] and first["continue"], first  # a short page, and where to go on
    assert len(calls) == 2 and calls == [3, 3]
    found, token, pages = [], first["continue"], 1
    while token:
        body = registry_api.ok("GET", f"/tenants/{tenant}/clusters?fact=tier%3Dgold&continue={token}")
        found += [item["id"] for item in body["items"]]
        token, pages = body["continue"], pages + 1
        assert pages < 10
    assert found == [made[13]]
    assert len(calls) <= 2 * pages


def test_neither_limit_nor_a_forged_continue_token_widens_a_fact_filtered_scan(registry_api, fleet, monkeypatch):
    """The scan's bound is clusters (MAX_CHUNKS * CHUNK), not calls: a large ?limit= or a continue token whose
    chunk size was rewritten (it is only base64) still fetches at most that many clusters per request."""
    monkeypatch.setattr(listing, "CHUNK", 3)
    monkeypatch.setattr(listing, "MAX_CHUNKS", 2)
    tenant, namespace = fleet.tenant()
    for i in range(14):
        fleet.cluster(tenant, namespace, id=f"c-{fleet.suffix}-{i:02d}", spec={"facts": {"tier": "lead"}})
    calls: list[int] = []
    original = client.CustomObjectsApi.list_namespaced_custom_object

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("limit"))
        return original(self, *args, **kwargs)
    monkeypatch.setattr(client.CustomObjectsApi, "list_namespaced_custom_object", counted)

    first = registry_api.ok("GET", f"/tenants/{tenant}/clusters?fact=tier%3Dgold&limit=10000")
    assert first["items"] == [] and first["continue"] and sum(calls) <= 6, calls
    body = first["continue"][len(listing.TOKEN_PREFIX):]
    decoded = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged = listing.TOKEN_PREFIX + base64.urlsafe_b64encode(
        json.dumps({**decoded, "n": 10_000}).encode()).decode().rstrip("=")
    calls.clear()
    again = registry_api.ok("GET", f"/tenants/{tenant}/clusters?fact=tier%3Dgold&continue={forged}")
    assert again["items"] == [] and sum(calls) <= 6, calls


# --------------------------------------------------------------------------- item 7: one 403 body

def test_a_403_is_one_fixed_body_for_missing_and_existing_tenants(registry_api, fleet):
    """A tenant user of another namespace cannot tell an existing tenant from a missing one, nor learn the
    namespace an existing one adopted: every 403 it gets is the same body."""
    hidden = f"secret-ns-{fleet.suffix}"
    fleet.namespace(hidden)
    victim, namespace = fleet.tenant(f"t-victim-{fleet.suffix}", namespace=hidden)
    assert namespace == hidden
    cluster = fleet.cluster(victim, namespace)["id"]
    own, own_ns = fleet.tenant()
    token = fleet.user(own_ns, f"nosy-{fleet.suffix}", [{"apiGroups": [GROUP], "resources": ["hubclusters"],
                                                        "verbs": ["get", "list", "create"]}])
    missing = f"t-missing-{fleet.suffix}"
    bodies = []
    for tenant in (victim, missing):
        for method, path, kwargs in [
                ("GET", f"/tenants/{tenant}/clusters", {}),
                ("GET", f"/clusters?tenant={tenant}", {}),
                ("GET", f"/tenants/{tenant}/clusters/{cluster}", {}),
                ("DELETE", f"/tenants/{tenant}/clusters/{cluster}", {}),
                ("POST", f"/tenants/{tenant}/clusters", {"json": {"spec": {}}}),
                ("GET", f"/tenants/{tenant}/clusters/{cluster}/facts", {}),
                ("POST", f"/tenants/{tenant}/clusters/{cluster}/facts", {"json": {"facts": {"a": "b"}}})]:
            response = registry_api.call(method, path, token, **kwargs)
            assert response.status_code == 403, (method, path, response.status_code, response.text)
            bodies.append(response.content)
    assert set(bodies) == {json.dumps({"detail": FORBIDDEN}, separators=(",", ":")).encode()}
    assert all(hidden.encode() not in body for body in bodies)


# --------------------------------------------------------------------------- item 8: tenants in the fleet list

def test_the_fleet_list_names_the_tenant_the_controller_granted_not_an_impostor(registry_api, fleet):
    """Whoever may create Tenants makes one whose spec.namespace names another tenant's namespace; the controller
    never grants it (no status.namespace), and the fleet list keeps naming the real tenant."""
    victim, namespace = fleet.tenant(f"a-victim-{fleet.suffix}")
    impostor = registry_api.ok("POST", "/tenants", json={"id": f"z-impostor-{fleet.suffix}",
                                                         "spec": {"namespace": namespace}}, status=201)["id"]
    fleet.tenants.append(impostor)
    made = fleet.cluster(victim, namespace, labels={"run": fleet.suffix})["id"]
    items = registry_api.ok("GET", f"/clusters?labelSelector=run%3D{fleet.suffix}")["items"]
    assert {item["tenant"] for item in items if item["id"] == made} == {victim}


# --------------------------------------------------------------------------- item 10: /docs

def test_docs_serve_pinned_swagger_ui_from_the_package_under_a_strict_csp():
    """/docs needs no Kubernetes: the API here has none (nothing listens where its client points)."""
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{free_port()}"
    reg = Registry(settings=ApiSettings(), own=client.ApiClient(configuration),
                   callers=ClientCache(configuration, 4), facts=None)
    with TestClient(create_app(reg, routers=serve.ROUTERS)) as http:
        _docs(http)


def _docs(http: TestClient) -> None:
    page = http.get("/docs")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe" not in CSP and "connect-src 'self'" in CSP
    html = page.text
    assert "http://" not in html and "https://" not in html and "<script>" not in html  # no CDN, no inline script
    for name in ("swagger-ui-bundle.js", "swagger-ui.css"):
        asset = http.get(f"/docs/assets/{name}")
        assert asset.status_code == 200 and asset.headers["content-security-policy"] == CSP
        assert asset.content == (STATIC / name).read_bytes()
        assert f"/docs/assets/{name}" in html
    init = http.get("/docs/init.js")
    assert init.status_code == 200 and '"/openapi.json"' in init.text
    for name in ("redoc.standalone.js", "..%2F__init__.py", "..%2Fcore.py"):
        assert http.get(f"/docs/assets/{name}").status_code == 404
    assert http.get("/redoc").status_code == 404  # it would load from a CDN
