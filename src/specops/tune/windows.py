"""The band's spreads, by resampling (:mod:`specops.tune.band`; numpy, the tune's own dependency).

A window of n requests is n requests drawn with replacement from the tune's measured requests of the chosen profile:
a workload by its share (shares of requests; so a window's own mix varies as the traffic's does), a task of it, a block
of that task. Its figure is the one the live check computes: ``figure`` on the window's summed quantities (for the live
model the tokens and speculation counters, :meth:`specops.tune.live.LiveModel.predict_sums`), so a window weighs each
request by its time (a ratio of sums, never a mean of ratios).

**New requests, not the tune's own again** (``predictive``, the band's default): the live traffic's requests are of the
tune's kinds, not the very tasks it measured, and its dozen tasks a workload only estimate their kind. So each window
is drawn from a population of its own: the tasks of each workload weighed afresh (a Bayesian bootstrap, flat Dirichlet
weights), then n requests from it. For small n the window's own spread dominates; for large n the band closes in on
the uncertainty of the tune's own figure (about its confidence interval for the mean, at the band's level), never
on nothing. Without it (``predictive=False``: each task alike) the windows spread about the tune's figure itself: the
loss check's relative spread, a window against its own traffic's figure.

**Tasks it did not measure** (``predictive`` too): reweighing the measured tasks never reaches past them, and a kind's
next task can read lower than all of a dozen measured. So the predictive spreads' edges are drawn wider than the
resampled windows', on the log scale about the centre, by :func:`predictive_factor` of the fewest tasks a drawn
workload measured: Student's t with k − 1 degrees of freedom against the normal at the band's level (a new task's
figure from k measured ones), times √((k + 1)/(k − 1)) (the reweighing's variance of the mean, s²(k − 1)/(k(k + 1)),
against s²/k). At the traffic band's 95%: 1.22 at 12 tasks, 1.55 at 6, 3.1 at 3 (at 99%: 1.31, 1.85, 5.4); one task
alone has no spread of its kind to go on: no band. Checked against halves of the recorded tunes, the band from one
half and the traffic from the other (``scripts/sim-band-heldout``, docs/measurements.md).

How often each request is drawn in a window is multinomial: the same sums as n draws one by one, at a cost that does
not grow with n. Seeded: the same requests give the same band.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from specops.bench.stats import t_quantile
from specops.tune import live
from specops.tune.band import GRID, LEVEL, SHARES, TRAFFIC, Band, Spread

if TYPE_CHECKING:
    import numpy as np

REPLICATES = 10000  # windows drawn per n: 50 beyond each edge at 99%
SEED = 62


@dataclass(frozen=True)
class Sample:
    """One measured request: its workload, its task, its additive quantities (tokens first)."""

    workload: str
    task: str
    values: tuple[float, ...]


Figure = Callable[["np.ndarray"], "np.ndarray"]  # summed quantities (windows × quantities) -> each window's figure


def _tasks(samples: Sequence[Sample]) -> tuple[dict[str, list[str]], dict[tuple[str, str], int]]:
    """Each workload's tasks (in order of first block) and each task's blocks."""
    blocks: dict[tuple[str, str], int] = {}
    for s in samples:
        blocks[(s.workload, s.task)] = blocks.get((s.workload, s.task), 0) + 1
    tasks: dict[str, list[str]] = {}
    for wl, task in blocks:
        tasks.setdefault(wl, []).append(task)
    return tasks, blocks


def _shares(samples: Sequence[Sample], shares: Mapping[str, float] | None) -> dict[str, float]:
    """The shares normalised over the workloads measured (None: each task alike, so each workload by its tasks)."""
    tasks, blocks = _tasks(samples)
    given = {wl: len(ts) / len(blocks) for wl, ts in tasks.items()} if shares is None else shares
    total = sum(v for wl, v in given.items() if v > 0 and wl in tasks)
    if total <= 0:
        raise ValueError("no measured request of a workload with a share")
    return {wl: v / total for wl, v in given.items() if v > 0 and wl in tasks}


def weights(samples: Sequence[Sample], shares: Mapping[str, float] | None) -> list[float]:
    """Each sample's chance to be drawn: its workload's share (``None``: each task alike), split evenly over the
    workload's tasks and each task's blocks. A workload without a share counts 0."""
    tasks, blocks = _tasks(samples)
    norm = _shares(samples, shares)
    return [norm.get(s.workload, 0.0) / len(tasks[s.workload]) / blocks[(s.workload, s.task)] for s in samples]


def tasks_drawn(samples: Sequence[Sample], shares: Mapping[str, float] | None) -> int:
    """The fewest tasks measured by a workload drawn at ``shares``."""
    tasks, _ = _tasks(samples)
    return min(len(tasks[wl]) for wl in _shares(samples, shares))


def predictive_factor(tasks: int, level: float = LEVEL) -> float:
    """How much wider, on the log scale, a predictive spread's edges lie than its resampled windows' (module doc):
    t(level, k − 1) ÷ z(level) × √((k + 1)/(k − 1)) for k measured tasks; ValueError below 2 (no spread of the kind)."""
    if tasks < 2:
        raise ValueError(f"{tasks} task measured: a kind's spread needs 2 or more")
    z = NormalDist().inv_cdf((1 + level) / 2)
    return t_quantile(level, tasks - 1) / z * math.sqrt((tasks + 1) / (tasks - 1))


def populations(samples: Sequence[Sample], shares: Mapping[str, float] | None, replicates: int,
                rng: np.random.Generator) -> np.ndarray:
    """``replicates`` rows of draw chances: each workload at its share, its tasks weighed afresh per row (flat
    Dirichlet), each task's blocks evenly."""
    import numpy as np

    tasks, blocks = _tasks(samples)
    norm = _shares(samples, shares)
    out = np.zeros((replicates, len(samples)))
    for wl, share in norm.items():
        names = tasks[wl]
        task_w = rng.dirichlet(np.ones(len(names)), size=replicates) * share
        col = {t: i for i, t in enumerate(names)}
        for j, s in enumerate(samples):
            if s.workload == wl:
                out[:, j] = task_w[:, col[s.task]] / blocks[(wl, s.task)]
    return out


