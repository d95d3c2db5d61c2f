"""The legacy reading of a stack's applied inputs from its history (applied_inputs.from_history), on a made-up
history: how far back it reads, page by page. The real CLI's history is test_engine_drift_live.py's."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from automation.adapters.engine.applied_inputs import HISTORY_PAGE, HISTORY_WINDOW, from_history
from doubles.pulumi_programs import make_inputs

INPUTS = make_inputs()
KEY = "hubwright:inputs"


def history(failed: int, *, last: str = "update") -> list[SimpleNamespace]:
    """`failed` failed updates, newest first, then one successful `last` (an update holding INPUTS, or a destroy)."""
    entries = [SimpleNamespace(result="failed", kind="update", config={}) for _ in range(failed)]
    return entries + [SimpleNamespace(result="succeeded", kind=last, config={KEY: {"value": INPUTS.to_config()}})]


def pager(entries: list[SimpleNamespace], asked: list[int]):
    def page(number: int) -> list[SimpleNamespace]:
        asked.append(number)
        return entries[(number - 1) * HISTORY_PAGE:number * HISTORY_PAGE]
    return page


@pytest.mark.parametrize("failed", [0, 3, HISTORY_PAGE - 1, HISTORY_PAGE, HISTORY_PAGE + 4, HISTORY_WINDOW - 1])
def test_the_newest_success_within_the_window_is_found_reading_only_the_pages_up_to_it(failed):
    asked: list[int] = []
    assert from_history("acme.prod-1", KEY, pager(history(failed), asked)) == INPUTS
    assert asked == list(range(1, failed // HISTORY_PAGE + 2))


@pytest.mark.parametrize("window", [1, 3, HISTORY_PAGE, HISTORY_PAGE + 5, HISTORY_WINDOW])
def test_a_success_just_past_the_window_is_not_read(window):
    """`window` failed updates fill the window; one fewer leaves the success its last entry."""
    asked: list[int] = []
    assert from_history("acme.prod-1", KEY, pager(history(window), asked), window=window) is None
    assert len(asked) == -(-window // HISTORY_PAGE)  # no page beyond the window
    assert from_history("acme.prod-1", KEY, pager(history(window - 1), []), window=window) == INPUTS


def test_a_newer_successful_destroy_means_nothing_is_applied():
    assert from_history("acme.prod-1", KEY, pager(history(2, last="destroy"), [])) is None


def test_a_short_history_ends_the_reading():
    asked: list[int] = []
    assert from_history("acme.prod-1", KEY, pager(history(2)[:2], asked)) is None  # two failures, nothing else
    assert asked == [1]
