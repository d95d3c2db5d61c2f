"""The console's attack tests (issue 53), on the REAL kube-apiserver with real tokens (TokenReview,
SubjectAccessReview): a tenant reads nothing of another tenant's cluster, by URL, by search, by the mesh picture
or by the event stream; an expired session, a forged cookie and a cross-site POST get nothing; a write is made as
the viewer, and only when their RBAC allows it."""
from __future__ import annotations

import re
import threading
from typing import Iterator

import httpx
import pytest
from kubernetes import client

from automation.console.access import SESSION_COOKIE
from stacks.names import (CLUSTERS, DRIFT_CHECK_REQUEST_ANNOTATION, GROUP, MESH_ENABLED_ANNOTATION, MESH_LABEL,
                          RECONCILE_REQUEST_ANNOTATION)
from tests.console_env import Browserless, ConsoleWorld, console_world  # noqa: F401 - the fixture
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture

pytestmark = pytest.mark.live
SECRET_NAME = "zz-hidden-cluster"  # the other tenant's cluster: its name must never reach tenant A


@pytest.fixture
def world(console_world: ConsoleWorld) -> Iterator[ConsoleWorld]:  # noqa: F811
    env = console_world.env
    env.create("mine-1", labels={MESH_LABEL: "core"}, annotations={MESH_ENABLED_ANNOTATION: "true"})
    env.create(SECRET_NAME, namespace=console_world.other, labels={MESH_LABEL: "core"},
               annotations={MESH_ENABLED_ANNOTATION: "true"})
    cache = console_world.console.state.cache
    console_world.shows(lambda: cache.row(env.ns, "mine-1") and cache.row(console_world.other, SECRET_NAME))
    yield console_world


def results(page: str) -> str:
    """The fleet page's answer: its counts and its rows (the search form and the links show the viewer's own words
    back)."""
    return "".join(re.findall(r'<ul class="counts".*?</ul>|<tbody>.*?</tbody>', page, flags=re.S))


def signed_in(world: ConsoleWorld, token: str) -> Browserless:
    viewer = world.client()
    answer = viewer.sign_in(token)
    assert answer.status_code == 303, answer.text
    return viewer


def test_a_tenant_sees_its_own_clusters_and_nothing_of_another_tenant(world: ConsoleWorld):
    env, other = world.env, world.other
    tenant = signed_in(world, world.viewer(env.ns))
    fleet = tenant.http.get("/")
    assert fleet.status_code == 200 and "mine-1" in fleet.text
    assert SECRET_NAME not in fleet.text and other not in fleet.text
    assert "1 of 1 clusters" in fleet.text  # no count of anyone else's

    for query in (SECRET_NAME, "zz-hidden", other):  # by search
        found = tenant.http.get("/", params={"q": query})
        assert SECRET_NAME not in results(found.text) and other not in results(found.text)
        assert "<option>" + other not in found.text and "0 of 1 clusters" in found.text
    for name in ("tenant", "account", "group"):  # by a filter's choices
        assert other not in results(tenant.http.get("/", params={name: other}).text)

    # by URL: the same 404 as a cluster that does not exist, naming nothing
    hidden = tenant.http.get(f"/clusters/{other}/{SECRET_NAME}")
    missing = tenant.http.get(f"/clusters/{other}/no-such-cluster")
    assert hidden.status_code == missing.status_code == 404
    assert SECRET_NAME not in hidden.text and hidden.text.replace(SECRET_NAME, "x") == \
        missing.text.replace("no-such-cluster", "x")
    assert tenant.http.get(f"/clusters/{other}/{SECRET_NAME}/runs/any").status_code == 404

    # by the mesh picture
    picture = tenant.http.get("/mesh")
    assert picture.status_code == 200 and SECRET_NAME not in picture.text and other not in picture.text



def test_the_hub_administrator_sees_every_tenant(world: ConsoleWorld, kube_apiserver):  # noqa: F811
    admin = signed_in(world, kube_apiserver.token)
    page = admin.http.get("/", params={"q": world.env.ns}).text + admin.http.get("/", params={"q": world.other}).text
    assert "mine-1" in page and SECRET_NAME in page
    assert admin.http.get(f"/clusters/{world.other}/{SECRET_NAME}").status_code == 200


def events(viewer: Browserless, view: str, into: list[str], done: threading.Event) -> None:
    with viewer.http.stream("GET", "/events", params={"view": view}, timeout=60) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                into.append(line.split(":", 1)[1].strip())
                if into[-1] == "signed-out":
                    break
    done.set()


