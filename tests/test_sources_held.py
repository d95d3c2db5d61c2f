"""The condition `hubwright.io/SourceHeld` a held source carries (stacks.sources.held): said once per fact, its
transition time kept while its status stays, a release said only where a hold was, the other conditions kept."""
from __future__ import annotations

from datetime import datetime, timezone

from stacks.sources.held import HELD_CONDITION, held_condition, with_held, without_held

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)
T1 = datetime(2026, 11, 29, 10, 5, tzinfo=timezone.utc)
THEIRS = {"type": "Available", "status": "False", "reason": "NotAvailable"}


def source(*conditions: dict) -> dict:
    return {"metadata": {"name": "web-1"}, "status": {"conditions": list(conditions)}}


def test_a_hold_is_added_beside_the_other_projects_conditions():
    out = with_held(source(THEIRS), held=True, reason="WaitingForPeers", message="waits for a", now=T0)
    assert out == [THEIRS, {"type": HELD_CONDITION, "status": "True", "reason": "WaitingForPeers",
                            "message": "waits for a", "lastTransitionTime": "2026-11-29T10:00:00Z"}]


def test_the_same_fact_is_not_written_again_and_a_new_message_keeps_the_transition_time():
    first = source(THEIRS, *with_held(source(), held=True, reason="WaitingForPeers", message="a", now=T0) or [])
    assert with_held(first, held=True, reason="WaitingForPeers", message="a", now=T1) is None
    moved = with_held(first, held=True, reason="WaitingForPeers", message="b", now=T1)
    assert held_condition(source(*moved or []))["lastTransitionTime"] == "2026-11-29T10:00:00Z"
    released = with_held(source(*moved or []), held=False, reason="Released", message="released", now=T1)
    assert held_condition(source(*released or [])) == {
        "type": HELD_CONDITION, "status": "False", "reason": "Released", "message": "released",
        "lastTransitionTime": "2026-11-29T10:05:00Z"}
    assert [c["type"] for c in released or []] == ["Available", HELD_CONDITION]


def test_a_release_is_said_only_where_a_hold_was():
    assert with_held(source(THEIRS), held=False, reason="Released", message="released", now=T0) is None


def test_taken_again_the_condition_goes_and_nothing_is_written_when_there_is_none():
    held = source(THEIRS, {"type": HELD_CONDITION, "status": "False", "reason": "Released"})
    assert without_held(held) == [THEIRS]
    assert without_held(source(THEIRS)) is None


def test_junk_in_the_status_is_an_answer_never_an_exception():
    for status in (None, "x", {"conditions": "x"}, {"conditions": [1, None, "y"]}):
        assert with_held({"status": status} if status is not None else {}, held=True, reason="R", message="m",
                         now=T0) is not None
