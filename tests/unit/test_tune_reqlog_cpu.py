"""A CPU tune on a team's request log with a 70/30 edit/prose mix (issue 61's trial, redone with the plan that follows
the mix): its recorded blocks (tests/fixtures/cpu-tune-blocks/reqlog-mix7030-20261201.jsonl) go through the decision
code. No block measured code or tool calls; the held-back types were measured on the tasks ngram-mod ran, with their
paired ratios; the answer is the one the data give (undecided on 12 edits) and the record says what would settle it.
Replayed through the design, the same blocks end sooner than the run did: once its edits are used up, the prose tasks
left cannot settle the whole figure."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from specops import kinds
from specops.tune import choose
from specops.tune.evidence import Blocks
from tests.unit.test_bench_allocate import MOD, recorded, replay, tune_design

pytestmark = pytest.mark.fast

NAME = "reqlog-mix7030-20261201.jsonl"
ROWS = [json.loads(line) for line in (Path(__file__).parents[1] / "fixtures" / "cpu-tune-blocks" / NAME)
        .read_text().splitlines()]
SIMPLE, MAPK = "exact-ngram-simple", "exact-ngram-map-k"
MIX = {"edit": 0.7, "prose": 0.3}


def results() -> dict:
    # the identity judgement as the run's tune.json recorded it: ngram-simple's output differed (its counts here are
    # only "fewer identical than compared"), ngram-mod's and map-k's matched in every block
    summary = {MOD: {"all": {"identical": 24, "compared": 24}}, SIMPLE: {"all": {"identical": 3, "compared": 5}},
               MAPK: {"all": {"identical": 24, "compared": 24}}}
    return {"blocks": ROWS, "summary": summary, "plan": {"workload_counts": {"edit": 12, "prose": 12}},
            "outcome": {"blocks": len(ROWS), "elapsed_s": ROWS[-1]["elapsed_s"]}}


def test_no_block_measured_a_workload_without_a_share() -> None:
    assert {r["workload"] for r in ROWS} == {"edit", "prose"}


def test_the_choice_is_what_the_data_give_and_says_what_would_settle_it() -> None:
    args = argparse.Namespace(rule="identical", margin=0.05, mix=MIX, tasks=["t.jsonl"])
    measured, choice, per_wl = choose._from_blocks(args, results(), [MOD, SIMPLE, MAPK], [MOD, SIMPLE, MAPK])
    assert choice.chosen == kinds.PLAIN and not choice.settled and choice.runner_up == MOD, choice
    fig = {m.name: m.speedup for m in measured}[MOD]
    assert fig.low is not None and fig.low < 1.0 < 1.05 < fig.high  # type: ignore[operator]
    assert "shares of plain decoding's time" in choice.reason  # n_predicted recorded: requests weighed by time
    assert choice.settle and choice.settle[0].startswith("overall: ") and choice.to_settle_min
    assert per_wl["prose"].startswith("plain")
    pairs = choose.types_paired(Blocks(ROWS), [MOD], [SIMPLE, MAPK], MIX)
    assert [p.split(" = ")[0] for p in pairs] == [f"{SIMPLE} ÷ {MOD}", f"{MAPK} ÷ {MOD}"]


def test_replayed_the_design_ends_once_the_tasks_left_cannot_settle_it() -> None:
    rates = recorded(NAME)
    d = tune_design({w: list(ts) for w, ts in rates.items()}, MIX)
    order = replay(d, rates)
    assert set(order) == {"edit", "prose"} and len(order) < 24
    assert {st.stopped for st in d.status[MOD].values()} == {"cannot settle on the whole"}
