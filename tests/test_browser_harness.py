"""tests/browser.py itself: Debian's Chromium runs a page's own script under a strict CSP, axe-core finds what it
should (and nothing on a good page) without tripping that CSP, keyboard_reachable tells a Tab stop from an element
Tab never reaches, each test's page starts with no cookies, and the session's browser leaves the event loops of
the worker's other tests alone.

The pages come from a tiny static server on 127.0.0.1 in a thread of this process (the kernel's choice of port:
nothing else binds it), every response with the console's kind of CSP: ``default-src 'none'; script-src 'self'``.
"""
from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Error as PlaywrightError, Page, expect

from tests.browser import AXE, ROOT, axe_violations, describe, keyboard_reachable, missing

pytestmark = pytest.mark.live  # also marked by its fixtures (tests/tiers.py): it starts Chromium

CSP = "default-src 'none'; script-src 'self'"

# The good page: its own script (a file: 'self') says it ran; the inline one is refused by the CSP.
INDEX = b"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Harness</title><script src="/app.js" defer></script></head>
<body>
<main>
  <h1>Harness</h1>
  <p id="status">waiting</p>
  <p id="inline">inline script refused</p>
  <script>document.getElementById("inline").textContent = "inline script ran";</script>
  <a href="#top" id="first">First</a>
  <button type="button" id="save">Save</button>
  <button type="button" id="skipped" tabindex="-1">Not a Tab stop</button>
  <div id="clickable">A div with no tabindex</div>
  <label>Name <input id="name" type="text"></label>
</main>
</body>
</html>
"""
APP = b"""document.getElementById("status").textContent = "script ran";
document.getElementById("clickable").addEventListener("click", () => {});
"""
# The bad page: an image with no text alternative and a button with no name, both serious or worse in axe.
BAD = b"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Bad</title></head>
<body>
<main>
  <h1>Bad</h1>
  <img id="logo" width="10" height="10">
  <button type="button" id="nameless"></button>
</main>
</body>
</html>
"""
PAGES = {"/": ("text/html; charset=utf-8", INDEX), "/app.js": ("text/javascript", APP),
         "/bad": ("text/html; charset=utf-8", BAD)}


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = PAGES.get(self.path)
        if found is None:
            self.send_error(404)
            return
        kind, body = found
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The pages' base URL, served until the module is done."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, name="browser-harness-pages", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _console(page: Page) -> list[str]:
    """The page's console messages from now on, in order."""
    messages: list[str] = []
    page.on("console", lambda message: messages.append(message.text))
    return messages


def _flush(page: Page, marker: str) -> None:
    """Wait until every console message before this one has been seen (they arrive in order)."""
    with page.expect_console_message(lambda message: message.text == marker):
        page.evaluate("marker => console.log(marker)", marker)


def test_chromium_runs_the_pages_own_script_and_enforces_its_csp(page, site):
    response = page.goto(site + "/")
    assert response is not None and response.headers["content-security-policy"] == CSP
    expect(page.locator("#status")).to_have_text("script ran")  # waits, bounded: the deferred script ran
    # The inline script comes before the deferred one, so by now it would have run: the CSP refused it.
    expect(page.locator("#inline")).to_have_text("inline script refused")


def test_axe_finds_the_serious_violations_of_a_bad_page(page, site):
    page.goto(site + "/bad")
    found = axe_violations(page)
    assert {v["id"] for v in found} >= {"image-alt", "button-name"}, describe(found)
    assert all(v["impact"] in ("serious", "critical") for v in found)
    by_rule = {v["id"]: [" ".join(node["target"]) for node in v["nodes"]] for v in found}
    assert by_rule["image-alt"] == ["#logo"] and by_rule["button-name"] == ["#nameless"]
    assert "image-alt" in describe(found) and "#nameless" in describe(found)


def test_axe_finds_nothing_on_a_good_page_and_trips_no_csp(page, site):
    messages = _console(page)
    page.goto(site + "/")
    expect(page.locator("#status")).to_have_text("script ran")
    _flush(page, "before axe")
    before = len(messages)
    found = axe_violations(page)
    assert found == [], describe(found)
    assert axe_violations(page, impacts=("minor", "moderate", "serious", "critical")) == []  # axe is there: not again
    _flush(page, "after axe")
    assert [m for m in messages[before:] if "Content Security Policy" in m] == []
    assert any("Content Security Policy" in m for m in messages[:before])  # the inline script's report, seen


