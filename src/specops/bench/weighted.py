"""The speedup of a mix of workloads **weighted by time**, with an interval whose variance comes from every task.

The figure. For a mix with request shares w_k (normalised: Σ w_k = 1) the time the service spends decoding is
Σ_k w_k·T_k, with T_k a request's decode time in workload k, so the mix's speedup over plain decoding is

    S = Σ_k w_k·E[T_plain,k] / Σ_k w_k·E[T_spec,k]

Derivation from the paired per-task ratios r_i (the candidate's tok/s ÷ plain decoding's on task i, paired in the
same blocks). A request of L tokens takes T_plain,i = L / v_plain,i and T_spec,i = L / v_spec,i = T_plain,i / r_i.
The shares w_k are **shares of requests**, and requests take different times per workload (prompts differ, answers
stop early: a 2-core CPU's edit block took ~25 s, a prose block ~10 s), so each task is weighed by its own plain
decode seconds T_i where the blocks recorded them (:func:`timed`: b_i = T_i, a_i = T_i / r_i; issue 62 item 4), and
the figure is S = Σ_k w_k·mean_k(b) / Σ_k w_k·mean_k(a) = 1 / Σ_k v_k / H_k with v_k the workload's share of plain
decoding's **time** (:func:`time_shares`) and H_k its time-weighted ratio. Only where no seconds were recorded does
every request count as the same plain time T: then E[T_spec,k] = T·mean_{i∈k}(1/r_i) = T / H_k, H_k the
**harmonic** mean of workload k's ratios, so

    S = Σ_k w_k·T / Σ_k (w_k·T / H_k) = 1 / Σ_k (w_k / H_k)

a share-weighted harmonic mean: a workload the candidate slows down costs more time than an equal gain elsewhere
saves (ratios 2.0 and 0.5 at half each: S = 0.8, while their geometric mean reads 1.0 and their mean 1.25).

In general, for arm a against reference b: per task the relative times a_i, b_i (1/r_i, and 1 for plain decoding
itself), A = Σ_k w_k·mean_k(a), B = Σ_k w_k·mean_k(b), and S = B / A.

The interval: a **confidence interval for the mix's mean speedup S** (not a prediction for a new request), at
``level`` (95% by default). The delta method on log S, workloads independent:

    Var(log S) ≈ Σ_k (w_k² / n_k)·σ²_k,    σ²_k the variance of d_i = b_i/B − a_i/A over workload k's tasks

(log S = log B − log A; a task's share of B is w_k·b_i/n_k, of A w_k·a_i/n_k). With each workload's own sample
variance s²_k in σ²_k's place (V_own = Σ_k w_k²·s²_k/n_k) and the Welch–Satterthwaite degrees of freedom, which
is the rule before issue 61 (:func:`welch`), 2–3 tasks per workload give 1–2 degrees of freedom and t quantiles of
4–12: an interval several times wider than the data. With few tasks the spread is therefore **pooled** over the
workloads with a share: with n tasks in all over K such workloads,

    s²_p = Σ_k Σ_{i∈k} (d_ki − mean_k(d))² / (n − K),    V_pooled = s²_p·Σ_k w_k² / n_k,    df = n − K

and the interval is S·exp(±t·√V), t Student's two-sided ``level`` quantile at df: every task counts towards s²_p,
and the degrees of freedom are those of the whole sample (4–8 for 2–3 tasks of four workloads). A workload with a
single task counts towards the estimate and n and adds nothing to the sum of squares; with n − K < 1 there is no
interval, and where every task of every workload agrees exactly the interval is the point.

Unequal spreads. Pooling assumes one spread in every workload; the measured ones differ (the CPU tune's edits
spread 0.16 in log ratio, its other workloads 0.01–0.03). Where the spreads differ and the shares or the counts do
too, V_pooled is biased: a mix dominated by a workload of wide spread reads too narrow (70/30 with spreads 0.20 and
0.06: 88–90% coverage at a nominal 95%, however many tasks), one dominated by a narrow workload too wide (the CPU
run's futility stops left prose 3 tasks against the edits' 6: V_pooled twice V_own). So the rule is:

- where V_own carries :data:`WELCH_FROM` (4) degrees of freedom or more by Welch–Satterthwaite (rounded down), the
  interval is V_own at those: the rule before, which needs no common spread and, with that many degrees of
  freedom, is about as narrow as pooling (t ≤ 2.78). With 5 tasks or more in every workload it always has them;
- below that (issue 61 item 4's case: 1–3 degrees of freedom, t of 3.2–12.7), the larger of V_pooled and V_own
  (s²_p in V_own for a workload of one task), at the Welch–Satterthwaite degrees of freedom of V_own rounded down
  (:func:`satterthwaite`: a workload of one task counts s²_p at n − K), never more than n − K. With equal shares and
  equal counts the two variances are the same number; where a wide workload dominates, V_own counts its spread at its
  share, and the degrees of freedom are about its own n_k − 1: its few tasks are all that tell of its spread.

Issue 79 item 3: the rule before it took df = n − K below :data:`WELCH_FROM`, and with 2–4 tasks a workload and
spreads that differ a lot (the CPU tune's edits sd 0.16–0.25 on the log scale, its prose 0.01–0.05) that whole
sample's degrees of freedom overstated what the dominant workload's few tasks tell of its spread: the 95% interval
covered 83–91%, its misses leaning toward *faster* (a few edits that happen to agree read high and narrow). At
Satterthwaite's degrees of freedom it covers at least 94% there (``scripts/sim-error-budget``, docs/measurements.md,
2026-12-07), at the price of width where the data are thin: at 2 tasks of the dominant workload, about one degree of
freedom (t = 12.7), which is no decision at all, as it should be. ``scripts/sim-mix-coverage`` compares the rules at
2–12 tasks a workload (docs/measurements.md, 2026-12-01, for the rule before); from 6 tasks a workload the workloads'
own variances stand in every case (94–96%).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specops.bench.stats import Interval, mean, t_quantile

# From this many Welch–Satterthwaite degrees of freedom on, each workload's own variance (the rule before issue 61):
# the data then tell the spreads apart, and the simulation holds its coverage there (module docstring).
WELCH_FROM = 4


class WeightError(ValueError):
    """A mix or its times that cannot be weighed (one line). :class:`specops.tune.mix.MixError` is this class."""


@dataclass(frozen=True)
class Part:
    """One workload of the mix: its normalised share, its number of tasks, and the sum of squares of its linearised
    terms d_i = b_i/B − a_i/A about their mean."""

    share: float
    tasks: int
    squares: float


@dataclass(frozen=True)
class Terms:
    """What the interval is made of: the estimate B / A, the number of tasks n over the workloads with a share, and
    each such workload's :class:`Part`."""

    estimate: float
    n: int
    parts: tuple[Part, ...]


