"""The mix's speedup weighted by time and its interval (issue 61 item 4): the estimate 1 / Σ w / H, a variance
pooled over every task where the workloads' own carry too few degrees of freedom (never below their own sum), at
Satterthwaite's degrees of freedom (issue 79 item 3: n − K before), the workloads' own (the rule before issue 61)
where they carry enough, and Student's t quantiles at any level."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from specops.bench import weighted
from specops.bench.stats import _T975, _T995, Interval, _t_solve, geomean_ratio_ci, t975, t_cdf, t_quantile
from specops.tune import mix
from specops.tune.evidence import Blocks

pytestmark = pytest.mark.fast


def plain(ratios: dict[str, list[float]]) -> dict[str, list[tuple[float, float]]]:
    """Relative times against plain decoding itself: (1 / ratio, 1) per task."""
    return {k: [(1 / r, 1.0) for r in rs] for k, rs in ratios.items()}


def bounds(iv: Interval) -> tuple[float, float]:
    assert iv.low is not None and iv.high is not None, iv
    return iv.low, iv.high


def rule(terms: weighted.Terms) -> tuple[float, int]:
    got = weighted.variance(terms)
    assert got is not None
    return got


def welch(terms: weighted.Terms) -> tuple[float, float]:
    got = weighted.welch_variance(terms)
    assert got is not None
    return got


# per-task ratios of four workloads at 2–3 tasks each, with spread in every workload
FEW = {"code": [1.02, 0.97, 1.05], "edit": [1.30, 1.12], "prose": [0.99, 1.03, 0.96], "tool_calls": [1.01, 1.06]}


def test_the_estimate_is_the_share_weighted_harmonic_mean():
    shares = {"code": 0.1, "edit": 0.4, "prose": 0.3, "tool_calls": 0.2}
    harmonic = {k: len(rs) / sum(1 / r for r in rs) for k, rs in FEW.items()}
    got = weighted.speedup(plain(FEW), shares)
    assert got.estimate == pytest.approx(1 / sum(w / harmonic[k] for k, w in shares.items()))
    low, high = bounds(got)
    assert got.n == 10 and low < got.estimate < high
    # the shares are normalised inside; a zero share leaves its workload out, tasks and all
    assert weighted.speedup(plain(FEW), {k: 10 * w for k, w in shares.items()}) == got
    two = weighted.speedup(plain(FEW), {"edit": 1, "prose": 1, "code": 0})
    assert two.n == 5 and two.estimate == pytest.approx(1 / (0.5 / harmonic["edit"] + 0.5 / harmonic["prose"]))


def test_against_another_arm_the_ratio_is_of_the_mean_times():
    """Arm a against arm b, each timed against plain decoding: S = B / A with A, B the share-weighted mean times."""
    times = {"edit": [(0.5, 0.8), (0.7, 0.9)], "prose": [(1.1, 1.0), (1.0, 1.05), (0.9, 0.95)]}
    a = 0.7 * (0.5 + 0.7) / 2 + 0.3 * (1.1 + 1.0 + 0.9) / 3
    b = 0.7 * (0.8 + 0.9) / 2 + 0.3 * (1.0 + 1.05 + 0.95) / 3
    assert weighted.speedup(times, {"edit": 0.7, "prose": 0.3}).estimate == pytest.approx(b / a)


def test_at_two_or_three_tasks_the_degrees_of_freedom_are_satterthwaites_not_n_minus_k():
    """FEW's workloads carry 1–2 degrees of freedom each, and the edits' wide pair dominates the workloads' own sum:
    Welch–Satterthwaite gives it 1.9, floored to 1 (t = 12.7). The rule takes the larger of the pooled and the own
    variance (here the own) at those degrees of freedom (issue 79 item 3): at n − K = 10 − 4 = 6 (t = 2.45, the rule
    of issue 61) the whole sample's degrees of freedom overstated what the edits' two tasks tell of their spread, and
    the 95% interval covered 83–91% at 2–4 tasks a workload with the CPU tune's spreads."""
    shares = dict.fromkeys(FEW, 1.0)
    terms = weighted.terms(plain(FEW), shares)
    var, df = rule(terms)
    old_var, old_df = welch(terms)
    assert df == 1 and 1 < old_df < 2 and var == old_var and weighted.satterthwaite(terms) == pytest.approx(old_df)
    assert var == max(weighted.pooled_variance(terms) or 0, weighted.own_variance(terms) or 0)
    new, old = weighted.speedup(plain(FEW), shares), weighted.welch(plain(FEW), shares)
    assert new.df == 1 and bounds(new) == pytest.approx(bounds(old))  # every workload has two tasks: the rule before
    assert math.log(bounds(new)[1] / new.estimate) == pytest.approx(t975(1) * math.sqrt(var))
    # two tasks in every workload: Satterthwaite's 1.9 again, never the n − K = 4 of issue 61's rule
    two = {k: rs[:2] for k, rs in FEW.items()}
    assert rule(weighted.terms(plain(two), shares))[1] == 1


