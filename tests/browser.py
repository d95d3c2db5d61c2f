"""A real browser for the console's tests: Debian's Chromium driven by Playwright, with axe-core's accessibility
checks and a keyboard walk.

What it needs, both installed by ``./dev setup``: Chromium at ``/usr/bin/chromium`` (the Debian package
``chromium``, scripts/setup.sh; Playwright's own browser download is not served here, so ``playwright install`` is
never run and Playwright is told where Chromium is) and axe-core's ``axe.min.js`` at
``.tools/share/axe-core/axe.min.js`` (scripts/tools.sh fetches the pinned npm package into $HUBWRIGHT_CACHE and links
it there). Without either, the ``browser`` fixture skips saying which and what installs it; ``./dev test`` (and CI)
forbid skips (HUBWRIGHT_FORBID_SKIPS=1), so there the test fails.

Fixtures (registered in tests/conftest.py; a test that takes either is ``live``, tests/tiers.py):

* ``browser`` (session): one headless Chromium per pytest process (per xdist worker), closed at the end.
  Playwright runs Chromium with ``--no-sandbox`` (its default, which running as root needs) and
  ``--disable-dev-shm-usage`` among its own flags; none is added here. (Debian's /usr/bin/chromium wrapper may print
  ``[: ...: unexpected operator`` from its /dev/shm check: harmless.) Playwright's event loop is parked outside the
  tests that take it (see ``_park`` below): the other tests of the worker run their own event loops as if no
  browser were there, and a browser test cannot run one in the main thread.
* ``page`` (function): a page in a browser context of its own, so every test starts with no cookies, no storage
  and no cache; closed after the test. The page's Content-Security-Policy is enforced (no ``bypass_csp``): the
  console is tested under the CSP it serves.

Helpers:

* ``axe_violations(page, impacts=("serious", "critical"), options=None) -> list[dict]``: axe-core run on the page as
  it is now (and its frames), the violations of those impacts, each axe's own result (``id``, ``impact``, ``help``,
  ``helpUrl``, ``nodes`` with each node's ``target`` and ``html``); ``options`` go to ``axe.run`` (``{"runOnly":
  ["wcag2a", "wcag2aa"]}``). ``describe(violations)`` makes them one line each, for an assertion's message.
  axe is put into the page by evaluating the file's text (``page.evaluate``), not with ``page.add_script_tag``: a
  script tag's content is an inline script, which the console's CSP (``script-src 'self'``) refuses (and reports
  as a violation in the console), while an evaluation from the driver (DevTools) is outside the page's CSP. So
  the check needs no ``bypass_csp`` and leaves no CSP report behind (tests/test_browser_harness.py shows both).
* ``keyboard_reachable(page, selector, max_tabs=100) -> bool``: presses Tab until focus lands on the element
  ``selector`` names (or inside it), True; False when focus has gone once round every element Tab reaches
  without landing there, or after ``max_tabs`` presses.

A test::

    from playwright.sync_api import expect
    from tests.browser import axe_violations, describe, keyboard_reachable

    def test_the_sign_in_page(page, console_world):   # tests/console_env.py: the console on the real API server
        page.goto(console_world.console.url + "/login")
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()   # playwright.sync_api.expect waits
        assert (found := axe_violations(page)) == [], describe(found)
        assert keyboard_reachable(page, "#token")

Run one: ``./dev test tests/test_browser_harness.py -p no:xdist``. There is no display here to watch a test in:
take ``page.screenshot(path=...)`` and look at the PNG.
"""
from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
AXE = ROOT / ".tools" / "share" / "axe-core" / "axe.min.js"
IMPACTS = ("minor", "moderate", "serious", "critical")  # axe's, least first


def missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    gaps = []
    if not os.access(CHROMIUM, os.X_OK):
        gaps.append(f"Chromium ({CHROMIUM}): apt-get install chromium, or ./dev setup")
    if not AXE.is_file():
        gaps.append(f"axe-core ({AXE.relative_to(ROOT)}): ./dev setup (scripts/tools.sh fetches it)")
    return "; ".join(gaps) or None


