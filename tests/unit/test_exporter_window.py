"""Windowed counter increases: Prometheus reset semantics, forced resets on PID change."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specops.exporter.window import CounterWindow


def test_increase_and_ratio():
    w = CounterWindow(60)
    for t, (a, d) in enumerate([(0, 0), (30, 40), (60, 80)]):
        w.observe(t * 10.0, {"a": a, "d": d})
    assert w.increase("a") == 60 and w.ratio("a", "d") == 0.75


def test_reset_counts_the_new_value():
    w = CounterWindow(600)
    for t, v in enumerate([100, 150, 10, 40]):
        w.observe(float(t), {"c": v})
    assert w.increase("c") == 50 + 10 + 30


def test_forced_reset_even_when_value_went_up():
    w = CounterWindow(600)
    w.observe(0.0, {"c": 100})
    w.observe(1.0, {"c": 120}, reset=True)  # new process already past the old value
    assert w.increase("c") == 120


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
    assert inc is not None and inc >= 0
