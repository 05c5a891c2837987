"""The paired, sequential design: block order, ratios inside blocks, stopping, the A/A check."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specops.bench.design import (
    AA,
    BASELINE,
    FASTER,
    NO_GAIN,
    SLOWER,
    Design,
    conclusion,
    rel_half_width,
)
from specops.bench.stats import Interval
from specops.bench.verdict import INCONCLUSIVE

TASKS = {"code": [f"c{i}" for i in range(8)], "prose": [f"p{i}" for i in range(6)]}


def drive(d: Design, speeds: dict[str, float], drift: float = 0.0, rep: int = 0, limit: int = 1000) -> list:
    """Run blocks until the design has none left; every server's tok/s is its speed × a drift factor
    shared by the whole block (the machine getting slower block by block)."""
    blocks = []
    while (b := d.next_block(rep)) is not None and len(blocks) < limit:
        factor = 1.0 - drift * b.index
        noise = {a: 1.0 + 0.01 * math.sin(7 * b.index + i) for i, a in enumerate(b.arms)}
        d.add(b, {a: speeds.get(a, 10.0) * factor * noise[a] for a in b.arms})
        blocks.append(b)
    d.finish_rep(rep)
    return blocks


def test_workloads_take_turns_and_every_block_has_both_baselines() -> None:
    d = Design(["x"], TASKS, min_tasks=None)
    b1, b2, b3 = d.next_block(0), None, None
    assert b1 is not None
    d.add(b1, {a: 10.0 for a in b1.arms})
    b2 = d.next_block(0)
    assert b2 is not None
    d.add(b2, {a: 10.0 for a in b2.arms})
    b3 = d.next_block(0)
    assert b3 is not None
    assert [b1.workload, b2.workload, b3.workload] == ["code", "prose", "code"]
    assert b1.arms == (BASELINE, AA, "x")
    assert b1.task != b3.task


def test_exhaustive_runs_every_task_of_every_rep() -> None:
    d = Design(["x", "y"], TASKS, reps=2, min_tasks=None)
    n = len(drive(d, {"x": 8.0}, rep=0)) + len(drive(d, {"x": 8.0}, rep=1))
    assert n == 2 * (8 + 6)
    assert {t for t in d.task_ratios("x")} == set(TASKS["code"]) | set(TASKS["prose"])
    assert all(d.status[a][w].stopped == "exhausted" for a in ("x", "y") for w in TASKS)


def test_arms_stop_as_soon_as_their_interval_settles_the_question() -> None:
    d = Design(["loser", "same", "winner"], TASKS, min_tasks=4, half_width=0.05)
    drive(d, {"loser": 5.0, "same": 10.0, "winner": 13.0})
    for wl in TASKS:
        assert d.status["loser"][wl].stopped == "slower"
        assert d.n_tasks("loser", wl) == 4
        assert d.conclusion("loser", wl) == SLOWER
        assert d.status["same"][wl].stopped == "no gain"  # wholly below 1.05: nothing worth deploying
        assert d.conclusion("same", wl) == NO_GAIN
        assert d.status["winner"][wl].stopped == "faster" and d.conclusion("winner", wl) == FASTER


def test_a_noisy_arm_near_one_runs_until_its_interval_decides() -> None:
    """±15% task to task around 1.02: neither below 1.05 nor precise after four tasks; it keeps running."""
    d = Design(["noisy"], {"w": [f"t{i}" for i in range(12)]}, min_tasks=4, half_width=0.05)
    factors = [1.15, 0.9, 1.2, 0.85, 1.1, 0.95, 1.05, 1.0, 1.02, 0.98, 1.01, 1.0]
    while (b := d.next_block(0)) is not None:
        d.add(b, {BASELINE: 10.0, AA: 10.0, "noisy": 10.2 * factors[b.index]})
    d.finish_rep(0)
    assert d.n_tasks("noisy", "w") > 4


def test_drift_cancels_inside_blocks() -> None:
    """The machine slows by 2% per block: a fresh-server-per-arm design would see it as a loss.
    Paired inside each block, the equal arm stays at 1.0 and the A/A check at 1.0."""
    d = Design(["same"], TASKS, min_tasks=None)
    drive(d, {}, drift=0.02)
    for wl in TASKS:
        iv = d.interval("same", wl)
        aa = d.interval(AA, wl)
        assert iv is not None and aa is not None
        assert iv.estimate == pytest.approx(1.0, abs=0.02)
        assert aa.estimate == pytest.approx(1.0, abs=0.02)


def test_biased_second_baseline_shows_in_the_aa_interval() -> None:
    d = Design(["x"], TASKS, min_tasks=None)
    drive(d, {AA: 11.0})
    aa = d.interval(AA, "code")
    assert aa is not None and aa.significantly_above(1.0)


def test_failed_arm_stops_everywhere() -> None:
    d = Design(["x", "y"], TASKS)
    d.fail("x", "server exited 3")
    b = d.next_block(0)
    assert b is not None and "x" not in b.arms and "y" in b.arms
    assert all(st.stopped.startswith("failed") for st in d.status["x"].values())


def test_budget_marks_running_arms() -> None:
    d = Design(["x"], TASKS)
    d.out_of_budget()
    assert d.next_block(0) is None
    assert {st.stopped for st in d.status["x"].values()} == {"budget"}
    assert d.conclusion("x", "code") == INCONCLUSIVE


def test_only_loaded_arms_are_scheduled_and_late_arms_catch_up() -> None:
    d = Design(["a", "b"], {"code": ["t1", "t2", "t3"]}, min_tasks=None)
    b1 = d.next_block(0, loaded=["a"])
    assert b1 is not None and b1.arms == (BASELINE, AA, "a")
    d.add(b1, {x: 10.0 for x in b1.arms})
    b2 = d.next_block(0, loaded=["a", "b"])
    assert b2 is not None and b2.arms == (BASELINE, AA, "b") and b2.task == b1.task


def test_order_is_reproducible_and_balances_positions() -> None:
    """Every server holds every position once per k blocks of a workload (the first one runs a little slower)."""
    d = Design(["a", "b"], {"w": [f"t{i}" for i in range(8)]}, min_tasks=None)
    firsts = []
    for _ in range(8):
        b = d.next_block(0)
        assert b is not None
        assert d.shuffled(b) == d.shuffled(b)
        firsts.append(d.shuffled(b)[0])
        d.add(b, {x: 10.0 for x in b.arms})
    assert sorted(firsts) == sorted([BASELINE, AA, "a", "b"] * 2)


def test_conclusions() -> None:
    assert conclusion(Interval(0.8, 0.7, 0.9, 5), 0.05) == SLOWER
    assert conclusion(Interval(1.3, 1.1, 1.6, 5), 0.05) == FASTER
    assert conclusion(Interval(1.0, 0.97, 1.03, 5), 0.05) == NO_GAIN
    assert conclusion(Interval(1.0, 0.8, 1.2, 5), 0.05) == INCONCLUSIVE
    assert conclusion(Interval(1.0, None, None, 1), 0.05) == INCONCLUSIVE
    assert conclusion(None, 0.05) == INCONCLUSIVE
    assert rel_half_width(Interval(1.0, None, None, 1)) == math.inf


def test_mix_weighs_workloads_equally() -> None:
    d = Design(["x"], TASKS, min_tasks=None)
    drive(d, {})
    for task in TASKS["code"]:
        d.ratios["x"]["code"][task] = [2.0]
    for task in TASKS["prose"]:
        d.ratios["x"]["prose"][task] = [0.5]
    mix = d.mix_interval("x")
    assert mix is not None and mix.estimate == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.3, 3.0), min_size=2, max_size=6), st.floats(0.5, 2.0))
def test_ratio_is_invariant_to_a_block_wide_factor(speeds: list[float], factor: float) -> None:
    """Whatever slows or speeds the whole machine during a block leaves the ratios unchanged."""
    arms = [f"a{i}" for i in range(len(speeds))]
    d1, d2 = Design(arms, {"w": ["t"]}, min_tasks=None), Design(arms, {"w": ["t"]}, min_tasks=None)
    b = d1.next_block(0)
    assert b is not None
    tps = {BASELINE: 10.0, AA: 10.5, **dict(zip(arms, speeds, strict=True))}
    d1.add(b, tps)
    d2.add(b, {k: v * factor for k, v in tps.items()})
    for a in arms:
        assert d1.task_ratios(a) == pytest.approx(d2.task_ratios(a))


def test_identity_reference_runs_as_long_as_its_arm() -> None:
    d = Design(["exact-baseline", "exact-n2", "loser"], TASKS, min_tasks=4,
               references={"exact-baseline": ["exact-n2"]})
    drive(d, {"exact-n2": 5.0, "loser": 5.0, "exact-baseline": 5.0})
    for wl in TASKS:
        assert d.status["exact-n2"][wl].stopped == "slower"
        assert d.status["exact-baseline"][wl].stopped == "reference no longer needed"
        assert d.n_tasks("exact-baseline", wl) == d.n_tasks("exact-n2", wl) == 4


def test_the_interval_is_for_the_task_set_and_closes_as_its_tasks_run_out() -> None:
    """Two kinds of task (1.4× and 0.8×): after half the tasks the interval is wide; with every task in, only
    measurement noise is left (tiny here), so even a split workload gets a conclusion."""
    tasks = {"w": [f"t{i}" for i in range(10)]}
    d = Design(["mixed"], tasks, min_tasks=None)
    while (b := d.next_block(0)) is not None:
        f = 1.4 if int(b.task[1:]) % 2 else 0.8
        d.add(b, {BASELINE: 10.0, AA: 10.0 * (1 + 0.005 * (-1) ** b.index), "mixed": 10.0 * f})
        if b.index == 4:
            half = d.interval("mixed", "w")
    full = d.interval("mixed", "w")
    assert half is not None and full is not None and full.has_ci
    assert rel_half_width(full) < 0.05 < rel_half_width(half)
    assert full.estimate == pytest.approx(math.sqrt(1.4 * 0.8), rel=0.01)
    plain = Design(["mixed"], tasks, min_tasks=None, fpc=False)
    plain.ratios = d.ratios
    assert rel_half_width(plain.interval("mixed", "w")) > 0.2  # type: ignore[arg-type]


def test_a_new_task_of_the_workload_gets_its_own_wider_interval() -> None:
    """Issue 29's example: per-task ratios 1.34, 0.99, 1.68 and 1.24 on a 4-task workload. With every task in,
    the set's interval holds measurement noise only and is narrow; a new task of the same kind could land
    anywhere the tasks spread, so its prediction interval takes in both 0.9 and 1.8."""
    tasks = {"w": ["a", "b", "c", "d"]}
    factor = dict(zip(tasks["w"], (1.34, 0.99, 1.68, 1.24), strict=True))
    d = Design(["x"], tasks, min_tasks=None)
    while (b := d.next_block(0)) is not None:
        d.add(b, {BASELINE: 10.0, AA: 10.0 * (1 + 0.01 * (-1) ** b.index), "x": 10.0 * factor[b.task]})
    these, new = d.interval("x", "w"), d.new_task_interval("x", "w")
    assert these is not None and new is not None and these.has_ci and new.has_ci
    assert new.estimate == pytest.approx(these.estimate)
    assert new.low < 0.9 and new.high > 1.8  # type: ignore[operator]
    assert rel_half_width(these) < 0.1 < rel_half_width(new)
    assert new.low < these.low and new.high > these.high  # type: ignore[operator]


def test_aa_check_settles_and_then_leaves_the_blocks() -> None:
    d = Design(["x"], {"w": [f"t{i}" for i in range(12)]}, min_tasks=4, half_width=0.05, aa_precision=0.025)
    swing = [1.3, 0.8, 1.25, 0.85, 1.2, 0.9, 1.15, 0.95, 1.1, 1.0, 1.05, 1.0]  # an arm that takes long to settle
    seen = []
    while (b := d.next_block(0)) is not None:
        seen.append(AA in b.arms)
        d.add(b, {a: 10.0 * (1 + 0.003 * math.sin(b.index + i)) for i, a in enumerate(b.arms)}
              | {"x": 10.0 * swing[b.index]})
    assert seen[:4] == [True] * 4 and len(seen) > 5 and not any(seen[4:]), seen
    assert d.aa_pooled() is not None and rel_half_width(d.aa_pooled()) <= 0.025  # type: ignore[arg-type]
    never = Design(["x"], {"w": ["a", "b", "c", "d", "e"]}, min_tasks=None)
    assert all(AA in b.arms for b in drive(never, {"x": 12.0}))


def _noisy_run(d: Design, differ_at: dict[str, int]) -> None:
    """A noisy arm near 1.02 (never settles by its interval); its answer differs from its reference's from
    block ``differ_at[arm]`` on."""
    factors = [1.15, 0.9, 1.2, 0.85, 1.1, 0.95, 1.05, 1.0, 1.02, 0.98, 1.01, 1.0]
    while (b := d.next_block(0)) is not None:
        speeds = {BASELINE: 10.0, AA: 10.0, **{a: 10.2 * factors[b.index % 12] for a in b.arms
                                             if a not in (BASELINE, AA)}}
        texts = {a: "same answer" for a in b.arms}
        for arm, at in differ_at.items():
            if arm in texts and b.index >= at:
                texts[arm] = "another answer"
        d.add(b, speeds, texts)
    d.finish_rep(0)


def test_under_rule_identical_a_differing_answer_stops_the_arm_at_once() -> None:
    """The recommendation (rule 'identical') can never pick an arm whose answer differed once: measuring it
    further cannot change the pick, so it stops in that block, before its interval settles, and counts as
    a confident conclusion."""
    from specops.bench.design import CONFIDENT, DIFFERS
    tasks = {"w": [f"t{i}" for i in range(12)]}
    d = Design(["noisy", "steady"], tasks, min_tasks=4, half_width=0.05, identity_stop=True)
    _noisy_run(d, {"noisy": 1})
    assert d.status["noisy"]["w"].stopped == DIFFERS and DIFFERS in CONFIDENT
    assert d.n_tasks("noisy", "w") == 2  # stopped in the block where it first differed
    assert d.status["steady"]["w"].stopped != DIFFERS and d.n_tasks("steady", "w") > 4


def test_without_the_identity_stop_a_differing_arm_runs_on() -> None:
    """Rule 'fastest' and the exhaustive reference run never stop on identity."""
    tasks = {"w": [f"t{i}" for i in range(12)]}
    d = Design(["noisy"], tasks, min_tasks=4, half_width=0.05)
    _noisy_run(d, {"noisy": 1})
    assert d.n_tasks("noisy", "w") > 4 and d.status["noisy"]["w"].stopped != "output differs"
    ex = Design(["noisy"], tasks, min_tasks=None, identity_stop=True)
    _noisy_run(ex, {"noisy": 0})
    assert ex.n_tasks("noisy", "w") == 12 and ex.status["noisy"]["w"].stopped == "exhausted"


def test_identity_is_compared_with_the_arms_own_reference() -> None:
    """An exact-profile arm is compared with its exact-profile baseline, not the plain baseline (their texts
    may legitimately differ from the plain baseline's)."""
    tasks = {"w": [f"t{i}" for i in range(8)]}
    d = Design(["exact-baseline", "exact-n2"], tasks, min_tasks=4, identity_stop=True,
               references={"exact-baseline": ["exact-n2"]})
    while (b := d.next_block(0)) is not None:
        texts = {a: ("exact text" if a.startswith("exact") else "plain text") for a in b.arms}
        d.add(b, {a: 10.0 for a in b.arms}, texts)
    assert d.status["exact-n2"]["w"].stopped != "output differs"


def test_a_very_wide_interval_at_a_high_level_stays_a_number():
    """A tune's MTP run read an interval of [7e-06, 1.5e6] at 1 degree of freedom; scaled to 99.9% its ends overflowed
    a float (OverflowError in the whole suite, 2026-12-07). Now bounded on the log scale, and never deployable."""
    from specops.bench.stats import Interval
    from specops.bench.verdict import at_level, deployable

    iv = Interval(estimate=3.37, low=7.37e-06, high=1.54e6, n=4, df=1, level=0.95)
    wide = at_level(iv, 0.999125)
    assert 0 < wide.low < iv.low and wide.high > iv.high and wide.level == 0.999125
    assert not deployable(iv, 0.05, 0.999125)
