"""How one speedup interval is read: what it concludes against plain decoding, how precise it is, the level it is
read at (the tune's error budget, issue 79) and whether it may be served.

The bench's and the tune's stops, reports and final choice all read their intervals through these rules; the
sequential design that feeds them is :mod:`specops.bench.design`.
"""

from __future__ import annotations

import math

from specops.bench.stats import Interval, t_quantile

SLOWER, FASTER, NO_GAIN, INCONCLUSIVE = "slower", "faster", "no gain", "inconclusive"


# The tune's error budget (issue 79 item 1): over the whole run, every look (the last included) and every candidate
# measured, the chance of serving a candidate whose true speedup is 1.00 or less is at most ALPHA, one-sided.
ALPHA = 0.025
# Each candidate's share of ALPHA (Bonferroni: ALPHA / the candidates measured) is spent on a constant boundary over
# the looks (Pocock's form): each look, the last included, reads the same nominal one-sided level, POCOCK × the share.
# Pocock's own constant for the tune's 6 to 31 looks on normal data would be 0.12-0.30 of it; the whole figure's far
# tail at the CPU's wide edits misses toward 'faster' about twice as often as its nominal rate (a mean of a few
# skewed times, its spread read from the same few), so POCOCK is set by simulation: scripts/sim-error-budget, at
# 0.07 every cell of the recorded CPU and GPU spreads, one and three candidates, served a true 1.00 in at most 1.95%
# of 8,000 runs, at 0.10 up to 2.8% of 2,000 (docs/measurements.md, 2026-12-07).
POCOCK = 0.07


def look_level(candidates: int, alpha: float = ALPHA) -> float:
    """The two-sided level of the interval every look at a candidate reads to serve it, the final choice included:
    each tail ``alpha`` × :data:`POCOCK` ÷ the ``candidates`` measured (one candidate: 99.65%, a tail of 0.175%;
    three: 99.88%)."""
    return 1.0 - 2.0 * alpha * POCOCK / max(1, candidates)


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
