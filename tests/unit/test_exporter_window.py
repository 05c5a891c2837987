"""Windowed counter increases over consistent segments: a counter going down or a forced reset (PID change)
starts a new segment for every counter; points older than twice the window leave it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specops.exporter.window import CounterWindow


def test_increase_and_ratio():
    w = CounterWindow(60)
    for t, (a, d) in enumerate([(0, 0), (30, 40), (60, 80)]):
        w.observe(t * 10.0, {"a": a, "d": d})
    assert w.increase("a") == 60 and w.ratio("a", "d") == 0.75


def test_a_counter_going_down_starts_a_new_segment_for_all():
    # (was: Prometheus' rule, counting the new value after a reset; issue 13 wants one consistent segment)
    w = CounterWindow(600)
    for t, (c, d) in enumerate([(100, 1), (150, 2), (10, 3), (40, 4)]):
        w.observe(float(t), {"c": c, "d": d})
    assert w.increase("c") == 30 and w.increase("d") == 1  # both since the reset only


def test_forced_reset_even_when_value_went_up():
    w = CounterWindow(600)
    w.observe(0.0, {"c": 100})
    w.observe(1.0, {"c": 120}, reset=True)  # new process already past the old value
    assert w.increase("c") is None  # one point in the new segment
    w.observe(2.0, {"c": 125})
    assert w.increase("c") == 5


def test_another_key_set_or_source_starts_a_new_segment():
    w = CounterWindow(600)
    w.observe(0.0, {"c": 1, "d": 1})
    w.observe(1.0, {"c": 2})
    assert w.increase("c") is None
    w.observe(2.0, {"c": 3}, source="log")
    assert w.increase("c") is None


def test_a_series_appearing_at_its_first_increment_keeps_the_segment():
    # llama-server's per-position acceptance series appear when first incremented: a fresh server's first
    # speculative request must give figures at once (the exporter's live restart test waited forever)
    w = CounterWindow(600)
    w.observe(0.0, {"accepted": 0, "drafted": 0})
    assert not w.observe(1.0, {"accepted": 6, "drafted": 8, "pos0": 4})
    assert w.ratio("accepted", "drafted") == 0.75 and w.increase("pos0") == 4
    assert w.observe(2.0, {"accepted": 7, "drafted": 9})  # a series vanished: a new segment
    assert w.increase("accepted") is None


def test_points_older_than_twice_the_window_leave_it():
    w = CounterWindow(10)
    w.observe(0.0, {"c": 0})
    w.observe(1.0, {"c": 1})
    assert w.live_until() == 20.0
    w.observe(30.0, {"c": 5})
    assert w.increase("c") is None and w.live_until() == float("-inf")


def test_old_points_leave_the_window():
    w = CounterWindow(10)
    for t in range(0, 100, 5):
        w.observe(float(t), {"c": t * 2.0})
    assert w.increase("c") == 20.0


def test_no_data_and_zero_denominator():
    w = CounterWindow(10)
    assert w.increase("c") is None
    w.observe(0, {"a": 1, "d": 5})
    w.observe(1, {"a": 1, "d": 5})
    assert w.ratio("a", "d") is None


@given(st.lists(st.floats(min_value=0, max_value=1e12, allow_nan=False), min_size=2, max_size=50))
def test_increase_is_never_negative(values):
    w = CounterWindow(1e9)
    for t, v in enumerate(values):
        w.observe(float(t), {"c": v})
    inc = w.increase("c")
    assert inc is None or inc >= 0


# ---- issue 29: a decrease and the jump back after it -----------------------------------------------------------

def test_a_jump_back_to_the_level_before_a_decrease_starts_a_new_segment():
    # a proxy flapping between two servers: A, A, B (lower), A again; A's own traffic is +10 a pass
    w = CounterWindow(600)
    for t, c in enumerate([1000, 1010]):
        w.observe(float(t), {"c": c})
    assert w.observe(2.0, {"c": 50})  # B: went down, the new segment's first point
    assert w.increase("c") is None
    assert w.observe(3.0, {"c": 1020})  # A again: not 970 of traffic but the old counters back
    assert w.increase("c") is None
    assert not w.observe(4.0, {"c": 1030})
    assert w.increase("c") == 10


def test_after_a_decrease_the_decreased_pass_is_the_baseline():
    # a restarted server: its own traffic after the restart counts from its first pass
    w = CounterWindow(600)
    w.observe(0.0, {"c": 1000, "d": 100})
    assert w.observe(1.0, {"c": 5, "d": 1})
    assert not w.observe(2.0, {"c": 15, "d": 3})
    assert w.increase("c") == 10 and w.increase("d") == 2


def test_a_decrease_is_seen_through_a_restart_of_the_window():
    # A, (a bad pass: the caller restarts the window), B lower, then A again: still a jump back
    w = CounterWindow(600)
    w.observe(0.0, {"c": 1000})
    w.restart()
    assert w.observe(2.0, {"c": 50})
    w.restart()
    assert w.observe(4.0, {"c": 60})  # one point after a restart: a new segment anyway
    assert w.observe(5.0, {"c": 1040})  # back to A's level: a new segment, not 980 of traffic
    assert w.increase("c") is None
    assert not w.observe(6.0, {"c": 1050}) and w.increase("c") == 10


def test_the_level_before_a_decrease_is_forgotten_once_reached():
    w = CounterWindow(600)
    w.observe(0.0, {"c": 100})
    w.observe(1.0, {"c": 10})
    assert w.observe(2.0, {"c": 100})  # reached: one new segment
    assert not w.observe(3.0, {"c": 120})  # and no more
    assert w.increase("c") == 20


def test_reference_is_the_last_good_pass_of_the_same_counters():
    w = CounterWindow(600)
    assert w.reference({"c": 1}) is None
    w.observe(0.0, {"c": 10})
    w.restart()  # a bad pass between: the increase is still checked against the last good pass
    assert w.reference({"c": 12}) == {"c": 10}
    assert w.reference({"c": 5}) is None  # went down: no increase to check
    assert w.reference({"c": 12}, reset=True) is None and w.reference({"c": 12}, source="log") is None
    w.refuse({"c": 40})
    assert w.reference({"c": 41}) == {"c": 40} and w.increase("c") is None


def test_every_level_from_before_a_decrease_is_remembered():
    # A; a restarted B; B restarted again and growing back past its first life's level; then A comes back
    w = CounterWindow(600)
    w.observe(0.0, {"c": 1000})
    assert w.observe(1.0, {"c": 0})  # level 1000
    w.observe(2.0, {"c": 5})
    assert w.observe(3.0, {"c": 0})  # level 5 as well
    assert w.observe(4.0, {"c": 5})  # 5 reached: one new segment, 1000 still remembered
    assert not w.observe(5.0, {"c": 9})
    assert w.observe(6.0, {"c": 1010})  # A is back: not 1001 of traffic
    assert not w.observe(7.0, {"c": 1020}) and w.increase("c") == 10
