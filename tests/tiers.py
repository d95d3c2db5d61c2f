"""The two tiers (docs/testing.md). A test is `live` when it starts anything outside the pytest process: a real
engine (kube-apiserver, etcd, the pulumi CLI, Gitea, HAProxy, PostgreSQL, promtool, kubectl, go), a server
(moto_server), a browser (Chromium), or the project's own CLI as a subprocess. Everything else is the fast tier:
pure, direct and kmock tests, in-process only (`./dev test --fast`, `pytest -m "not live"`).

Tests that take one of REAL_ENGINE_FIXTURES are marked `live` here; others say `@pytest.mark.live` (or a module's
`pytestmark`). The rule is enforced: a test of the fast tier that starts a process fails, naming the process, so
the fast tier stays fast and needs only the venv.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Fixtures that start a process: a real engine built by scripts/tools.sh, a system package's server, moto_server,
# the browser (Chromium and Playwright's driver, tests/browser.py).
REAL_ENGINE_FIXTURES = {"kube_apiserver", "kube_apiserver_nocache", "kube_apiserver_alone", "kube_apiserver_gc",
                        "kube_apiserver_alone_gc", "pulumi_cli", "gitea", "fresh_gitea", "postgres_url",
                        "moto_server", "moto", "browser", "page"}

RECORD = "HUBWRIGHT_RECORD_SPAWNS"  # a file: record the fast-tier tests that start a process, instead of failing


# Servers that idle at a cost (a kube-apiserver burns CPU doing nothing): under pytest-xdist their tests share one
# worker, so one such server runs, not one per worker. A test with a module-scoped fixture is grouped with its
# file (the fixture starts once); any other goes to whichever worker is free. ./dev test runs `--dist loadgroup`.
# release_dist (tests/release_build.py): one `make release` for the image's, the zipapp's and the release's tests,
# on one worker, so the other is never left waiting on its lock.
PINNED_SERVERS = ("kube_apiserver_nocache", "kube_apiserver_gc", "release_dist")


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config, items):
    """Every test that starts a real engine is `live`, whichever file it is in; each gets its xdist group.

    Around the other plugins' hooks: a pytest-xdist worker names each test by its group (`nodeid@group`, which
    its scheduler keys on) in a hook of its own, so the groups are marked before it runs and checked after. The
    check is loud: with pytest 9.2 the name did not take (pytest-xdist 3.8 writes Item._nodeid, which pytest
    9.2 no longer reads), every module's tests went to both workers and its module-scoped servers started twice."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if REAL_ENGINE_FIXTURES & fixtures:
            item.add_marker(pytest.mark.live)
        pinned = [name for name in PINNED_SERVERS if name in fixtures]
        if pinned:
            item.add_marker(pytest.mark.xdist_group(pinned[0]))
        elif _module_fixtures(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        # else no group: the test goes to whichever worker is free (a file of slow tests is no long pole)
    yield
    if config.getoption("loadgroup", default=False):  # set in a worker of `--dist loadgroup`
        lost = [item.nodeid for item in items if _group(item) and not item.nodeid.endswith(f"@{_group(item)}")]
        if lost:  # said on the worker's stderr (the terminal's): pytest-xdist reports only its own assertion
            said = (f"pytest-xdist did not group {len(lost)} tests (first: {lost[0]}): --dist loadgroup would run a "
                    "module's tests on several workers, its servers started on each; the pytest and pytest-xdist of "
                    "requirements-dev.txt do not work together")
            sys.__stderr__.write(f"\nERROR: {said}\n")
            raise pytest.UsageError(said)


def _group(item) -> str:
    """The name pytest-xdist gives the test's groups (joined as it joins them); "" for none."""
    return "_".join(sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")}))


def _module_fixtures(item) -> bool:
    """The test uses a fixture that lives for its module (or class): its file's tests belong on one worker."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(definition.scope in ("module", "class", "package")
                                    for definitions in info.name2fixturedefs.values() for definition in definitions)


@pytest.fixture(autouse=True)
def _fast_tier_stays_in_process(request, monkeypatch):
    """A test not marked `live` may not start a process (see the module docstring)."""
    if request.node.get_closest_marker("live") is not None:
        yield
        return
    real_init = subprocess.Popen.__init__
    record = os.environ.get(RECORD)

    def refuse(self, args, *rest, **kwargs):
        if record:
            with open(record, "a") as out:
                out.write(f"{request.node.nodeid}\t{args!r:.200}\n")
            return real_init(self, args, *rest, **kwargs)
        raise AssertionError(f"{request.node.nodeid} is in the fast tier but starts a process ({args!r:.200}): "
                             "mark it @pytest.mark.live (docs/testing.md, tests/tiers.py)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    yield


def examples(full: int) -> int:
    """A property test's example count: `full` in the whole suite, a fifth (at least 5) in the fast tier
    (`./dev test --fast` sets HUBWRIGHT_TIER=fast). The oracles still run there, on fewer generated fleets."""
    return max(5, full // 5) if os.environ.get("HUBWRIGHT_TIER") == "fast" else full
