"""Shared ingress runtime decisions, without HAProxy: which change is a map update, which needs a reload; batching."""
import pytest

from stacks.haproxy import CentralConfig, CentralSettings, Route, render_central
from automation.adapters.files.haproxy import Debouncer, Loaded, parse_show_proc, plan_change

MAP = "/run/ingress/clusters.map"
A, B, C = Route("a", "10.0.0.1:6443"), Route("b", "10.0.0.2:6443"), Route("c", "10.0.0.3:6443")


def central(*routes, **settings) -> CentralConfig:
    return render_central(CentralSettings(map_path=MAP, **settings), routes)


def test_an_unknown_running_config_is_reloaded():
    assert plan_change(None, central(A)).kind == "reload"


def test_the_same_config_changes_nothing():
    assert plan_change(Loaded.of(central(A, B)), central(B, A)).kind == "none"


def test_removing_a_cluster_is_a_map_deletion_without_reload():
    change = plan_change(Loaded.of(central(A, B, C)), central(A, C))
    assert (change.kind, change.commands) == ("runtime", (f"del map {MAP} b",))


def test_adding_a_cluster_whose_backend_is_not_loaded_reloads():
    change = plan_change(Loaded.of(central(A)), central(A, B))
    assert change.kind == "reload" and "cluster_b" in change.reason


def test_re_adding_a_removed_cluster_whose_backend_is_still_loaded_is_a_map_addition():
    loaded = Loaded.of(central(A, B))
    after_removal = Loaded(loaded.fixed, loaded.backends, central(A).routes())  # what runtime apply leaves
    change = plan_change(after_removal, central(A, B))
    assert (change.kind, change.commands) == ("runtime", (f"add map {MAP} b cluster_b",))


def test_a_changed_backend_or_frontend_reloads():
    loaded = Loaded.of(central(A, B))
    moved = Route("b", "10.0.0.9:6443")
    fenced = Route("b", "10.0.0.2:6443", ("10.0.0.0/8",))
    assert plan_change(loaded, central(A, moved)).kind == "reload"
    assert plan_change(loaded, central(A, fenced)).kind == "reload"
    assert plan_change(loaded, central(A, B, bind=":7443")).kind == "reload"


def test_a_map_value_pointing_elsewhere_is_set_in_place():
    rendered = central(A, B)
    remapped = CentralConfig(rendered.config, rendered.map.replace("b cluster_b", "b cluster_a"), MAP)
    change = plan_change(Loaded.of(rendered), remapped)
    assert (change.kind, change.commands) == ("runtime", (f"set map {MAP} b cluster_a",))


SHOW_PROC_26 = """#<PID>          <type>          <reloads>       <uptime>        <version>
21814           master          1 [failed: 0]   0d00h10m14s     2.6.12-1+deb12u4
# workers
12661           worker          0               0d00h00m00s     2.6.12-1+deb12u4
# old workers
21817           worker          1               0d00h10m14s     2.6.12-1+deb12u4
# programs

"""


def test_show_proc_gives_the_reload_counters_and_only_the_current_workers():
    procs = parse_show_proc(SHOW_PROC_26)
    assert (procs.reloads, procs.failed, procs.workers) == (1, 0, (12661,))


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_burst_of_changes_is_applied_once_with_the_last_value():
    clock, applied = Clock(), []
    debouncer = Debouncer(applied.append, quiet=2.0, max_delay=10.0, clock=clock)
    for value in range(5):  # one change every half second
        debouncer.offer(value)
        clock.now += 0.5
        assert not debouncer.flush()
    clock.now += 1.5
    assert debouncer.flush() and applied == [4]
    assert not debouncer.flush() and applied == [4]


def test_a_steady_stream_of_changes_is_still_applied_after_max_delay():
    clock, applied = Clock(), []
    debouncer = Debouncer(applied.append, quiet=2.0, max_delay=5.0, clock=clock)
    for value in range(20):
        debouncer.offer(value)
        debouncer.flush()
        clock.now += 1.0
    assert applied == [5, 11, 17]  # every max_delay seconds, never waiting for a quiet that never comes


def test_a_flush_that_lost_the_value_to_another_flush_applies_nothing():
    """Two threads flush at once: both find the value due, one takes and applies it; the other must not apply
    None (it did, until mypy pointed at the `# type: ignore` over it)."""
    clock, applied = Clock(), []

    class Racing(Debouncer):
        raced = False

        def due(self):
            due = super().due()
            if due and not self.raced:  # the other thread's flush runs between this one's due() and its take
                self.raced = True
                assert self.flush()
            return due

    debouncer = Racing(applied.append, quiet=1.0, clock=clock)
    debouncer.offer("cfg")
    clock.now = 1.0
    assert not debouncer.flush()
    assert applied == ["cfg"] and not debouncer.pending


def test_a_failed_apply_is_kept_for_the_next_flush():
    clock, calls = Clock(), []

    def apply(value):
        calls.append(value)
        if len(calls) == 1:
            raise OSError("master socket not there yet")

    debouncer = Debouncer(apply, quiet=1.0, clock=clock)
    debouncer.offer("cfg")
    clock.now = 1.0
    with pytest.raises(OSError):
        debouncer.flush()
    assert debouncer.pending and not debouncer.flush()  # waits another quiet period
    clock.now = 2.0
    assert debouncer.flush() and calls == ["cfg", "cfg"]
