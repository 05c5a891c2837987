"""The figures a run's design reads off its record of block ratios: each task's ratio, each workload's interval
(finite-population corrected, measurement noise from the A/A pairs), a new task's prediction interval, the A/A check
pooled, the whole figure over the shares (and how far it can still move) and the evenly weighted mix.

:class:`specops.bench.design.Design` records the ratios and decides on these figures; this module only reads them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from specops.bench import allocate, weighted
from specops.bench.arms import AA
from specops.bench.stats import Interval, geomean_ratio_ci, t975, t_quantile


class Estimates:
    """The readings of a design's record (the base of :class:`specops.bench.design.Design`, which fills it)."""

    # per (arm, workload, task): block ratios; baselines' A/A ratios under AA
    ratios: dict[str, dict[str, dict[str, list[float]]]]
    plain_s: dict[str, dict[str, list[float]]]  # the baseline's decode seconds per workload and task
    tasks: dict[str, list[str]]  # {workload: [task ids]}
    workloads: list[str]
    shares: dict[str, float] | None  # the workloads' shares (normalised), None: none
    fpc: bool  # the finite-population correction on a workload's interval

    def task_ratios(self, arm: str, wl: str | None = None) -> dict[str, float]:
        """``{task: geometric mean of its block ratios}`` for one workload (or all)."""
        rows = self.ratios.get(arm, {})
        out: dict[str, float] = {}
        for w, tasks in rows.items():
            if wl is not None and w != wl:
                continue
            for task, rs in tasks.items():
                out[task] = math.exp(sum(math.log(r) for r in rs) / len(rs))
        return out

    def measurement_var(self) -> float:
        """Variance of one block's log ratio from measurement alone, from the A/A pairs (pooled): the A/A
        ratio is measurement noise and nothing else, and it is at least as noisy as an arm's ratio."""
        logs = [math.log(r) for tasks in self.ratios.get(AA, {}).values() for rs in tasks.values() for r in rs]
        if len(logs) < 2:
            return 0.0
        m = sum(logs) / len(logs)
        return sum((x - m) ** 2 for x in logs) / (len(logs) - 1)

    def interval(self, arm: str, wl: str) -> Interval | None:
        """95% interval of the arm's speedup over the workload's task set.

        The task set is a fixed, finite benchmark and its tasks are drawn without replacement in a random
        order: the spread between tasks counts with the finite-population correction (1 - n/N), measurement
        noise (from the A/A pairs) in full. With every task in, only measurement noise is left. The A/A check
        itself is pure measurement noise: a plain t-interval."""
        ratios = self.task_ratios(arm, wl)
        if not ratios:
            return None
        if arm == AA or not self.fpc:
            return geomean_ratio_ci(list(ratios.values()))
        logs = [math.log(r) for r in ratios.values()]
        n, big_n = len(logs), max(len(self.tasks[wl]), len(logs))
        m = sum(logs) / n
        if n < 2:
            return Interval(math.exp(m), None, None, n)
        s2 = sum((x - m) ** 2 for x in logs) / (n - 1)
        reps = [len(rs) for rs in self.ratios[arm][wl].values()]
        meas = self.measurement_var() / (sum(reps) / len(reps))
        var = max(s2 - meas, 0.0) * (1 - n / big_n) / n + min(meas, s2) / n
        half = t975(n - 1) * math.sqrt(var)
        return Interval(math.exp(m), math.exp(m - half), math.exp(m + half), n)

    def new_task_interval(self, arm: str, wl: str) -> Interval | None:
        """95% prediction interval of the arm's speedup on one *new* task of this workload, one not in the set.

        :meth:`interval` answers "how fast on these tasks": with every task in, only measurement noise is left
        and it can be narrow. A new task of the same kind can land anywhere the tasks spread: a Student-t
        prediction interval on the log ratios, exp(m ± t(n-1)·s·√(1 + 1/n)), with no finite-population
        correction. Needs two tasks."""
        ratios = self.task_ratios(arm, wl)
        if not ratios:
            return None
        logs = [math.log(r) for r in ratios.values()]
        n = len(logs)
        m = sum(logs) / n
        if n < 2:
            return Interval(math.exp(m), None, None, n)
        s2 = sum((x - m) ** 2 for x in logs) / (n - 1)
        half = t975(n - 1) * math.sqrt(s2 * (1 + 1 / n))
        return Interval(math.exp(m), math.exp(m - half), math.exp(m + half), n)

    def whole(self, arm: str, level: float = 0.95) -> Interval | None:
        """With shares: the shares' speedup weighted by time (:func:`specops.bench.weighted.speedup`, a pooled
        within-workload variance) at ``level``; None until every workload with a share has a task of the arm."""
        assert self.shares is not None
        ratios = {w: self.task_ratios(arm, w) for w in self.shares}
        if any(not r for r in ratios.values()):
            return None
        seconds = {w: {t: sum(v) / len(v) for t, v in ts.items()} for w, ts in self.plain_s.items()}
        return weighted.speedup(weighted.timed(ratios, seconds), self.shares, level=level)

    def mix_interval(self, arm: str, workloads: Iterable[str] | None = None) -> Interval | None:
        """The whole mix: every workload weighs the same (a stratified estimate), so an arm that ran
        longer on the workloads where it wins is not favoured. Normal interval on the mean of the
        workloads' log estimates, with the smallest per-workload t quantile's degrees of freedom.
        With shares (and no ``workloads``): :meth:`whole` at 95%."""
        if self.shares is not None and workloads is None:
            return self.whole(arm)
        logs: list[float] = []
        vars_: list[float] = []
        dfs: list[int] = []
        for w in workloads or self.workloads:
            iv = self.interval(arm, w)
            if iv is None:
                continue
            logs.append(math.log(iv.estimate))
            if iv.has_ci:
                assert iv.high is not None
                se = (math.log(iv.high) - math.log(iv.estimate)) / t975(iv.n - 1)
                vars_.append(se * se)
                dfs.append(iv.n - 1)
        if not logs:
            return None
        m = sum(logs) / len(logs)
        n = sum(len(self.task_ratios(arm, w)) for w in workloads or self.workloads)
        if len(vars_) != len(logs):
            return Interval(math.exp(m), None, None, n)
        se = math.sqrt(sum(vars_)) / len(logs)
        half = t975(max(1, min(dfs))) * se
        return Interval(math.exp(m), math.exp(m - half), math.exp(m + half), n, max(1, min(dfs)))

    def n_tasks(self, arm: str, wl: str) -> int:
        return len(self.ratios.get(arm, {}).get(wl, {}))
    def aa_pooled(self) -> Interval | None:
        """The A/A check over every block of the run (block ratios, not task means)."""
        rs = [r for tasks in self.ratios.get(AA, {}).values() for rr in tasks.values() for r in rr]
        return geomean_ratio_ci(rs) if rs else None


    def projection(self, arm: str, level: float = 0.95) -> tuple[float, float] | None:
        """On the log scale: (the whole figure's half-width at ``level`` were every task measured, how far its
        estimate can still move: about 2·√(Σ w_k²·s_k²·(1/n_k − 1/N_k)), nothing where a workload is used up).
        Each workload's spread s_k is shrunk toward the pooled one as the allocation does
        (:func:`specops.bench.allocate.shrunk`), n_k its tasks in, N_k in all. None: no degrees of freedom to project
        with."""
        assert self.shares is not None
        spreads = {w: allocate.spread([[math.log(r) for r in self.task_ratios(arm, w).values()]]) for w in self.shares}
        pooled = allocate.pooled(spreads.values())
        big = {w: len(self.tasks[w]) for w in self.shares}
        if sum(big.values()) - len(big) < 1:
            return None
        s2 = {w: allocate.shrunk(spreads[w], pooled) ** 2 for w in self.shares}
        half = t_quantile(level, sum(big.values()) - len(big)) * math.sqrt(sum(self.shares[w] ** 2 * s2[w] / big[w]
                                                                               for w in self.shares))
        n = {w: max(1, min(self.n_tasks(arm, w), big[w])) for w in self.shares}
        reach = 2 * math.sqrt(sum(self.shares[w] ** 2 * s2[w] * (1 / n[w] - 1 / big[w]) for w in self.shares))
        return half, reach
