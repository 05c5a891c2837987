"""Without --mix the tune weighs the workloads by the task set's own shares, not by how many of their tasks ran: the
measurement stops a candidate for futility after 3 tasks of a workload and runs its gains to the end, so workloads
end with unequal counts. On a real CPU tune's blocks (tests/fixtures/cpu-tune-blocks) cut to 3 tasks of code, prose
and tool calls and 5 edits, the whole figure is the stratified one with equal shares; where a candidate that can
still be chosen has no task of a workload, the pooled figure stands and the record says why (one task is enough since
the whole figure's variance is pooled over the workloads, issue 61)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from specops import kinds
from specops.bench.arms import BASELINE
from specops.tune import choose, decide, evidence, mix
from tests.unit.test_tune_settle import CANDIDATES, cpu_results

pytestmark = pytest.mark.fast

MOD = "exact-ngram-mod"
EQUAL = {"code": 0.25, "edit": 0.25, "prose": 0.25, "tool_calls": 0.25}  # the set's 6 tasks per workload


def cut(keep: dict[str, int], drop: dict[str, list[str]] | None = None, first: bool = True) -> dict[str, Any]:
    """The CPU tune's results with each workload's first ``keep[w]`` blocks (all where not named), and the arms of
    ``drop`` taken out of every block of that workload after its first (``first``: of every block)."""
    results = cpu_results()
    seen: dict[str, int] = {}
    rows = []
    for rec in results["blocks"]:
        wl = rec["workload"]
        seen[wl] = seen.get(wl, 0) + 1
        if seen[wl] > keep.get(wl, 99):
            continue
        rec = json.loads(json.dumps(rec))
        for arm in (drop or {}).get(wl, []) if seen[wl] > 1 or not first else []:
            rec["results"].pop(arm, None)
        rows.append(rec)
    results["blocks"] = rows
    results["outcome"] = {"blocks": len(rows), "elapsed_s": rows[-1]["elapsed_s"]}
    return results


def decided(results: dict[str, Any], rule: str = "identical", shares: dict[str, float] | None = None,
            tasks: list[str] | None = None) -> tuple[list[decide.Measured], decide.Choice]:
    args = argparse.Namespace(rule=rule, margin=0.05, mix=shares, tasks=tasks)
    measured, choice, _ = choose._from_blocks(args, results, CANDIDATES, CANDIDATES)
    return measured, choice


def test_unequal_counts_weigh_each_workload_by_its_share_of_the_task_set() -> None:
    """3 tasks of code, prose and tool calls (stopped: nothing pays there), 5 edits (ngram-mod's gain, still
    open): pooled, the edits weigh 5/14 of the figure (1.05x [0.99, 1.12]); by the set's shares a quarter (1.04x
    [0.98, 1.09])."""
    results = cut({"code": 3, "prose": 3, "tool_calls": 3})
    blocks = evidence.Blocks(results["blocks"])
    assert {w: len(t) for w, t in blocks.relative_times(MOD, BASELINE).items()} == {"code": 3, "edit": 5, "prose": 3,
                                                                                    "tool_calls": 3}
    measured, choice = decided(results)
    fig = {m.name: m.speedup for m in measured}[MOD]
    stratified, pooled = blocks.mix_interval(MOD, BASELINE, EQUAL), blocks.interval(MOD, BASELINE)
    assert stratified is not None and pooled is not None
    assert (fig.estimate, fig.low, fig.high) == pytest.approx((stratified.estimate, stratified.low, stratified.high))
    assert fig.estimate == pytest.approx(1.036, abs=0.001) and pooled.estimate == pytest.approx(1.054, abs=0.001)
    assert pooled.high - fig.high > 0.02  # type: ignore[operator]  # the pooled one leans on the 5 edits
    assert choice.chosen == kinds.PLAIN and not choice.settled and choice.runner_up == MOD
    assert "0.25/1.14 edit" in choice.reason  # the mix's arithmetic, each workload a quarter
    assert choice.weighed == ("no mix given: each workload of the standard set weighs the same (tasks code 6, edit 6, "
                              "prose 6, tool_calls 6), weighted by time: 1 / Σ share ÷ the workload's harmonic mean "
                              "ratio (a workload measured longer weighs no more)")
    # the whole figure's projection (its pooled spread) and the open workload's
    assert [line.split(":")[0] for line in choice.settle] == ["overall", "edit"]


def test_a_workload_cut_to_one_task_keeps_the_shares() -> None:
    """One task of tool calls: the pooled within-workload variance gives the whole figure an interval all the same."""
    results = cut({"code": 3, "prose": 3, "tool_calls": 1})
    blocks = evidence.Blocks(results["blocks"])
    measured, choice = decided(results)
    fig = {m.name: m.speedup for m in measured}[MOD]
    stratified = blocks.mix_interval(MOD, BASELINE, EQUAL)
    assert stratified is not None and stratified.has_ci
    assert (fig.estimate, fig.low, fig.high) == (stratified.estimate, stratified.low, stratified.high)
    assert choice.weighed.startswith("no mix given: each workload of the standard set weighs the same")


def test_a_workload_a_candidate_never_ran_falls_back_to_the_pooled_figure_and_says_so() -> None:
    results = cut({}, drop={"tool_calls": [MOD]}, first=False)
    blocks = evidence.Blocks(results["blocks"])
    measured, choice = decided(results)
    fig = {m.name: m.speedup for m in measured}[MOD]
    pooled = blocks.interval(MOD, BASELINE)
    assert pooled is not None and (fig.estimate, fig.low, fig.high) == (pooled.estimate, pooled.low, pooled.high)
    assert choice.weighed.startswith(mix.describe(None))
    assert choice.weighed.endswith(f"not the task set's shares: {MOD} has no task of tool_calls, the measurement ended "
                                   "before it had one")
    assert "the mix, weighted by time" not in choice.reason


def test_a_candidate_out_under_the_identity_rule_does_not_force_the_fallback() -> None:
    """ngram-simple's output differed (out under rule identical): no code task of it leaves the shares in place;
    under rule fastest it could still be chosen, and the pooled figure stands."""
    results = cut({}, drop={"code": ["exact-ngram-simple"]}, first=False)
    assert decided(results)[1].weighed.startswith("no mix given: each workload of the standard set weighs the same")
    fastest = decided(results, rule="fastest")[1].weighed
    assert "exact-ngram-simple has no task of code" in fastest


def test_a_given_mix_and_a_single_workload() -> None:
    """A given mix is said as given; a single workload is weighed by time as any mix (one rule everywhere)."""
    given = {"edit": 0.7, "prose": 0.3}
    assert decided(cut({}), shares=given)[1].weighed == mix.describe(given)
    results = cpu_results()
    results["plan"]["workload_counts"] = {"edit": 6}
    results["blocks"] = [b for b in results["blocks"] if b["workload"] == "edit"]
    assert decided(results)[1].weighed == ("no mix given: one workload (edit, 6 tasks), weighted by time: 1 / its "
                                           "harmonic mean ratio")


def test_the_standard_set_weighs_its_workloads_the_same_and_a_teams_file_by_its_counts() -> None:
    """The standard set's files hold 6 to 15 tasks a workload (code 6): measured up to 12, its counts are an accident
    of the files, so each workload weighs a quarter. A team's own file weighs by its counts (its traffic's shares, as
    `specops tasks --from-requests` wrote them), unless a mix is given."""
    results = cut({"code": 3, "prose": 3, "tool_calls": 3})
    results["plan"]["workload_counts"] = {"code": 6, "edit": 12, "prose": 12, "tool_calls": 12}
    blocks = evidence.Blocks(results["blocks"])
    measured, choice = decided(results)
    fig = {m.name: m.speedup for m in measured}[MOD]
    equal = blocks.mix_interval(MOD, BASELINE, EQUAL)
    assert equal is not None and fig.estimate == pytest.approx(equal.estimate)
    assert choice.weighed.startswith("no mix given: each workload of the standard set weighs the same (tasks code 6, "
                                     "edit 12"), choice.weighed
    measured, choice = decided(results, tasks=["team.jsonl"])
    fig = {m.name: m.speedup for m in measured}[MOD]
    counts = blocks.mix_interval(MOD, BASELINE, {"code": 6 / 42, "edit": 12 / 42, "prose": 12 / 42,
                                                 "tool_calls": 12 / 42})
    assert counts is not None and fig.estimate == pytest.approx(counts.estimate)
    assert fig.estimate != pytest.approx(equal.estimate)  # the edits' gain weighs 2/7 instead of 1/4
    assert choice.weighed.startswith("no mix given: each workload weighs by its share of the task set (code 6, edit 12")
