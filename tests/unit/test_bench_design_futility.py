"""Futility-only early stopping (``Design(stop_on=FUTILITY)``, what ``specops tune`` measures with): an arm stops on a
workload early only when it cannot pay there (slower, or wholly below 1 + half-width); a gain runs every task of its
workload; the bench's default (every stop) is unchanged; the workloads still open get the blocks; the plan records
the stops and the report replays them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from specops.bench import plan as plans
from specops.bench import report
from specops.bench.design import AA, BASELINE, FUTILITY, STOPS, Block, Design
from specops.bench.settings import BenchSettings
from specops.bench.stats import Interval
from specops.bench.summary import design_of

pytestmark = pytest.mark.fast

TASKS = {"code": [f"c{i}" for i in range(8)], "prose": [f"p{i}" for i in range(6)]}


def run(d: Design, speed: dict[str, dict[str, float]]) -> list[Block]:
    """Every block until the design has none left; an arm's tok/s is ``speed[arm][workload]`` (plain decoding 10),
    with ±1% of noise per server and block."""
    blocks = []
    while (b := d.next_block(0)) is not None:
        noise = {a: 1.0 + 0.01 * math.sin(7 * b.index + i) for i, a in enumerate(b.arms)}
        d.add(b, {a: speed.get(a, {}).get(b.workload, 10.0) * noise[a] for a in b.arms})
        blocks.append(b)
    d.finish_rep(0)
    return blocks


def everywhere(tps: float) -> dict[str, float]:
    return {w: tps for w in TASKS}


def test_under_futility_a_gain_runs_every_task_and_what_cannot_pay_stops() -> None:
    d = Design(["winner", "same", "loser"], TASKS, min_tasks=3, stop_on=FUTILITY)
    run(d, {"winner": everywhere(13.0), "same": everywhere(10.0), "loser": everywhere(5.0)})
    for wl, tasks in TASKS.items():
        iv = d.interval("winner", wl)
        assert iv is not None and iv.significantly_above(1.0)  # confidently faster from its third task on ...
        assert d.status["winner"][wl].stopped == "exhausted" and d.n_tasks("winner", wl) == len(tasks)  # ... yet on
        assert d.status["same"][wl].stopped == "no gain" and d.n_tasks("same", wl) == 3
        assert d.status["loser"][wl].stopped == "slower" and d.n_tasks("loser", wl) == 3


def test_by_default_every_stop_stops_as_before() -> None:
    d = Design(["winner", "same", "loser"], TASKS, min_tasks=3)
    assert d.stop_on == frozenset(STOPS)
    run(d, {"winner": everywhere(13.0), "same": everywhere(10.0), "loser": everywhere(5.0)})
    for wl in TASKS:
        assert d.status["winner"][wl].stopped == "faster" and d.n_tasks("winner", wl) == 3
        assert d.status["same"][wl].stopped == "no gain" and d.status["loser"][wl].stopped == "slower"


def test_a_small_confident_gain_below_the_half_width_is_futile() -> None:
    """1.02x, confidently above 1 yet wholly below 1.05: every stop calls it faster; futility calls it no gain (it
    cannot pay what deploying it costs), so it stops too."""
    futile = Design(["x"], TASKS, min_tasks=3, stop_on=FUTILITY)
    small = Interval(1.02, 1.01, 1.03, 3)
    assert futile.early_stop(small) == "no gain"
    assert Design(["x"], TASKS).early_stop(small) == "faster"
    assert futile.early_stop(Interval(1.3, 1.2, 1.4, 3)) is None
    assert futile.early_stop(Interval(1.0, 0.97, 1.03, 3)) == "no gain"
    assert futile.early_stop(Interval(0.9, 0.85, 0.95, 3)) == "slower"
    assert Design(["x"], TASKS).early_stop(Interval(1.3, 1.25, 1.35, 3)) == "faster"


def test_the_blocks_go_to_the_workloads_still_open() -> None:
    """The arm cannot pay on code (stops after 3 tasks) and gains on prose: once code has stopped, every block is
    prose's, and the run ends when prose's tasks are used up."""
    d = Design(["x"], TASKS, min_tasks=3, stop_on=FUTILITY)
    blocks = run(d, {"x": {"code": 5.0, "prose": 13.0}})
    assert [b.workload for b in blocks] == ["code", "prose"] * 3 + ["prose"] * 3
    assert d.status["x"]["code"].stopped == "slower" and d.status["x"]["prose"].stopped == "exhausted"
    assert all(BASELINE in b.arms and "x" in b.arms for b in blocks)


def test_the_aa_twin_leaves_a_workload_after_min_tasks_once_it_settled() -> None:
    d = Design(["x"], {"prose": [f"p{i}" for i in range(6)]}, min_tasks=3, stop_on=FUTILITY)
    blocks = run(d, {"x": {"prose": 13.0}})
    assert [AA in b.arms for b in blocks] == [True] * 3 + [False] * 3


def test_an_unknown_stop_is_refused() -> None:
    with pytest.raises(ValueError, match="faster-ish"):
        Design(["x"], TASKS, stop_on={"slower", "faster-ish"})


def test_the_plan_records_the_stops_and_the_report_replays_them() -> None:
    by_wl = {w: list(ts) for w, ts in TASKS.items()}
    lineup = SimpleNamespace(spec_arms=["x"], refs={}, run_anyway=False)
    futile = BenchSettings(min_tasks=3, stop_on=("slower", "no gain"))
    dz = plans.design_def(futile, by_wl, lineup)  # type: ignore[arg-type]
    assert dz["stop_on"] == ["slower", "no gain"] and dz["min_tasks"] == 3
    assert design_of({"design": dz, "reps": 1, "seed": 42}).stop_on == FUTILITY
    old = {k: v for k, v in dz.items() if k != "stop_on"}  # a plan recorded before the setting: every stop
    assert design_of({"design": old, "reps": 1, "seed": 42}).stop_on == frozenset(STOPS)
    assert plans.design_def(BenchSettings(), by_wl, lineup)["stop_on"] == list(STOPS)  # type: ignore[arg-type]
    said = report._stops(dz)
    assert "(slower)" in said and "(no gain worth deploying)" in said and "(faster)" not in said
    assert "faster or precise keeps running until the workload's tasks are used up" in said
    assert "keeps running" not in report._stops(old) and "(precise)" in report._stops(old)