def spread(mix: str, samples: Sequence[Sample], shares: Mapping[str, float] | None, figure: Figure,
           level: float = LEVEL, grid: Sequence[int] = GRID, replicates: int = REPLICATES, seed: int = SEED,
           predictive: bool = True, unseen: bool = True) -> Spread:
    """The spread of windows of each n in ``grid`` drawn at ``shares``: its (n, low, high) at ``level``; predictive
    and ``unseen``, its edges widened for the kinds' tasks not measured (``unseen=False``: the reweighing alone, for
    comparison)."""
    import numpy as np

    # the kinds' next tasks, not only those measured: wider on the log scale (module doc); refused before any draw
    tasks = tasks_drawn(samples, shares)
    k = predictive_factor(tasks, level) if predictive and unseen else 1.0
    values = np.array([s.values for s in samples], dtype=float)
    p = np.array(weights(samples, shares))
    rng = np.random.default_rng([seed, len(samples), int(predictive), *(ord(c) for c in mix)])
    tail = (1 - level) / 2
    rows = []
    for n in grid:
        pvals = populations(samples, shares, replicates, rng) if predictive else p
        counts = rng.multinomial(n, pvals, size=None if predictive else replicates)
        figs = figure(counts @ values)
        if not np.isfinite(figs).any():
            raise ValueError(f"no figure for a window of {n} requests ({mix})")
        low, high = np.nanquantile(figs, [tail, 1 - tail])
        rows.append((float(n), float(low), float(high)))
    mean = p @ values
    centre = float(figure(mean[None, :])[0])
    if not np.isfinite(centre):
        raise ValueError(f"no figure for the requests at {mix}")
    if k != 1.0:
        rows = [(n, centre * (low / centre) ** k, centre * (high / centre) ** k) for n, low, high in rows]
    return Spread(mix, float(mean[0]), centre, tuple(rows), tasks, k, level)


def band(samples: Sequence[Sample], shares: Mapping[str, float] | None, figure: Figure, level: float = LEVEL,
         grid: Sequence[int] = GRID, replicates: int = REPLICATES, seed: int = SEED, predictive: bool = True,
         unseen: bool = True, traffic: float = TRAFFIC) -> Band:
    """The band for ``samples`` at ``shares`` (None: each task alike): windows of new requests of the tune's kinds at
    ``traffic`` (the traffic check's), and the windows' own spread at ``level`` (the loss check's)."""
    if not samples:
        raise ValueError("no measured request")
    return Band(spread(SHARES, samples, shares, figure, traffic, grid, replicates, seed, predictive=predictive,
                       unseen=unseen),
                spread(SHARES, samples, shares, figure, level, grid, replicates, seed, predictive=False))


def from_blocks(records: Iterable[Mapping[str, Any]], arm: str, ref: str) -> list[Sample]:
    """The measurement's requests of ``arm`` where ``ref`` ran beside it (those the live model was built on,
    :func:`specops.tune.live.arm_run`): each its tokens and speculation counters."""
    out = []
    for rec in records:
        results = rec.get("results") or {}
        mine = live.decoded(results.get(arm))
        if mine is None or live.decoded(results.get(ref)) is None:
            continue
        spec = results[arm].get("spec") or {}
        out.append(Sample(str(rec.get("workload")), str(rec.get("task")),
                          (mine[0], *(float(spec.get(k) or 0) for k in ("drafts", "draft_tokens", "accepted")))))
    return out


def ratio_of_sums(sums: np.ndarray) -> np.ndarray:
    """A window's figure from (tokens, plain seconds, speculative seconds): its plain time over its time."""
    return sums[:, 1] / sums[:, 2]
