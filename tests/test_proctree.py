"""proctree.descendants, the walk the worker kills its run's tree by (automation/adapters/engine/proctree.py)."""
from __future__ import annotations

from automation.adapters.engine import proctree

# worker 10 -> pulumi CLI 20 (killed: a zombie while its other threads exit) -> plugin's sh 30 -> python3 40;
# 50: a zombie child of the worker with no children; 60: someone else's.
TABLE = {10: ("S", 1), 20: ("Z", 10), 30: ("S", 20), 40: ("S", 30), 50: ("Z", 10), 60: ("S", 1)}


def test_the_walk_goes_through_a_zombie_parent_to_its_live_children(monkeypatch):
    """Seen in CI: the killed CLI showed as a zombie before its plugin was re-parented to the worker; a walk that
    skipped zombies found no descendant, the worker exited, and the plugin lived on."""
    monkeypatch.setattr(proctree, "_processes", lambda: dict(TABLE))
    assert proctree.descendants(10) == [30, 40]
    assert proctree.parents() == {10: 1, 30: 20, 40: 30, 60: 1}  # live processes only, as before


def test_a_pid_reused_during_the_read_cannot_make_the_walk_loop(monkeypatch):
    monkeypatch.setattr(proctree, "_processes", lambda: {10: ("S", 30), 20: ("S", 10), 30: ("S", 20)})
    assert proctree.descendants(10) == [20, 30]