# Playwright's sync API and every other test in the process share one thread, and so asyncio's "running loop"
# (a per-thread setting). Between two sync calls Playwright leaves its own event loop set as the running one: its
# dispatcher is suspended inside that loop, and the next call resumes it there. Left so, the session's browser
# would break every later test that runs an event loop of its own (`asyncio.run`: "cannot be called from a running
# event loop"; a pytest-asyncio test: "Runner.run() cannot be called from a running event loop"). So the loop is
# parked: it is the running loop only while a test that takes `browser` (`page` does) runs its body, and while a
# fixture built on `browser` is set up; at any other time no loop is running. A plain Playwright call made while
# it is parked (a fixture's teardown) sets the loop for the call's duration (_wait_anywhere). What that leaves
# out: a browser test cannot itself run an event loop in the main thread (run the server under test in a thread);
# `page.expect_*(...)` blocks belong in a test's body or a fixture's setup, not in a teardown; and a test takes the
# fixture as an argument (or through another fixture), not by request.getfixturevalue, so that it is seen to use it.
_playwright: dict[str, Any] = {}  # "loop": Playwright's event loop while the session's browser is up


def _park(running: bool) -> None:
    """Make Playwright's loop the thread's running loop (True), or no loop at all (False); no-op without it."""
    loop = _playwright.get("loop")
    if loop is None or loop.is_closed():
        return
    current = asyncio._get_running_loop()
    if running and current is None:
        asyncio._set_running_loop(loop)
    elif not running and current is loop:
        asyncio._set_running_loop(None)