def terms(times: Mapping[str, Sequence[tuple[float, float]]], shares: Mapping[str, float]) -> Terms:
    """The estimate and the per-workload sums of squares. ``times``: per workload, per task (a_i, b_i), each side's
    decode time per request relative to plain decoding's (1 / ratio; 1 for plain decoding itself). ``shares``: any
    non-negative weights, normalised here, zero shares left out; every workload with a share needs at least one
    task (:class:`WeightError` otherwise)."""
    total = sum(s for s in shares.values() if s > 0)
    if total <= 0:
        raise WeightError("the mix has no workload with a share above zero")
    w = {k: s / total for k, s in shares.items() if s > 0}
    missing = [k for k in w if not times.get(k)]
    if missing:
        raise WeightError(f"no measured task of workload(s) {', '.join(missing)} in the mix")
    a_tot = sum(w[k] * mean([a for a, _ in times[k]]) for k in w)
    b_tot = sum(w[k] * mean([b for _, b in times[k]]) for k in w)
    parts = []
    for k in w:
        d = [b / b_tot - a / a_tot for a, b in times[k]]
        m = mean(d)
        parts.append(Part(w[k], len(d), sum((x - m) ** 2 for x in d)))
    return Terms(b_tot / a_tot, sum(p.tasks for p in parts), tuple(parts))


def _interval(est: float, var: float, df: int, n: int, level: float) -> Interval:
    if var <= 0:
        return Interval(est, est, est, n, df, level)
    half = t_quantile(level, df) * math.sqrt(var)
    return Interval(est, est * math.exp(-half), est * math.exp(half), n, df, level)


def pooled_variance(t: Terms) -> float | None:
    """s²_p·Σ w_k²/n_k, Var(log S) if every workload's terms had the one spread; None where n − K < 1."""
    df = t.n - len(t.parts)
    if df < 1:
        return None
    s2 = sum(p.squares for p in t.parts) / df
    return s2 * sum(p.share**2 / p.tasks for p in t.parts)


def own_variance(t: Terms) -> float | None:
    """Σ w_k²·s²_k/n_k with each workload's own s²_k (s²_p for a workload of one task); None where n − K < 1."""
    df = t.n - len(t.parts)
    if df < 1:
        return None
    s2 = sum(p.squares for p in t.parts) / df
    return sum(p.share**2 / p.tasks * (p.squares / (p.tasks - 1) if p.tasks > 1 else s2) for p in t.parts)


def satterthwaite(t: Terms) -> float | None:
    """The Welch–Satterthwaite degrees of freedom of :func:`own_variance`, (Σ c_k)² / Σ c_k²/ν_k with
    c_k = w_k²·s²_k/n_k and ν_k = n_k − 1 (a workload of one task: s²_p at ν = n − K), never more than n − K; None
    where n − K < 1."""
    df = t.n - len(t.parts)
    if df < 1:
        return None
    s2 = sum(p.squares for p in t.parts) / df
    cs = [(p.share**2 / p.tasks * (p.squares / (p.tasks - 1) if p.tasks > 1 else s2), p.tasks - 1 if p.tasks > 1
           else df) for p in t.parts]
    var = sum(c for c, _ in cs)
    if var <= 0:
        return float(df)
    return min(float(df), var**2 / sum(c**2 / dof for c, dof in cs))


