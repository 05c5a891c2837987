"""Statistics for the bench: per-task speedup ratios, their geometric mean and a 95% interval.

Method (also printed in the report): for every task the arm's decode rate is averaged over the
repetitions, then divided by the baseline's average rate on the same task. The speedup of an arm on
a workload is the **geometric mean of these per-task ratios**; its 95% confidence interval is a
Student-t interval on the log ratios (n = number of tasks, n-1 degrees of freedom), transformed back.
Interleaving the arms over repetitions puts slow drift of a shared, noisy machine into the per-task
ratios, so it widens the interval instead of biasing the mean. With fewer than two tasks there is no
interval (``None``) and the recommendation never relies on such a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 97.5% quantiles of Student's t for df = 1..30.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    # Cornish-Fisher expansion; error < 1e-3 for df > 30.
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n-1); 0.0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


@dataclass(frozen=True)
class Interval:
    """A point estimate with an optional 95% confidence interval."""

    estimate: float
    low: float | None
    high: float | None
    n: int

    @property
    def has_ci(self) -> bool:
        return self.low is not None and self.high is not None

    def significantly_above(self, value: float = 1.0) -> bool:
        return self.low is not None and self.low > value

    def significantly_below(self, value: float = 1.0) -> bool:
        return self.high is not None and self.high < value

    def to_dict(self) -> dict[str, float | int | None]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n}

    def fmt(self, digits: int = 2) -> str:
        if not self.has_ci:
            return f"{self.estimate:.{digits}f}× (n={self.n}, no CI)"
        return f"{self.estimate:.{digits}f}× [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def mean_ci(values: Sequence[float]) -> Interval:
    """Arithmetic mean with a t-interval."""
    n = len(values)
    m = mean(values)
    if n < 2:
        return Interval(m, None, None, n)
    half = t975(n - 1) * stdev(values) / math.sqrt(n)
    return Interval(m, m - half, m + half, n)


def geomean_ratio_ci(ratios: Sequence[float]) -> Interval:
    """Geometric mean of positive ratios with a t-interval on their logarithms."""
    if not ratios:
        raise ValueError("no ratios")
    if any(r <= 0 or not math.isfinite(r) for r in ratios):
        raise ValueError(f"ratios must be positive and finite, got {list(ratios)}")
    logs = [math.log(r) for r in ratios]
    ci = mean_ci(logs)
    if not ci.has_ci:
        return Interval(math.exp(ci.estimate), None, None, ci.n)
    assert ci.low is not None and ci.high is not None
    return Interval(math.exp(ci.estimate), math.exp(ci.low), math.exp(ci.high), ci.n)


def per_task_ratios(arm: dict[str, Sequence[float]], base: dict[str, Sequence[float]]) -> dict[str, float]:
    """``{task: mean(arm rates) / mean(base rates)}`` for tasks both sides measured (rates > 0)."""
    out: dict[str, float] = {}
    for task, values in arm.items():
        b = base.get(task)
        if not values or not b:
            continue
        a_mean, b_mean = mean(values), mean(b)
        if a_mean > 0 and b_mean > 0:
            out[task] = a_mean / b_mean
    return out


def speedup(arm: dict[str, Sequence[float]], base: dict[str, Sequence[float]]) -> Interval | None:
    """Speedup of ``arm`` over ``base`` from per-task rates (higher is faster); None if no overlap."""
    ratios = per_task_ratios(arm, base)
    if not ratios:
        return None
    return geomean_ratio_ci(list(ratios.values()))
