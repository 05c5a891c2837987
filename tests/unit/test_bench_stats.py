"""Statistics of the bench: t quantiles, geometric-mean speedup and its interval."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specops.bench.stats import geomean_ratio_ci, mean_ci, per_task_ratios, speedup, stdev, t975


def test_t_quantiles_match_tables() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(9) == pytest.approx(2.262)
    assert t975(30) == pytest.approx(2.042)
    assert t975(60) == pytest.approx(2.000, abs=2e-3)
    assert t975(1000) == pytest.approx(1.962, abs=2e-3)
    with pytest.raises(ValueError):
        t975(0)


def test_mean_ci_known_values() -> None:
    ci = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert ci.estimate == 3.0
    half = 2.776 * stdev([1, 2, 3, 4, 5]) / math.sqrt(5)
    assert ci.low == pytest.approx(3 - half) and ci.high == pytest.approx(3 + half)


def test_single_value_has_no_interval() -> None:
    iv = geomean_ratio_ci([1.3])
    assert iv.estimate == pytest.approx(1.3)
    assert not iv.has_ci
    assert not iv.significantly_above(1.0) and not iv.significantly_below(1.0)


def test_geomean_of_reciprocal_pair_is_one() -> None:
    iv = geomean_ratio_ci([2.0, 0.5])
    assert iv.estimate == pytest.approx(1.0)
    assert iv.low < 1.0 < iv.high


def test_identical_ratios_give_zero_width() -> None:
    iv = geomean_ratio_ci([1.2] * 6)
    assert iv.low == pytest.approx(1.2) and iv.high == pytest.approx(1.2)
    assert iv.significantly_above(1.0)


def test_bad_ratios_rejected() -> None:
    with pytest.raises(ValueError):
        geomean_ratio_ci([])
    with pytest.raises(ValueError):
        geomean_ratio_ci([1.0, 0.0])
    with pytest.raises(ValueError):
        geomean_ratio_ci([1.0, float("inf")])


def test_per_task_ratios_average_reps_and_skip_missing() -> None:
    arm = {"a": [10.0, 14.0], "b": [8.0], "c": [5.0]}
    base = {"a": [10.0, 10.0], "b": [4.0], "d": [1.0]}
    assert per_task_ratios(arm, base) == {"a": pytest.approx(1.2), "b": pytest.approx(2.0)}
    sp = speedup(arm, base)
    assert sp is not None and sp.estimate == pytest.approx(math.sqrt(1.2 * 2.0))
    assert speedup({"x": [1.0]}, {"y": [1.0]}) is None


@given(st.lists(st.floats(min_value=0.2, max_value=5.0), min_size=2, max_size=40))
def test_interval_contains_estimate(ratios: list[float]) -> None:
    iv = geomean_ratio_ci(ratios)
    assert iv.low is not None and iv.high is not None
    assert iv.low <= iv.estimate * (1 + 1e-9) and iv.estimate <= iv.high * (1 + 1e-9)
    assert min(ratios) * (1 - 1e-9) <= iv.estimate <= max(ratios) * (1 + 1e-9)


@given(
    st.lists(st.floats(min_value=0.2, max_value=5.0), min_size=2, max_size=20),
    st.floats(min_value=0.5, max_value=2.0),
)
def test_scaling_all_ratios_scales_estimate_and_bounds(ratios: list[float], k: float) -> None:
    a, b = geomean_ratio_ci(ratios), geomean_ratio_ci([r * k for r in ratios])
    assert b.estimate == pytest.approx(a.estimate * k, rel=1e-9)
    assert b.low == pytest.approx(a.low * k, rel=1e-9)  # type: ignore[operator]