def _built_on_browser(fixturedef: Any, request: Any) -> bool:
    """The fixture is `browser` or needs it, directly or through other fixtures (of the test that asks for it)."""
    info = getattr(getattr(request, "_pyfuncitem", None), "_fixtureinfo", None)
    definitions = info.name2fixturedefs if info is not None else {}
    seen: set[str] = set()
    todo = [fixturedef.argname]
    while todo:
        name = todo.pop()
        if name == "browser":
            return True
        if name in seen:
            continue
        seen.add(name)
        found = definitions.get(name)
        todo.extend(fixturedef.argnames if name == fixturedef.argname else found[-1].argnames if found else ())
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if _playwright:
        _park(_built_on_browser(fixturedef, request))
    yield
    _park(False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if _playwright:
        _park("browser" in getattr(item, "fixturenames", ()))
    yield
    _park(False)


def _wait_anywhere() -> None:
    """Let a Playwright sync call made while its loop is parked set it for the call's duration, then park it."""
    from playwright._impl import _sync_base

    wait = _sync_base.wait_for_future
    if getattr(wait, "parks", False):
        return

    def _wait_in_playwrights_loop(loop, dispatcher_fiber, future):
        if asyncio._get_running_loop() is not None:  # a browser test's call, or one from inside Playwright
            return wait(loop, dispatcher_fiber, future)
        asyncio._set_running_loop(loop)
        try:
            return wait(loop, dispatcher_fiber, future)
        finally:
            if asyncio._get_running_loop() is loop:
                asyncio._set_running_loop(None)

    _wait_in_playwrights_loop.parks = True  # type: ignore[attr-defined]
    _sync_base.wait_for_future = _wait_in_playwrights_loop


@pytest.fixture(scope="session")
def browser() -> Iterator["Browser"]:
    """One headless Debian Chromium, driven by Playwright, for the whole run (of this process)."""
    why = missing()
    if why:
        pytest.skip(f"the browser tests need {why}")
    from playwright.sync_api import sync_playwright

    _wait_anywhere()
    manager = sync_playwright()
    playwright = manager.start()  # with no loop running (parked): Playwright makes its own, and leaves it running
    loop = _playwright["loop"] = asyncio._get_running_loop()
    assert loop is not None, "Playwright's sync API no longer leaves its loop running: see _park in tests/browser.py"
    try:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield chromium
        finally:
            chromium.close()  # (a plain call: _wait_anywhere sets the loop for it)
    finally:
        # Stopping resumes the dispatcher inside the loop, so the loop must be running, unless the dispatcher has
        # died already (the driver went away): then the loop is only closed, and must not be.
        dispatcher = getattr(manager, "_dispatcher_fiber", None)
        _park(dispatcher is not None and not dispatcher.dead)
        try:
            manager.__exit__(None, None, None)  # runs the loop to its end, and closes it
        finally:
            _playwright.clear()
            if asyncio._get_running_loop() is loop:
                asyncio._set_running_loop(None)


@pytest.fixture
def page(browser: "Browser") -> Iterator["Page"]:
    """A page in a fresh browser context (no cookies, storage or cache from another test), CSP enforced."""
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


@functools.cache
def _axe_source() -> str:
    # `void 0` last: the evaluation's value is not sent back (the script's last expression could be axe itself).
    return AXE.read_text() + "\n;void 0;"


def axe_violations(page: "Page", impacts: Sequence[str] = ("serious", "critical"),
                   options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """axe-core's violations of the page as it is now whose impact is one of `impacts` (axe's own result dicts)."""
    unknown = set(impacts) - set(IMPACTS)
    if unknown:
        raise ValueError(f"unknown axe impacts {sorted(unknown)}: axe's are {IMPACTS}")
    for frame in page.frames:  # axe.run on the top page also asks each frame's axe (else: "frame-tested")
        if frame.is_detached():
            continue
        if not frame.evaluate("() => typeof window.axe === 'object'"):
            frame.evaluate(_axe_source())
    results = page.evaluate("options => window.axe.run(document, options)",
                            {"resultTypes": ["violations"], **(options or {})})
    return [violation for violation in results["violations"] if violation.get("impact") in impacts]


def describe(violations: Sequence[dict[str, Any]]) -> str:
    """One line per violation: its impact, rule, what it asks for, and the elements that fail it."""
    return "\n".join(f"{v.get('impact')} {v['id']}: {v['help']} ({v['helpUrl']}): "
                     + ", ".join(" ".join(map(str, node["target"])) for node in v["nodes"]) for v in violations)


# The element that has the focus, inside open shadow roots; null for none (the body, or the document has none).
_FOCUSED = """() => {
    let element = document.activeElement;
    while (element && element.shadowRoot && element.shadowRoot.activeElement) {
        element = element.shadowRoot.activeElement;
    }
    return element === document.body || element === document.documentElement ? null : element;
}"""
# Whether the focused element is the element or inside it (across shadow roots: a shadow root's host contains it).
_WITHIN = """(element, focused) => {
    for (let node = focused; node; node = node.parentNode || node.host) {
        if (node === element) return true;
    }
    return false;
}"""


def keyboard_reachable(page: "Page", selector: str, max_tabs: int = 100) -> bool:
    """Whether pressing Tab brings the focus onto the element `selector` names (one element: Playwright's strict
    locator), or into it. The walk goes once round what Tab reaches, from wherever the focus is; elements in
    iframes are not followed."""
    target = page.locator(selector).element_handle()
    first = None
    try:
        for _ in range(max_tabs):
            page.keyboard.press("Tab")
            focused = page.evaluate_handle(_FOCUSED)
            if target.evaluate(_WITHIN, focused):
                focused.dispose()
                return True
            if first is None and focused.evaluate("focused => focused !== null"):
                first = focused  # where the walk started; seen again: it has gone round once
                continue
            again = first is not None and first.evaluate("(first, focused) => first === focused", focused)
            focused.dispose()
            if again:
                return False  # round once: the element is not in the Tab order
        return False
    finally:
        target.dispose()
        if first is not None:
            first.dispose()
