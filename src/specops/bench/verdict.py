"""How one speedup interval is read: what it concludes against plain decoding, how precise it is, the level it is
read at (the tune's error budget, issue 79) and whether it may be served.

The bench's and the tune's stops, reports and final choice all read their intervals through these rules; the
sequential design that feeds them is :mod:`specops.bench.design`.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from specops.bench.stats import Interval, t_quantile

SLOWER, FASTER, NO_GAIN, INCONCLUSIVE = "slower", "faster", "no gain", "inconclusive"
NORMAL = NormalDist()


# The tune's error budget (issue 79 item 1): over the whole run, every look (the last included) and every candidate
# measured, the chance of serving a candidate whose true speedup is 1.00 or less is at most ALPHA, one-sided.
ALPHA = 0.025
# Each candidate's share of ALPHA (Bonferroni: ALPHA / the candidates measured) is spent over the looks on an
# O'Brien–Fleming boundary (Wang & Tsiatis's family at SHAPE Δ = 0): the look at information fraction t (the tasks
# measured ÷ the cap) reads "confidently faster" at z_t = z_end · t^(Δ − 1/2), z_end the normal quantile of the last
# look's one-sided tail, FINAL × the share. The first looks are strict and the last one, the final choice, keeps
# most of the budget: the whole figure's far tail leans toward 'faster' at the first looks (a mean of a few skewed
# request times, its spread read from the same few), and those are the looks this boundary spends least on. Its
# earlier looks spent almost nothing in simulation; the last look's own lean toward 'faster' (1.6-2x its nominal rate
# at the CPU's wide edits) is what FINAL leaves room for: scripts/sim-error-budget (docs/measurements.md, 2026-12-07,
# "an O'Brien–Fleming boundary"): at 0.4 a true 1.00 served in at most 2.11% of 8,000 runs in the widest cell, at 0.5
# in 2.57%. Δ = 0.5 is Pocock's constant boundary, the budget's first form (every look at 0.07 of the share: a true
# 1.20 served in 55-70% of runs where the CPU's edits spread 0.24; now 73-87%).
FINAL = 0.4
SHAPE = 0.0
# the strictest look, in standard errors (a look that early cannot serve anything; a level that rounds to 1 cannot be
# read)
Z_MOST = 6.0


def look_level(candidates: int, fraction: float = 1.0, alpha: float = ALPHA) -> float:
    """The two-sided level of the interval a look at a candidate reads to serve it, at information ``fraction``
    (tasks measured ÷ the cap; 1, the default: the last look, which the final choice reads): one-sided, the last
    look's tail is ``alpha`` × :data:`FINAL` ÷ the ``candidates`` measured, and an earlier look's z is the last one's
    × ``fraction`` ^ (:data:`SHAPE` − 1/2) (O'Brien–Fleming's boundary)."""
    tail = alpha * FINAL / max(1, candidates)
    z = NORMAL.inv_cdf(1.0 - tail) * min(1.0, max(fraction, 1e-6)) ** (SHAPE - 0.5)
    return 1.0 - 2.0 * NORMAL.cdf(-min(z, Z_MOST))


# the most an interval's end may lie from its estimate on the log scale (e^300: no speedup is near it)
LOG_BOUND = 300.0


def at_level(iv: Interval, level: float) -> Interval:
    """The same figure at another two-sided ``level``: its half-width on the log scale scaled by the ratio of the t
    quantiles at its own degrees of freedom (``iv.df``, else n − 1) and level (``iv.level``, else 95%). Every
    interval the bench and the tune build is symmetric about its estimate on the log scale. No interval: as is."""
    if not iv.has_ci or iv.low is None or iv.high is None or iv.low <= 0:
        return iv
    df = iv.df if iv.df is not None else iv.n - 1
    old = iv.level if iv.level is not None else 0.95
    if df < 1 or old == level:
        return iv
    scale = t_quantile(level, df) / t_quantile(old, df)
    est = iv.estimate
    # on the log scale, bounded (a wide interval at 1-2 degrees of freedom scaled to 99.9% overflowed a float)
    low = est * math.exp(max(-LOG_BOUND, scale * math.log(iv.low / est)))
    high = est * math.exp(min(LOG_BOUND, scale * math.log(iv.high / est)))
    return Interval(est, low, high, iv.n, iv.df, level)


def deployable(iv: Interval, margin: float, level: float | None = None) -> bool:
    """Confidently faster than plain decoding, and not confidently under 1 + ``margin``: what may be served (the
    tune's choice, its figure at N streams, and the whole figure's stops read this one rule). ``level``: the level at
    which "confidently faster" is read (:func:`at_level`; the run's error budget, :func:`look_level`); None: ``iv``'s
    own. "Not confidently under 1 + ``margin``" reads ``iv`` as built (95%): a stricter level must not make a figure
    confidently under the margin look as if it might gain it."""
    serve = iv if level is None else at_level(iv, level)
    return serve.significantly_above(1.0) and not iv.significantly_below(1.0 + margin)


def rel_half_width(iv: Interval) -> float:
    """Largest relative distance of the interval's ends from its estimate (inf without an interval)."""
    if not iv.has_ci:
        return math.inf
    assert iv.low is not None and iv.high is not None
    return max(iv.high / iv.estimate - 1.0, 1.0 - iv.low / iv.estimate)


def conclusion(iv: Interval | None, half_width: float) -> str:
    """What an interval lets one say about an arm against baseline."""
    if iv is None or not iv.has_ci:
        return INCONCLUSIVE
    if iv.significantly_below(1.0):
        return SLOWER
    if iv.significantly_above(1.0):
        return FASTER
    if iv.significantly_below(1.0 + half_width) or rel_half_width(iv) <= half_width:
        return NO_GAIN
    return INCONCLUSIVE