def variance(t: Terms) -> tuple[float, int] | None:
    """The rule's Var(log S) and its degrees of freedom (module docstring); None where n − K < 1. Where the
    workloads' own variances carry :data:`WELCH_FROM` degrees of freedom or more by Welch–Satterthwaite, theirs
    (:func:`welch_variance`); below, the larger of :func:`pooled_variance` and :func:`own_variance` at
    :func:`satterthwaite`'s degrees of freedom rounded down (at least 1; issue 79 item 3: n − K before)."""
    welch = welch_variance(t)
    if welch is not None and math.floor(welch[1]) >= WELCH_FROM:
        return welch[0], math.floor(welch[1])
    pooled, own, df = pooled_variance(t), own_variance(t), satterthwaite(t)
    if pooled is None or own is None or df is None:
        return None
    return max(pooled, own), max(1, math.floor(df))


def welch_variance(t: Terms) -> tuple[float, float] | None:
    """Σ w_k²·s²_k/n_k and its Welch–Satterthwaite degrees of freedom; None where a workload has one task."""
    if any(p.tasks < 2 for p in t.parts):
        return None
    cs = [(p.share**2 * p.squares / (p.tasks - 1) / p.tasks, p.tasks - 1) for p in t.parts]
    var = sum(c for c, _ in cs)
    if var <= 0:
        return 0.0, float(t.n - len(t.parts))
    return var, var**2 / sum(c**2 / dof for c, dof in cs)


def speedup(times: Mapping[str, Sequence[tuple[float, float]]], shares: Mapping[str, float],
            level: float = 0.95) -> Interval:
    """The mix's speedup of arm a over reference b, B / A, with its ``level`` confidence interval for the mean
    speedup (:func:`variance`, module docstring); no interval where n − K < 1."""
    t = terms(times, shares)
    got = variance(t)
    if got is None:
        return Interval(t.estimate, None, None, t.n)
    var, df = got
    return _interval(t.estimate, var, df, t.n, level)


def welch(times: Mapping[str, Sequence[tuple[float, float]]], shares: Mapping[str, float],
          level: float = 0.95) -> Interval:
    """The rule before issue 61 (kept for the simulation and the tests that compare): each workload's own variance,
    Student's t at the Welch–Satterthwaite degrees of freedom (rounded down); no interval where a workload of the
    mix has one task."""
    t = terms(times, shares)
    got = welch_variance(t)
    if got is None:
        return Interval(t.estimate, None, None, t.n)
    var, df = got
    return _interval(t.estimate, var, max(1, math.floor(df)), t.n, level)


def request_seconds(result: Mapping[str, object] | None) -> float | None:
    """A request's decode seconds (tokens ÷ decode tok/s) from one server's result in a block (None: not known, e.g.
    a recorded block that kept only its rate)."""
    if not result:
        return None
    try:
        n, tps = float(result.get("n_predicted") or 0), float(result.get("decode_tps") or 0)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return n / tps if n > 0 and tps > 0 else None


def timed(ratios: Mapping[str, Mapping[str, float]], seconds: Mapping[str, Mapping[str, float]],
          versus: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per workload, per task: (the arm's, the other side's) decode time of a request. ``ratios``: the arm's paired
    ratio to the reference per task of each workload; ``seconds``: the reference's decode seconds per task;
    ``versus``: the other side's ratios to the reference (None: the reference itself, ratio 1; a task it lacks is
    left out). **Shares of requests** are turned into shares of time this way (issue 62 item 4): where every task's
    seconds are known, a task weighs by its own plain time (a_i = T_i / r_i, b_i = T_i / v_i), so a workload whose
    requests take longer weighs more; where any is missing, every request counts as the same time (T_i = 1: the
    shares are then taken as shares of plain time, as before)."""
    pairs = {w: {t: (r, versus[w][t] if versus is not None else 1.0) for t, r in rs.items()
                 if versus is None or t in versus.get(w, {})} for w, rs in ratios.items()}
    known = all(t in seconds.get(w, {}) for w, rs in pairs.items() for t in rs)
    return {w: [((seconds[w][t] if known else 1.0) / r, (seconds[w][t] if known else 1.0) / v)
                for t, (r, v) in rs.items()] for w, rs in pairs.items() if rs}


def time_shares(times: Mapping[str, Sequence[tuple[float, float]]], shares: Mapping[str, float]) -> dict[str, float]:
    """The shares of plain decoding's time: v_k = w_k·mean_k(b) / Σ_j w_j·mean_j(b) (equal to the given shares when
    every request counts as the same time). With them the figure reads 1 / Σ_k v_k / H_k, H_k the workload's ratio
    mean_k(b) / mean_k(a)."""
    total = sum(w for w in shares.values() if w > 0)
    plain = {k: shares[k] / total * mean([b for _, b in times[k]]) for k in shares if shares[k] > 0 and times.get(k)}
    whole = sum(plain.values())
    return {k: v / whole for k, v in plain.items()}