def test_the_pooled_variance_is_over_n_minus_k_and_the_degrees_of_freedom_never_more():
    """Pooled: the sum of squares over every task of the workloads with a share, over n − K; the interval's degrees
    of freedom are Satterthwaite's (2.8 here, floored), never more than n − K."""
    rng = random.Random(7)
    times = plain({k: [math.exp(rng.gauss(0, 0.1)) for _ in range(m)]
                   for k, m in (("code", 2), ("edit", 3), ("prose", 2))})
    terms = weighted.terms(times, {"code": 1, "edit": 2, "prose": 1})
    assert terms.n == 7 and len(terms.parts) == 3
    ss = sum(p.squares for p in terms.parts)
    pooled = ss / (7 - 3) * sum(p.share**2 / p.tasks for p in terms.parts)
    assert weighted.pooled_variance(terms) == pytest.approx(pooled)
    var, df = rule(terms)
    assert df == math.floor(weighted.satterthwaite(terms) or 0) == 2 < 7 - 3 and var >= pooled


def test_a_workload_with_one_task_counts_and_none_left_means_no_interval():
    one = {"code": [1.04], "edit": [1.30, 1.10, 1.22], "prose": [1.0, 0.97]}
    got = weighted.speedup(plain(one), dict.fromkeys(one, 1.0))
    terms = weighted.terms(plain(one), dict.fromkeys(one, 1.0))
    assert got.has_ci and got.n == 6 and rule(terms)[1] == 3
    assert terms.parts[0].squares == 0  # the single task adds nothing to the sum of squares
    # the old rule had no interval with a workload of one task
    assert not weighted.welch(plain(one), dict.fromkeys(one, 1.0)).has_ci
    # one task in every workload: n − K = 0
    single = weighted.speedup(plain({"code": [1.04], "edit": [1.3]}), {"code": 1, "edit": 1})
    assert not single.has_ci and single.n == 2
    assert single.estimate == pytest.approx(1 / (0.5 / 1.04 + 0.5 / 1.3))


def test_no_spread_is_a_point_and_bad_input_is_a_mix_error():
    got = weighted.speedup(plain({"code": [2.0, 2.0], "prose": [0.5, 0.5]}), {"code": 1, "prose": 1})
    assert got.low == got.high == pytest.approx(0.8)
    with pytest.raises(mix.MixError, match=r"no measured task of workload\(s\) prose in the mix"):
        weighted.speedup(plain({"code": [1.0, 1.1]}), {"code": 1, "prose": 1})
    with pytest.raises(mix.MixError, match="no workload with a share above zero"):
        weighted.speedup(plain({"code": [1.0, 1.1]}), {"code": 0})
    assert mix.MixError is weighted.WeightError and issubclass(mix.MixError, ValueError)


def test_level_099_is_wider_than_095_and_mix_passes_it_on():
    shares = dict.fromkeys(FEW, 1.0)
    p95, p99 = weighted.speedup(plain(FEW), shares), weighted.speedup(plain(FEW), shares, level=0.99)
    (lo95, hi95), (lo99, hi99) = bounds(p95), bounds(p99)
    assert p99.estimate == p95.estimate and lo99 < lo95 and hi99 > hi95
    ratio = math.log(hi99 / p99.estimate) / math.log(hi95 / p95.estimate)
    assert ratio == pytest.approx(63.657 / 12.706)  # t(1) at 99% against 95% (Satterthwaite's 1.9, floored)
    assert mix.speedup(plain(FEW), shares, level=0.99) == p99 and mix.speedup(plain(FEW), shares) == p95
    lo80, hi80 = bounds(weighted.speedup(plain(FEW), shares, level=0.80))
    assert lo95 < lo80 < hi80 < hi95


def test_with_enough_tasks_each_workload_keeps_its_own_variance():
    """From WELCH_FROM degrees of freedom by Welch–Satterthwaite on, the rule is the rule before: a narrow workload
    with a large share and few tasks is not charged a wide workload's spread."""
    rng = random.Random(3)
    many = {"edit": [math.exp(rng.gauss(0.15, 0.16)) for _ in range(8)],
            "prose": [math.exp(rng.gauss(0.0, 0.01)) for _ in range(6)]}
    shares = {"edit": 0.2, "prose": 0.8}
    terms = weighted.terms(plain(many), shares)
    var, df = rule(terms)
    old_var, old_df = welch(terms)
    assert df == math.floor(old_df) >= weighted.WELCH_FROM and var == old_var
    assert (weighted.pooled_variance(terms) or 0) > 2 * var  # what pooling would have charged
    assert weighted.speedup(plain(many), shares) == weighted.welch(plain(many), shares)


