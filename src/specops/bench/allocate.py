"""Where the next block goes when the workloads have shares (``specops tune``: the traffic's mix, or the task set's
own shares): to the workload whose next task narrows the whole figure most.

The whole figure's variance is about Σ_k w_k²·s_k²/n_k (w_k the share, s_k the spread of the workload's per-task
log ratios, n_k its tasks: :mod:`specops.bench.weighted`). One more task of workload k takes
w_k²·s_k²·(1/n_k − 1/(n_k + 1)) off it; giving every block to the largest such gain ends, as the blocks add up, at
n_k ∝ w_k·s_k: Neyman's allocation in stratified sampling. Planned again after every block, from the spreads
measured so far:

- **warm-up**: a workload with a share gets ``warm`` tasks (the design's ``min_tasks``, else :data:`WARM`) before
  its spread is weighed (one task has none) and before the whole figure may stop anything; the fewest first, the
  larger share first among equals;
- **a spread measured on few tasks** is shrunk toward the spread pooled over every workload (as if the pooled one
  were :data:`PRIOR_DF` more degrees of freedom of it): two tasks that happen to agree do not starve a workload;
- a workload without a share is never planned (the design drops it before anything runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

WARM = 2  # tasks of every workload with a share before the allocation weighs spreads (the design passes its own)
PRIOR_DF = 2  # degrees of freedom the pooled spread counts for in a workload's own


def spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The pooled within-group standard deviation of ``groups`` (each an arm's per-task log ratios on one
    workload: arms differ in level, not in how their tasks spread) and its degrees of freedom (0: none yet)."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) < 2:
            continue
        m = sum(g) / len(g)
        ss += sum((x - m) ** 2 for x in g)
        df += len(g) - 1
    return (math.sqrt(ss / df), df) if df else (0.0, 0)


def pooled(spreads: Iterable[tuple[float, int]]) -> tuple[float, int]:
    """The spread pooled over workloads' (spread, degrees of freedom), and its degrees of freedom (0: none)."""
    rows = list(spreads)
    dfs = sum(df for _, df in rows)
    return (math.sqrt(sum(s * s * df for s, df in rows) / dfs), dfs) if dfs else (0.0, 0)


def shrunk(own: tuple[float, int], pooled: tuple[float, int]) -> float:
    """A workload's spread, shrunk toward the pooled one: (df·s² + PRIOR_DF·s_pool²) / (df + PRIOR_DF)."""
    (s, df), (sp, dfp) = own, pooled
    if not dfp:
        return s
    return math.sqrt((df * s * s + PRIOR_DF * sp * sp) / (df + PRIOR_DF))


def gain(share: float, s: float, n: int) -> float:
    """What one more task of a workload takes off the whole figure's variance (∝)."""
    if n <= 0:
        return math.inf
    return share * share * s * s * (1 / n - 1 / (n + 1))


def pick(shares: Mapping[str, float], done: Mapping[str, int], spreads: Mapping[str, tuple[float, int]],
         open_: Sequence[str], warm: int = WARM) -> tuple[str, str]:
    """The workload of the next block among ``open_`` (those with a task left and an arm running) and why, in a
    line. ``done``: tasks measured per workload; ``spreads``: each workload's (spread, degrees of freedom)."""
    if not open_:
        raise ValueError("no open workload to plan")
    cold = [w for w in open_ if done.get(w, 0) < warm]
    if cold:
        wl = min(cold, key=lambda w: (done.get(w, 0), -shares[w]))
        return wl, (f"{wl}: warm-up, task {done.get(wl, 0) + 1} of the {warm} every workload with a share gets "
                    "before its spread is weighed")
    every = pooled(spreads.values())
    eff = {w: shrunk(spreads.get(w, (0.0, 0)), every) for w in open_}
    gains = {w: gain(shares[w], eff[w], done.get(w, 0)) for w in open_}
    wl = max(open_, key=lambda w: (gains[w], shares[w]))
    others = [f"{w} {shares[w]:.0%}×{eff[w]:.2f}/{done.get(w, 0)}" for w in open_ if w != wl]
    why = (f"{wl}: share {shares[wl]:.0%} × spread {eff[wl]:.2f} on {done.get(wl, 0)} tasks narrows the whole figure "
           "most" + (f" (against {', '.join(others)})" if others else " (the only workload open)"))
    return wl, why
