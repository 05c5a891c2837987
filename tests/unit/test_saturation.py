"""The saturation soak's plan, aggregation, checks and report, on constructed phases (no server)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from specops.soak.config import FaultSpec, SoakConfigError
from specops.soak.saturation import (
    PLAIN,
    SPEC,
    SaturationPlan,
    SaturationResult,
    block_ratios,
    log_acceptance,
    percentile,
    problems,
    summarize_arm,
)
from specops.soak.saturation_report import main as saturation_report_main
from specops.soak.saturation_report import meaning, render_markdown, write


def test_plan_alternates_abba_and_faults_both_arms_of_every_kth_block():
    plan = SaturationPlan(duration=480, phase=60, faults=(FaultSpec("kill9"), FaultSpec("stop", 10)),
                          fault_every=2)
    assert plan.blocks == 4
    assert [plan.block_order(b) for b in range(4)] == [(SPEC, PLAIN), (PLAIN, SPEC)] * 2
    assert [f and f.label() for f in map(plan.block_fault, range(6))] == [None, "kill9", None, "stop:10", None,
                                                                           "kill9"]
    assert SaturationPlan(duration=30, phase=60 / 2).blocks == 1


@pytest.mark.parametrize("kw", [{"levels": ()}, {"levels": (0,)}, {"phase": 0}, {"phase": 700},
                                {"fault_every": 0}, {"fault_at": 1.0}, {"faults": (FaultSpec("restart"),)}])
def test_plan_refuses_what_cannot_run(kw):
    with pytest.raises(SoakConfigError):
        SaturationPlan(**kw)


def test_percentile_interpolates_and_knows_no_values():
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile(list(map(float, range(101))), 0.95) == pytest.approx(95.0)


def req(slot: int | None, n: int = 10, ms: float = 500.0, drafted: int = 0, accepted: int = 0, ok: bool = True,
        start: float = 0.0, end: float = 1.0, ttft: float | None = 0.2, kind: str = "load") -> dict[str, Any]:
    return {"kind": kind, "outcome": "succeeded" if ok else "failed", "slot": slot, "start": start, "end": end,
            "ttft": ttft, "predicted_n": n if ok else 0, "predicted_ms": ms if ok else 0.0,
            "draft_n": drafted, "draft_accepted": accepted, "attempts": 1}


def phase(level: int, arm: str, block: int, requests: list[dict[str, Any]], duration: float = 10.0, lost: int = 0,
          busy: dict[int, int] | None = None, faults: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    busy = {s: 3 for s in range(level)} if busy is None else busy
    return {"level": level, "block": block, "arm": arm, "start_s": 0.0, "duration_s": duration,
            "summary": {"lost": lost, "retried_then_succeeded": 0}, "checks_failed": [], "faults": faults or [],
            "rss_max": 400 * 2**20, "anon_max": 200 * 2**20, "pid_changes": [],
            "slots_seen": {"polls": 5, "errors": 0, "slots": {str(s): {"processing_seen": b, "n_ctx": 512,
                                                                        "speculative": [arm == SPEC]}
                                                              for s, b in busy.items()}},
            "requests": requests}


def test_summarize_arm_gives_totals_per_slot_figures_and_percentiles():
    phases = [phase(2, SPEC, 0, [req(0, 10, drafted=8, accepted=6), req(1, 30, ms=1000, drafted=20, accepted=10),
                                 req(None, 99, kind="reference"), req(1, ok=False)]),
              phase(2, SPEC, 1, [req(0, 20, drafted=10, accepted=10, end=3.0, ttft=0.6)])]
    a = summarize_arm(2, phases)
    assert a["wall_s"] == 20 and a["requests"] == 4 and a["ok"] == 3 and a["failed"] == 1
    assert a["tokens"] == 60 and a["tokens_per_s"] == 3.0  # the reference request is not load
    s0, s1 = a["slots"][0], a["slots"][1]
    assert s0["requests"] == 2 and s0["tokens_per_s"] == 1.5 and s0["acceptance"] == 16 / 18
    assert s0["decode_tokens_per_s"] == 30.0  # 30 tokens in 1000 ms
    assert s1["acceptance"] == 0.5 and a["acceptance"] == 26 / 38
    assert a["ttft_s"]["p50"] == 0.2 and a["total_s"]["p99"] == pytest.approx(2.96)
    assert a["anon_per_slot_bytes"] == 100 * 2**20
    assert a["slots_seen"] == {"0": {"processing_seen": 6, "speculative": [True]},
                               "1": {"processing_seen": 6, "speculative": [True]}}


def test_block_ratios_pair_the_arms_of_each_block():
    phases = [phase(1, SPEC, 0, [req(0, 20)]), phase(1, PLAIN, 0, [req(0, 40)]),
              phase(1, PLAIN, 1, [req(0, 30)]), phase(1, SPEC, 1, [req(0, 30)])]
    assert block_ratios(1, phases) == [0.5, 1.0]


def arms_ok(level: int) -> dict[str, dict[str, Any]]:
    return {arm: summarize_arm(level, [phase(level, arm, 0, [req(s) for s in range(level)])]) for arm in (SPEC, PLAIN)}


def test_problems_name_lost_requests_unused_slots_wrong_speculation_and_unrecovered_faults():
    assert problems(arms_ok(2), 2) == []
    arms = arms_ok(2)
    arms[SPEC]["lost"] = 1
    assert problems(arms, 2) == ["N=2 speculative: 1 requests lost"]
    arms = {arm: summarize_arm(2, [phase(2, arm, 0, [req(0)], busy={0: 4, 1: 0})]) for arm in (SPEC, PLAIN)}
    found = problems(arms, 2)
    assert "N=2 speculative: slot(s) [1] served no request" in found
    assert "N=2 plain: /slots never showed slot(s) [1] processing" in found
    p = phase(1, PLAIN, 0, [req(0)])
    p["slots_seen"]["slots"]["0"]["speculative"] = [True]
    arms = {SPEC: arms_ok(1)[SPEC], PLAIN: summarize_arm(1, [p])}
    assert problems(arms, 1) == ["N=1 plain: /slots says slot(s) ['0'] speculative=True"]
    fault = {"label": "kill9", "t": 3.0, "error": None, "recovered_at": None}
    arms = {SPEC: summarize_arm(1, [phase(1, SPEC, 0, [req(0)], faults=[fault])]), PLAIN: arms_ok(1)[PLAIN]}
    assert problems(arms, 1) == ["N=1 speculative: fault kill9 at 3s: no recovery"]


def test_server_acceptance_from_its_own_log_lines(tmp_path: Path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("0.07.804.022 I slot print_timing: id  0 | task 1 | draft acceptance = 1.00000 (   11 accepted /"
                 "    11 generated), mean len =  3.75\n"
                 "0.08.056.548 I slot print_timing: id  1 | task 3 | draft acceptance = 0.50000 (    5 accepted /"
                 "    10 generated), mean len =  2.00\nnoise\n")
    b.write_text("0.01.000.000 I slot print_timing: id  0 | task 9 | draft acceptance = 0.00000 (    0 accepted /"
                 "     4 generated), mean len =  1.00\n")
    assert log_acceptance([a, b, tmp_path / "missing.log"]) == {0: {"accepted": 11, "drafted": 15},
                                                                1: {"accepted": 5, "drafted": 10}}


def two_level_result() -> SaturationResult:
    """A finished run at N = 1 and 2, both arms healthy, speculative at 0.9× of plain in every block."""
    levels = []
    for n in (1, 2):
        arms = arms_ok(n)
        for a in arms.values():
            a.update(kv_per_slot_bytes=2**20, server_acceptance={}, restarts=0, start_errors=[])
        levels.append({"level": n, "arms": arms, "block_ratios": [0.9], "ratio": 0.9, "ratio_geomean": 0.9,
                       "problems": []})
    return SaturationResult(run_id="t", started_at="a", ended_at="b", duration_s=60.0,
                            plan={"levels": [1, 2], "phase": 6.0, "duration": 24.0, "blocks": 2, "faults": [],
                                  "fault_every": 2, "fault_at": 0.3, "max_tokens": 12},
                            setup={}, levels=levels, phases=[], problems=[])


def test_report_has_an_ab_row_per_level_and_a_row_per_slot_and_arm():
    result = two_level_result()
    md = render_markdown(result.to_dict())
    assert md.startswith("# Saturation soak t: PASS")
    assert "| 1 | 1.0 | 1.0 | 0.90× | 0.90× [0.90–0.90] |" in md
    for n in (1, 2):
        for arm in (SPEC, PLAIN):
            for sid in range(n):
                assert f"| {n} | {arm} | {sid} |" in md


def _levels(ratios: dict[int, list[float]]) -> dict:
    return {"levels": [{"level": n, "block_ratios": br, "ratio_geomean": math.exp(sum(map(math.log, br)) / len(br))}
                       for n, br in ratios.items()]}


def test_the_report_says_in_one_sentence_where_speculation_stops_paying():
    """Issue 29: the report says at which N, if any, speculation stops paying here and what the deploy should do;
    an N pays (or loses) only when every paired block does."""
    assert meaning(_levels({1: [0.58, 0.62], 2: [0.56, 0.6], 4: [0.49, 0.61]})).startswith(
        "Speculation loses at every concurrency measured (N=1 0.60×")
    assert "llama_server_spec_type: none" in meaning(_levels({1: [0.58, 0.62], 2: [0.56, 0.6]}))
    line = meaning(_levels({1: [1.3, 1.2], 2: [1.1, 1.05], 4: [0.8, 0.9]}))
    assert "pays up to N=2 and stops paying from N=4" in line and "llama_server_parallel` ≤ 2" in line
    assert meaning(_levels({1: [1.2, 1.1], 2: [1.1, 1.2]})).startswith("Speculation pays at every concurrency")
    assert meaning(_levels({1: [1.2, 0.9]})).startswith("Mixed or unsettled")


def test_the_report_is_rebuilt_from_its_json_with_a_plot(tmp_path: Path):
    pytest.importorskip("matplotlib")
    result = two_level_result()
    paths = write(result, tmp_path)
    assert paths["png"].stat().st_size > 10_000
    md = paths["md"].read_text()
    assert "**What it means:** Speculation loses at every concurrency measured" in md
    assert f"]({paths['png'].name})" in md
    paths["md"].unlink()
    assert saturation_report_main([str(paths["json"])]) == 0
    assert paths["md"].read_text() == md