def test_where_a_wide_workload_dominates_the_own_variance_is_the_floor():
    """Two tasks each, 70/30: pooling would spread the edits' wide terms over prose's narrow ones; the interval takes
    the workloads' own sum where it is the larger, at the edits' own degree of freedom (Satterthwaite: 1.0; n − K = 2
    before issue 79 item 3)."""
    few = {"edit": [1.45, 1.0], "prose": [1.0, 1.01]}
    terms = weighted.terms(plain(few), {"edit": 0.7, "prose": 0.3})
    own, pooled = weighted.own_variance(terms), weighted.pooled_variance(terms)
    assert own is not None and pooled is not None and own > pooled
    assert weighted.variance(terms) == (own, 1)


def test_t_quantile_reads_the_tables_and_solves_other_levels():
    for df in range(1, 31):
        assert t_quantile(0.95, df) == _T975[df - 1] == t975(df)
        assert t_quantile(0.99, df) == _T995[df - 1]
        # the tables, printed to 3 decimals, against the solved distribution function
        assert _t_solve(0.975, df) == pytest.approx(_T975[df - 1], abs=6e-4)
        assert _t_solve(0.995, df) == pytest.approx(_T995[df - 1], abs=6e-4)
    assert t_quantile(0.99, 1) == 63.657 and t_quantile(0.99, 30) == 2.750
    for df in (31, 40, 60, 120, 1000):  # Cornish-Fisher beyond the tables
        assert t_quantile(0.99, df) == pytest.approx(_t_solve(0.995, df), abs=1e-3)
        assert t_quantile(0.95, df) == pytest.approx(_t_solve(0.975, df), abs=1e-3)
    # other levels, from the distribution function: t(1) is Cauchy, tan(π(p − 1/2))
    assert t_quantile(0.90, 1) == pytest.approx(math.tan(math.pi * 0.45), rel=1e-8)
    assert t_quantile(0.90, 10) == pytest.approx(1.812, abs=6e-4)
    assert t_quantile(0.80, 5) == pytest.approx(1.476, abs=6e-4)
    assert t_cdf(0.0, 7) == pytest.approx(0.5) and t_cdf(-2.365, 7) == pytest.approx(0.025, abs=1e-4)
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="level"):
            t_quantile(bad, 5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0.95, 0)


@pytest.mark.parametrize("per_workload", [2, 3])
def test_on_recorded_small_files_the_whole_interval_takes_the_edits_own_few_degrees_of_freedom(per_workload):
    """Issue 61 item 4's check on recorded blocks (tests/fixtures/cpu-tune-blocks, the CPU tune at 12 tasks a
    workload) cut to 2-3 tasks per workload, redone for issue 79 item 3: the edits (sd 0.18) carry nearly all of the
    equal-share figure's variance, so its degrees of freedom are about theirs (Satterthwaite: 1.2 at 2 tasks, 2.8 at
    3), not the whole sample's n − K (4, 8), and the interval is the workloads' own (the rule before issue 61): wider
    than a t-interval pooling every paired ratio alike, which at these counts is what read too sure."""
    path = Path(__file__).parents[1] / "fixtures" / "cpu-tune-blocks" / "demo-limit12-20261128c.jsonl"
    kept: dict[str, int] = {}
    rows = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if kept.get(rec["workload"], 0) < per_workload:
            kept[rec["workload"]] = kept.get(rec["workload"], 0) + 1
            rows.append(rec)
    blocks = Blocks(rows)
    arm, ref = "exact-ngram-mod", "baseline"
    shares = {w: 1 / len(kept) for w in kept}
    times = blocks.relative_times(arm, ref)
    whole = weighted.speedup(times, shares)
    before = weighted.welch(times, shares)
    pooled = geomean_ratio_ci(list(blocks.task_ratios(arm, ref).values()))
    assert whole.has_ci and pooled.has_ci and before.has_ci
    n, k = sum(len(v) for v in times.values()), len(times)
    terms = weighted.terms(times, shares)
    assert whole.df == math.floor(weighted.satterthwaite(terms) or 0) == per_workload - 1 < n - k
    assert bounds(whole) == pytest.approx(bounds(before)), (whole.fmt(), before.fmt())
    assert math.log(whole.high / whole.estimate) > 1.5 * math.log(pooled.high / pooled.estimate), (whole.fmt(),
                                                                                                   pooled.fmt())
