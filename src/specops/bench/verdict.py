"""How one speedup interval is read: what it concludes against plain decoding, how precise it is, the level it is
read at (the tune's error budget, issue 79) and whether it may be served.

The bench's and the tune's stops, reports and final choice all read their intervals through these rules; the
sequential design that feeds them is :mod:`specops.bench.design`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from statistics import NormalDist

from specops.bench.stats import Interval, t_quantile

SLOWER, FASTER, NO_GAIN, INCONCLUSIVE = "slower", "faster", "no gain", "inconclusive"
NORMAL = NormalDist()


# The tune's error budget (issue 79 item 1): over the whole run, every look (the last included) and every candidate
# measured, the chance of serving a candidate whose true speedup is 1.00 or less is at most ALPHA, one-sided.
ALPHA = 0.025
# Over the candidates, a graphical multiple test (Bretz, Maurer, Brannath & Posch 2009, "A graphical approach to
# sequentially rejective multiple test procedures"; a closed testing procedure): each candidate carries a share of
# ALPHA (:func:`budget_shares`: the first in the tune's order, its best predicted, FIRST of it, the others the rest
# evenly), and a candidate shown to pay passes its share on evenly to those not yet shown (:func:`recycled`, the
# complete graph with equal transitions: Holm's procedure where the shares are equal). A share is spent over the looks
# on an O'Brien–Fleming boundary (Wang & Tsiatis's family at SHAPE Δ = 0; with a graph, Maurer & Bretz 2013): the
# look at information fraction t (the tasks measured ÷ the cap) reads "confidently faster" at
# z_t = z_end · t^(Δ − 1/2), z_end the normal quantile of the last look's one-sided tail, FINAL × the share. The
# first looks are strict and the last one, the final choice, keeps most of the budget: the whole figure's far tail
# leans toward 'faster' at the first looks (a mean of a few skewed request times, its spread read from the same few),
# and those are the looks this boundary spends least on. Its earlier looks spent almost nothing in simulation; the
# last look's own lean toward 'faster' (1.6-2x its nominal rate at the CPU's wide edits) is what FINAL leaves room
# for: scripts/sim-error-budget (docs/measurements.md, 2026-12-07, "an O'Brien–Fleming boundary"): at 0.4 a true 1.00
# served in at most 2.11% of 8,000 runs in the widest cell, at 0.5 in 2.57%. Δ = 0.5 is Pocock's constant boundary,
# the budget's first form (every look at 0.07 of the share: a true 1.20 served in 55-70% of runs where the CPU's
# edits spread 0.24; with even shares 73-87%).
FINAL = 0.4
SHAPE = 0.0
# the first candidate's share where there are several (the tune measures its best predicted first; a CPU build holds
# the other n-gram types back until a measured one pays): with even shares a true 1.20 among three candidates at the
# CPU's wide edits was served in 73% of runs, 87% alone; at 0.7 in 82.7% (one measured, two held back: 82.2%), and
# in 61.1% where the order puts it last (docs/measurements.md, 2026-12-07, "shares by the tune's order")
FIRST = 0.7
# the strictest look, in standard errors (a look that early cannot serve anything; a level that rounds to 1 cannot be
# read)
Z_MOST = 6.0


def budget_shares(names: Sequence[str], first: float | None = None) -> dict[str, float]:
    """Each candidate's share of the error budget, ``names`` in the tune's order (best predicted first): one
    candidate all of it; several, the first ``first`` (default :data:`FIRST`) and the others the rest evenly."""
    top = FIRST if first is None else first
    if len(names) <= 1:
        return dict.fromkeys(names, 1.0)
    rest = (1.0 - top) / (len(names) - 1)
    return {n: (top if i == 0 else rest) for i, n in enumerate(names)}


def recycled(shares: Mapping[str, float], shown: Collection[str]) -> dict[str, float]:
    """The shares after the candidates ``shown`` to pay passed theirs on: on the complete graph with equal
    transitions (Bretz et al. 2009) every candidate not shown gets an equal part of what the shown ones held, whatever
    the order they were shown in; the shown keep their own. All shown: as given."""
    left = [n for n in shares if n not in shown]
    if not left:
        return dict(shares)
    freed = sum(v for n, v in shares.items() if n in shown)
    return {n: v if n in shown else v + freed / len(left) for n, v in shares.items()}


def shown_to_pay(shares: Mapping[str, float], pays: Callable[[str, float], bool],
                 fraction: float = 1.0) -> dict[str, float]:
    """The graphical procedure's rejections: every candidate that ``pays(name, level)`` at the level of its share
    (:func:`look_level` at ``fraction``), its share passed on (:func:`recycled`) and the others read again until none
    more pays; the share each was shown at, by name (none shown: empty)."""
    shown: dict[str, float] = {}
    while True:
        now = recycled(shares, shown)
        new = {n: now[n] for n in shares if n not in shown and pays(n, look_level(now[n], fraction))}
        if not new:
            return shown
        shown.update(new)


def arm_level(names: Sequence[str], shown: Collection[str], arm: str | None, fraction: float = 1.0) -> float:
    """The level of ``arm``'s look at information ``fraction``: :func:`look_level` of its share of the budget over the
    candidates ``names`` in their order (:func:`budget_shares`), the shares of those ``shown`` to pay passed on
    (:func:`recycled`). ``arm`` None or not among ``names``: the first's; no candidates: one candidate's."""
    if not names:
        return look_level(1.0, fraction)
    share = recycled(budget_shares(names), shown)
    return look_level(share[arm if arm in share else names[0]], fraction)


def look_level(share: float = 1.0, fraction: float = 1.0, alpha: float = ALPHA) -> float:
    """The two-sided level of the interval a look at a candidate reads to serve it, at information ``fraction``
    (tasks measured ÷ the cap; 1, the default: the last look, which the final choice reads): one-sided, the last
    look's tail is ``alpha`` × :data:`FINAL` × the candidate's ``share`` of the budget (:func:`budget_shares`, at most
    1), and an earlier look's z is the last one's × ``fraction`` ^ (:data:`SHAPE` − 1/2) (O'Brien–Fleming's
    boundary)."""
    if not 0.0 < share <= 1.0 + 1e-9:
        raise ValueError(f"a candidate's share of the error budget is in (0, 1], not {share!r}")
    tail = alpha * FINAL * min(1.0, share)
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