def test_a_script_tag_is_refused_by_the_csp_which_is_why_axe_is_evaluated(page, site):
    """The reason axe_violations evaluates axe.min.js instead of page.add_script_tag(path=...)."""
    page.goto(site + "/")
    with pytest.raises(PlaywrightError, match="Content Security Policy"):
        page.add_script_tag(path=str(AXE))


def test_axe_impacts_are_checked(page, site):
    page.goto(site + "/bad")
    with pytest.raises(ValueError, match="unknown axe impacts"):
        axe_violations(page, impacts=("severe",))
    assert {v["id"] for v in axe_violations(page, impacts=("minor",))}.isdisjoint({"image-alt", "button-name"})


def test_keyboard_reachable_tells_tab_stops_from_elements_tab_never_reaches(page, site):
    page.goto(site + "/")
    expect(page.locator("#status")).to_have_text("script ran")
    assert keyboard_reachable(page, "#save")
    assert keyboard_reachable(page, "#first")  # behind where the focus is: Tab goes round
    assert keyboard_reachable(page, "#name")
    assert keyboard_reachable(page, "main")  # focus inside it counts
    assert not keyboard_reachable(page, "#skipped")  # tabindex=-1
    assert not keyboard_reachable(page, "#clickable")  # a click handler makes no Tab stop


def test_keyboard_reachable_on_a_page_with_no_tab_stop(page):
    page.set_content("<p id=text>Nothing to focus</p>")
    assert not keyboard_reachable(page, "#text", max_tabs=10)


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_starts_with_no_cookies(page, site, turn):
    """Twice, on one worker (the module's server groups them): the first's cookie is not in the second's page."""
    assert page.context.cookies() == []
    page.context.add_cookies([{"name": "session", "value": f"turn-{turn}", "url": site}])
    page.goto(site + "/")
    assert page.evaluate("document.cookie") == f"session=turn-{turn}"


# A run of its own (a pytest in a subprocess, with tests/browser.py as its only plugin), in this order: browser tests
# and tests that run an event loop of their own; a fixture that runs one, set up for a browser test once the browser
# is up; a fixture built on `page` that waits on an event; a module-scoped context torn down after a test with no
# browser; and the session's browser closed after one too.
ASYNCIO_NEIGHBOURS = """
import asyncio

import pytest
from playwright.sync_api import expect


def test_1_browser(page):
    page.set_content("<p>one</p>")
    expect(page.locator("p")).to_have_text("one")


def test_2_asyncio_run_after_a_browser_test():
    assert asyncio.run(asyncio.sleep(0, "ran")) == "ran"


def test_3_an_event_loop_of_its_own():
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


def test_4_the_browser_again_waiting_on_an_event(page):
    with page.expect_console_message(lambda message: message.text == "again"):
        page.evaluate("console.log('again')")


@pytest.fixture(scope="module")
def served():
    return asyncio.run(asyncio.sleep(0, "served"))  # as a server's fixture might, in a browser test's setup


def test_5_a_browser_test_whose_other_fixture_runs_an_event_loop(served, page):
    page.set_content(f"<p>{served}</p>")
    expect(page.locator("p")).to_have_text("served")


@pytest.fixture
def greeted(page):
    with page.expect_console_message(lambda message: message.text == "hello"):
        page.evaluate("console.log('hello')")
    return page


def test_6_a_fixture_built_on_page_waits_on_an_event(greeted):
    assert greeted.evaluate("1 + 1") == 2


@pytest.fixture(scope="module")
def shared(browser):
    context = browser.new_context()
    yield context
    context.close()  # in test_8's teardown, which has no browser


def test_7_a_module_scoped_context(shared):
    shared.new_page().set_content("<p>seven</p>")


def test_8_asyncio_last():
    assert asyncio.run(asyncio.sleep(0, "ran")) == "ran"
"""


def test_the_sessions_browser_leaves_other_tests_event_loops_alone(tmp_path: Path):
    """Playwright's sync API leaves its event loop running between calls; tests/browser.py parks it outside browser
    tests, or every later test of the worker that runs an event loop (asyncio.run, pytest-asyncio) would fail."""
    why = missing()
    if why:
        pytest.skip(f"the browser tests need {why}")
    (tmp_path / "test_neighbours.py").write_text(ASYNCIO_NEIGHBOURS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "tests.browser", "test_neighbours.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 passed" in done.stdout, done.stdout
