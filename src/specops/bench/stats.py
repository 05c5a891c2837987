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

import functools
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


# Two-sided 99.5% quantiles of Student's t for df = 1..30 (the two-sided 99% interval).
_T995 = (
    63.657,
    9.925,
    5.841,
    4.604,
    4.032,
    3.707,
    3.499,
    3.355,
    3.250,
    3.169,
    3.106,
    3.055,
    3.012,
    2.977,
    2.947,
    2.921,
    2.898,
    2.878,
    2.861,
    2.845,
    2.831,
    2.819,
    2.807,
    2.797,
    2.787,
    2.779,
    2.771,
    2.763,
    2.756,
    2.750,
)


def t_quantile(level: float, df: int) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom: the (1 + level) / 2 quantile,
    so that ``estimate ± t_quantile(level, df) · se`` is a ``level`` interval. Levels 0.95 and 0.99 read the printed
    tables up to df 30 (0.95 is :func:`t975`) and a Cornish-Fisher expansion beyond (error < 1e-3); any other level
    in (0, 1) is solved on the t distribution function (:func:`t_cdf`), to about 1e-9."""
    if df < 1:
        raise ValueError("degrees of freedom must be >= 1")
    if not 0 < level < 1:
        raise ValueError(f"the confidence level must lie strictly between 0 and 1, got {level!r}")
    if level == 0.95:
        return t975(df)
    if level == 0.99:
        if df <= len(_T995):
            return _T995[df - 1]
        z = 2.575829
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    return _t_solve((1 + level) / 2, df)


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` > 0 degrees of freedom: 1 - I_{df/(df+x²)}(df/2, 1/2) / 2 for x >= 0,
    I the regularized incomplete beta function (a continued fraction, Numerical Recipes' betacf)."""
    if df <= 0:
        raise ValueError("degrees of freedom must be > 0")
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + x * x))
    return 1 - tail if x >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


@functools.lru_cache(maxsize=1024)
def _t_solve(p: float, df: float) -> float:
    """The p quantile of Student's t (p > 1/2) by bisection on :func:`t_cdf` (remembered: the tune asks for the same
    few levels and degrees of freedom after every block)."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2


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
    """A point estimate with an optional confidence interval (95% unless its maker was asked for another level)."""

    estimate: float
    low: float | None
    high: float | None
    n: int
    # the degrees of freedom and level of the t quantile that made it (None: n - 1 and 95%); the tune works the
    # tasks' spread back out of the interval with them (specops.tune.decide.spread)
    df: int | None = None
    level: float | None = None

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
