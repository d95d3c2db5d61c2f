"""Shared pytest setup: fixtures live in their own modules and are registered here."""

import os

import pytest

pytest_plugins = ["tests.moto_server", "tests.pulumi_live_programs", "tests.gitea", "tests.browser", "tests.tiers"]


@pytest.fixture(autouse=True)
def _own_plan_cache(tmp_path_factory, monkeypatch):
    """Every test plans with an empty cache of its own (automation.adapters.engine.plan_cache): a plan one test
    makes never answers another's, and no test reads or fills the machine's."""
    monkeypatch.setenv("HUBWRIGHT_PLAN_CACHE", str(tmp_path_factory.mktemp("plan-cache")))


def pytest_sessionfinish(session, exitstatus):
    """With HUBWRIGHT_FORBID_SKIPS=1 (CI, after scripts/tools.sh), a skipped test fails the run."""
    if os.environ.get("HUBWRIGHT_FORBID_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"HUBWRIGHT_FORBID_SKIPS=1: {len(skipped)} test(s) skipped; every test must run here",
                            red=True)
        session.exitstatus = 1
