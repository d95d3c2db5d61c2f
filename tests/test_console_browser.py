"""The console in a real browser (issue 53): Debian's Chromium driven by Playwright (tests/browser.py), the console
on the REAL kube-apiserver with the REAL service running the REAL pulumi CLI (the history envtest's program, whose
cloud is a file), as a user meets it: sign in with a ServiceAccount token, the fleet as a tenant and as the hub
administrator, a cluster turning Stalled without a reload, a run's diff and log, the runs page, and the mesh page of
examples/mesh. Every page passes axe-core (no serious or critical violation) and is walked with the keyboard.

Each page's screenshot is written to $HUBWRIGHT_SCREENSHOTS (docs/console/ holds the ones docs/console.md shows:
`HUBWRIGHT_SCREENSHOTS=docs/console python -m pytest tests/test_console_browser.py` makes them again), else to the
test's temporary folder.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from automation.adapters.engine.pool import WorkerPool
from automation.adapters.history.select import store_of
from doubles.pulumi_programs import ROOT, engine_settings
from doubles.service_env import ENGINE_RUN, wait_until
from stacks.names import GROUP, VERSION
from tests.browser import axe_violations, describe, keyboard_reachable
from tests.console_env import ConsoleWorld, console_world, start_console  # noqa: F401 - the fixture
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.history_live_programs import TAGGED

pytestmark = pytest.mark.live
LIVE_WITHIN = 2.0  # seconds from a status change to the page showing it (the goal)


def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HUBWRIGHT_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def checked(page: Any, name: str, folder: Path, *, focus: str = "#main a, #main button") -> None:
    """The page passes axe-core, its first link or button is reached with Tab, and its screenshot is taken."""
    found = axe_violations(page)
    assert not found, f"{name}: {describe(found)}"
    first = page.locator(focus).first
    if first.count():
        first.evaluate("element => element.setAttribute('data-tab-target', '1')")
        assert keyboard_reachable(page, "[data-tab-target='1']"), f"{name}: Tab does not reach {focus}"
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def sign_in(page: Any, url: str, token: str) -> None:
    page.goto(url + "/")
    assert page.url.endswith("/login")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_load_state()
    assert page.locator("#clusters").count() == 1, page.url + "\n" + page.inner_text("body")


@pytest.fixture
def served(console_world: ConsoleWorld, tmp_path: Path, pulumi_cli) -> Iterator[ConsoleWorld]:  # noqa: F811
    """The real service (local executor, file backend) on the world's namespace, and a console reading its run
    history."""
    world = console_world
    state = tmp_path / "state"
    settings = engine_settings(state)
    pool = WorkerPool(settings, program=TAGGED, program_options={"cloud": str(tmp_path / "cloud")}, size=1)
    store = store_of("backend", backend=None, state_dir=state)
    world.console.stop()
    world.console = start_console(world.api_client, "--state-dir", str(state), namespace=world.env.system_namespace,
                                  hub_name=world.env.hub_name)
    try:
        with world.env.running(pool, executor="local", history=store, watch_namespace=world.env.ns):
            yield world
    finally:
        pool.close()


def test_sign_in_fleet_cluster_run_and_live_status(served: ConsoleWorld, browser, kube_apiserver,  # noqa: F811
                                                   tmp_path: Path):
    world, env = served, served.env
    folder = shots(tmp_path)
    env.create("prod-1")
    env.create("hidden-1", namespace=world.other)
    wait_until(lambda: env.ready("prod-1"), ENGINE_RUN, what="the first up")

    admin = browser.new_context(viewport={"width": 1280, "height": 800})
    page = admin.new_page()
    page.goto(world.console.url + "/login")
    checked(page, "sign-in", folder, focus="#token")
    sign_in(page, world.console.url, kube_apiserver.token)
    page.goto(world.console.url + f"/?q={env.ns}")
    assert page.locator(f"[data-cluster='{env.ns}/prod-1']").count() == 1
    page.goto(world.console.url + f"/?q={world.other}")
    assert page.locator(f"[data-cluster='{world.other}/hidden-1']").count() == 1
    page.goto(world.console.url + "/")
    checked(page, "fleet-admin", folder)
    admin.close()

    tenant = browser.new_context(viewport={"width": 1280, "height": 800})
    page = tenant.new_page()
    sign_in(page, world.console.url, world.viewer(env.ns))
    rows = page.locator("#clusters tbody tr[data-cluster]")
    assert rows.count() == 1 and rows.first.get_attribute("data-cluster") == f"{env.ns}/prod-1"
    assert "hidden-1" not in page.content() and world.other not in page.content()
    checked(page, "fleet", folder)

    page.click(f"a[href='/clusters/{env.ns}/prod-1']")
    page.wait_for_selector("#runs")
    assert "Ready" in page.inner_text("#state")
    assert page.inner_text("#resources").startswith(f"stack {env.ns}.prod-1  (cluster {env.ns}/prod-1, ")
    checked(page, "cluster", folder)
    page.locator("#runs tbody a").first.click()
    page.wait_for_selector("#diff")
    assert "+ pulumi-python:dynamic:Resource prod-1-thing" in page.inner_text("#diff")
    assert "Resources:" in page.inner_text("#log")
    checked(page, "run", folder)

    # Live: the cluster turns Stalled (its account is not its namespace's) and the page shows it, not reloaded.
    page.goto(world.console.url + f"/clusters/{env.ns}/prod-1")
    page.wait_for_selector("#runs")
    page.evaluate("window.notReloaded = true")
    page.wait_for_function("() => document.body.dataset.stream === 'open'")
    env.patch("prod-1", {"spec": {"accountID": "999999999999"}})
    changed = wait_until(lambda: env.reason("prod-1") if env.condition("prod-1", "Stalled") and
                         env.condition("prod-1", "Stalled")["status"] == "True" else None, 30,
                         what="the service to refuse the cluster")
    seen = time.monotonic()
    page.wait_for_function("() => document.getElementById('state').textContent.includes('Stalled')",
                           timeout=LIVE_WITHIN * 1000)
    assert time.monotonic() - seen < LIVE_WITHIN
    assert page.evaluate("window.notReloaded") is True and changed in page.inner_text("#state")

    page.goto(world.console.url + "/runs")
    checked(page, "runs", folder)
    tenant.close()


def mesh_example(world: ConsoleWorld) -> tuple[str, dict[str, str]]:
    """examples/mesh on the server under names of this test's own: the hub and each namespace renamed."""
    suffix = uuid.uuid4().hex[:6]
    renamed = {"acme": f"acme-{suffix}", "globex": f"globex-{suffix}"}
    docs = [d for f in sorted((ROOT / "examples" / "mesh" / "clusters").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    hub = yaml.safe_load((ROOT / "examples" / "mesh" / "hub.yaml").read_text())
    hub["metadata"]["name"] = f"mesh-{suffix}"
    hub["spec"].setdefault("tenancy", {})["sharedAccounts"] = ["222222222222", "333333333333"]
    for group in hub["spec"]["mesh"]["groups"].values():
        group["namespaces"] = [renamed.get(n, n) for n in group.get("namespaces") or []]
    custom = world.env.custom
    custom.create_cluster_custom_object(GROUP, VERSION, "hubconfigs", hub)
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = renamed[doc["metadata"]["name"]]
            world.env.core.create_namespace(doc)
    for doc in docs:
        if doc["kind"] == "HubCluster":
            doc["metadata"]["namespace"] = renamed[doc["metadata"]["namespace"]]
            doc["metadata"].pop("creationTimestamp", None)
            custom.create_namespaced_custom_object(GROUP, VERSION, doc["metadata"]["namespace"], "hubclusters", doc)
    return hub["metadata"]["name"], renamed


def test_the_mesh_page_of_the_mesh_example(console_world: ConsoleWorld, browser, kube_apiserver,  # noqa: F811
                                           tmp_path: Path):
    world = console_world
    hub, renamed = mesh_example(world)
    world.console.stop()
    world.console = start_console(world.api_client, namespace=world.env.system_namespace, hub_name=hub)
    folder = shots(tmp_path)

    admin = browser.new_context(viewport={"width": 1280, "height": 900})
    page = admin.new_page()
    sign_in(page, world.console.url, kube_apiserver.token)
    page.goto(world.console.url + "/mesh")
    svg = page.locator("figure.mesh svg").first
    assert svg.count() == 1, page.inner_text("#main")
    drawn = page.inner_html("#main")
    assert f"{renamed['acme']}/pay-use1" in drawn and f"{renamed['globex']}/ledger-euw1" in drawn
    checked(page, "mesh", folder, focus="figure.mesh a")
    page.locator(f"figure.mesh a[href='/clusters/{renamed['acme']}/pay-use1']").first.click()
    page.wait_for_selector("#runs")
    assert page.url.endswith(f"/clusters/{renamed['acme']}/pay-use1")
    # A pair's owner (its later joiner) builds the peer's side too, in the peer's account: find one across tenants.
    accounts = {"acme": "222222222222", "globex": "333333333333"}
    members = {"acme": ("pay-use1", "pay-euw1"), "globex": ("ledger-use1", "ledger-euw1")}
    owner = None
    for tenant, names in members.items():
        other = next(t for t in accounts if t != tenant)
        for name in names:
            page.goto(world.console.url + f"/clusters/{renamed[tenant]}/{name}")
            if f"[{accounts[other]} " in page.inner_text("#resources"):
                owner = (tenant, name, other)
    assert owner is not None, "no stack builds another tenant's side of a pair"
    admin.close()

    tenant = browser.new_context()
    page = tenant.new_page()
    sign_in(page, world.console.url, world.viewer(renamed["acme"]))
    page.goto(world.console.url + "/mesh")
    drawn = page.inner_html("#main")
    assert f"{renamed['acme']}/pay-use1" in drawn
    assert renamed["globex"] not in drawn and "333333333333" not in drawn and "ledger" not in drawn
    tenant.close()

    tenant = browser.new_context()  # the pair owner's tenant reads its tree without the peer's IDs
    page = tenant.new_page()
    mine, name, other = owner
    sign_in(page, world.console.url, world.viewer(renamed[mine]))
    page.goto(world.console.url + f"/clusters/{renamed[mine]}/{name}")
    tree = page.inner_text("#resources")
    assert f"stack {renamed[mine]}.{name}" in tree and f"[{accounts[mine]} " in tree
    assert accounts[other] not in tree and "[redacted" in tree
    assert f"+{renamed[mine]}.{name}" in tree or f"mesh-{renamed[mine]}.{name}+" in tree  # the pair's name stays
    checked(page, "cluster-mesh", folder)
    tenant.close()


def test_screenshots_exist_for_every_page_the_docs_show():
    """docs/console.md shows each page; the pictures it links are the tests' own."""
    text = (ROOT / "docs" / "console.md").read_text()
    for name in ("sign-in", "fleet", "fleet-admin", "cluster", "run", "runs", "mesh"):
        assert f"console/{name}.png" in text and (ROOT / "docs" / "console" / f"{name}.png").is_file(), name