def test_the_event_stream_says_nothing_of_another_tenants_changes(world: ConsoleWorld):
    env, other = world.env, world.other
    tenant = signed_in(world, world.viewer(env.ns))
    cache = world.console.state.cache
    heard: list[str] = []
    done = threading.Event()
    threading.Thread(target=events, args=(tenant, "fleet", heard, done), daemon=True).start()
    world.shows(lambda: len(world.console.state.sessions) and tenant.http.get("/").status_code == 200)

    before = cache.version
    env.patch(SECRET_NAME, {"metadata": {"labels": {"touched": "1"}}}, namespace=other)
    world.shows(lambda: cache.version > before and (cache.cluster(other, SECRET_NAME) or {}).get(
        "metadata", {}).get("labels", {}).get("touched") == "1", what="the other tenant's change in the cache")
    world.console.state.sessions.sign_out(tenant.http.cookies[SESSION_COOKIE])  # the stream ends after judging it
    assert done.wait(30), "the stream did not end with the session"
    assert heard == ["signed-out"], heard

    tenant = signed_in(world, world.viewer(env.ns))
    heard, done = [], threading.Event()
    threading.Thread(target=events, args=(tenant, "fleet", heard, done), daemon=True).start()
    world.shows(lambda: tenant.http.get("/").status_code == 200)
    env.patch("mine-1", {"metadata": {"labels": {"touched": "1"}}})
    world.shows(lambda: "change" in heard, what="an event for the tenant's own change")
    world.console.state.sessions.sign_out(tenant.http.cookies[SESSION_COOKIE])
    assert done.wait(30)


def test_an_unknown_an_expired_or_a_forged_sign_in_gets_nothing(world: ConsoleWorld):
    stranger = world.client()
    assert stranger.sign_in("not-a-token").status_code == 401
    assert stranger.http.get("/").status_code == 303  # to the sign-in page
    forged = world.client()
    forged.http.cookies.set(SESSION_COOKIE, "A" * 43)
    assert forged.http.get("/").headers["location"] == "/login"
    assert forged.http.get(f"/clusters/{world.env.ns}/mine-1").status_code == 303
    assert forged.http.get("/events", headers={"accept": "text/event-stream"}).status_code == 401

    tenant = signed_in(world, world.viewer(world.env.ns))
    sessions = world.console.state.sessions
    session = sessions.get(tenant.http.cookies[SESSION_COOKIE])
    assert session is not None and session.expires <= sessions.clock() + 3600  # the token's exp, not 8 h
    real = sessions.clock
    sessions.clock = lambda: session.expires + 1  # the token has expired
    try:
        assert tenant.http.get("/").status_code == 303
    finally:
        sessions.clock = real
    assert sessions.get(session.id) is None  # gone, not merely refused


def test_a_cross_site_post_changes_nothing(world: ConsoleWorld):
    env = world.env
    tenant = signed_in(world, world.viewer(env.ns))
    path = f"/clusters/{env.ns}/mine-1/reconcile"
    csrf = tenant.csrf(f"/clusters/{env.ns}/mine-1")
    assert tenant.http.post(path, data={}).status_code == 403  # no CSRF token
    assert tenant.http.post(path, data={"csrf": "x" * 43}).status_code == 403  # a wrong one
    assert tenant.http.post(path, data={"csrf": csrf}, headers={"origin": "https://evil.example"}).status_code == 403
    cookieless = httpx.post(world.console.url + path, data={"csrf": csrf})  # SameSite=Strict: no cookie is sent
    assert cookieless.status_code == 401
    annotations = env.get("mine-1")["metadata"].get("annotations") or {}
    assert RECONCILE_REQUEST_ANNOTATION not in annotations

    done = tenant.http.post(path, data={"csrf": csrf})
    assert done.status_code == 303
    value = env.get("mine-1")["metadata"]["annotations"][RECONCILE_REQUEST_ANNOTATION]
    assert value.endswith(f"by system:serviceaccount:{env.ns}:" + value.rsplit(":", 1)[-1])


def test_a_viewer_who_may_read_but_not_patch_gets_no_action(world: ConsoleWorld):
    env = world.env
    rbac = client.RbacAuthorizationV1Api(world.api_client)
    reader_role = f"console-reader-{env.ns}"
    rbac.create_cluster_role({"metadata": {"name": reader_role}, "rules": [
        {"apiGroups": [GROUP], "resources": [CLUSTERS], "verbs": ["get", "list", "watch"]}]})
    try:
        reader = signed_in(world, world.viewer(env.ns, role=reader_role))
        page = reader.http.get(f"/clusters/{env.ns}/mine-1")
        assert page.status_code == 200 and "Reconcile now" not in page.text and "Check drift now" not in page.text
        csrf = reader.csrf("/")  # the sign-out form's token: a valid one for this session
        for action in ("reconcile", "drift"):
            refused = reader.http.post(f"/clusters/{env.ns}/mine-1/{action}", data={"csrf": csrf})
            assert refused.status_code == 403, refused.text
        annotations = env.get("mine-1")["metadata"].get("annotations") or {}
        assert RECONCILE_REQUEST_ANNOTATION not in annotations and DRIFT_CHECK_REQUEST_ANNOTATION not in annotations
    finally:
        rbac.delete_cluster_role(reader_role)

    viewer = signed_in(world, world.viewer(env.ns, role="view"))  # Kubernetes' own read-only role
    assert "mine-1" not in viewer.http.get("/").text  # `view` does not cover HubClusters
    tenant = signed_in(world, world.viewer(env.ns))
    page = tenant.http.get(f"/clusters/{env.ns}/mine-1").text
    assert "Reconcile now" in page and "Check drift now" in page


def test_cookies_and_headers_are_strict(world: ConsoleWorld):
    viewer = world.client()
    form = viewer.http.get("/login")
    csp = form.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    token = world.viewer(world.env.ns)
    answer = viewer.sign_in(token)
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert token not in viewer.http.get("/").text  # the token never reaches a page
