"""The tune's cost model carried to the live service (issue 52 item 3, :mod:`specops.tune.live`): built from a
measurement's blocks, kept in the record as JSON, read back strictly, and priced on other counters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specops.bench.costmodel import Overheads, Run, StepCosts
from specops.bench.store import ResultStore
from specops.tune import deploy, live

ROOT = Path(__file__).resolve().parents[2]
H200_14B = ROOT / "reports" / "gpu-h200-tune" / "run2" / "tune-qwen2.5-14b"  # the committed run (n8 chosen)

COSTS = StepCosts(0.1, {1: 1.0, 2: 1.3, 5: 1.6, 9: 2.4, 17: 3.3})  # a CPU target, no draft model (n-gram)
OVER = Overheads(0.002, 0.0, 0.001)


def block(arm_tps: float, ref_tps: float, drafts: float, drafted: float, accepted: float, n: int = 96) -> dict:
    spec = {"drafts": drafts, "draft_tokens": drafted, "accepted": accepted, "per_pos": {}}
    return {"results": {"baseline": {"decode_tps": ref_tps, "n_predicted": n, "spec": {}},
                        "cand": {"decode_tps": arm_tps, "n_predicted": n, "spec": spec}}}


BLOCKS = [block(15.0, 10.0, 4, 120, 60), block(12.0, 10.0, 3, 90, 30), {"type": "fail", "arm": "cand", "why": "x"},
          {"results": {"cand": {"decode_tps": 30.0, "n_predicted": 96, "spec": {"drafts": 9}}}}]  # no reference


def model() -> live.LiveModel:
    m, why = live.build(COSTS, OVER, BLOCKS, "cand", "baseline")
    assert m is not None, why
    return m


def test_the_arms_counters_are_summed_over_the_blocks_where_it_met_plain_decoding():
    run, ratio = live.arm_run(BLOCKS, "cand", "baseline")
    assert (run.n_tokens, run.drafts, run.drafted, run.accepted) == (192, 7, 210, 90)
    # token-weighted: 192 tokens in 96/15 + 96/12 s against 192 in 2 * 96/10 s
    assert ratio == pytest.approx((192 / (96 / 15 + 96 / 12)) / (192 / (2 * 96 / 10)))


def test_on_the_tunes_own_requests_the_live_figure_reads_the_measured_one():
    m = model()
    run, measured = live.arm_run(BLOCKS, "cand", "baseline")
    assert m.measured == pytest.approx(measured) and m.predict(run) == pytest.approx(measured)
    assert m.modelled != pytest.approx(m.measured)  # the correction had something to do


def test_traffic_that_drafts_nothing_reads_one_and_less_acceptance_reads_less():
    m = model()
    assert m.predict(Run(500, 0, 0, 0, 0)) == pytest.approx(1.0)
    same, _ = live.arm_run(BLOCKS, "cand", "baseline")
    worse = Run(same.n_tokens, 0, same.drafts * 2, same.drafted * 2, same.accepted / 4)  # drafts that fail
    better = Run(same.n_tokens, 0, same.drafts, same.drafted, same.drafted * 0.9)
    assert m.predict(worse) < 1.0 < m.predict(same) < m.predict(better)
    assert m.predict(Run(0, 0, 0, 0, 0)) is None


def test_the_model_survives_the_record_round_trip():
    m = model()
    back = live.parse(json.loads(json.dumps(m.to_dict())))
    run = Run(300, 0, 5, 150, 80)
    assert back.predict(run) == pytest.approx(m.predict(run))


def test_a_model_cannot_be_built_for_what_drafted_nothing_or_never_met_plain_decoding():
    plainish = [block(10.0, 10.0, 0, 0, 0)]
    assert live.build(COSTS, OVER, plainish, "cand", "baseline") == (None, "its measurement drafted nothing: no live "
                                                                            "prediction")
    m, why = live.build(COSTS, OVER, BLOCKS, "other", "baseline")
    assert m is None and "never measured in a block with plain decoding" in why


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: "x", "live_model is a JSON str, not an object"),
    (lambda d: {k: v for k, v in d.items() if k != "measured"}, "live_model lacks measured"),
    (lambda d: {**d, "target_step_s": 0}, "live_model.target_step_s is 0, not a finite number > 0"),
    (lambda d: {**d, "measured": float("nan")}, "live_model.measured is nan"),
    (lambda d: {**d, "draft_step_s": True}, "live_model.draft_step_s is True"),
    (lambda d: {**d, "target_rel": {"0": 1.0}}, "live_model.target_rel has batch size '0'"),
    (lambda d: {**d, "target_rel": {"2": 1.3}}, "live_model.target_rel has no batch size 1"),
    (lambda d: {**d, "target_rel": []}, "live_model.target_rel is not a batch curve"),
    (lambda d: {**d, "overheads": {"per_token_s": -1, "per_round_s": 0, "per_drafted_s": 0}},
     "live_model.overheads.per_token_s is -1"),
    (lambda d: {**d, "round_correction_s": float("inf")}, "live_model.round_correction_s is inf, not a finite number"),
])
def test_a_malformed_model_is_refused_in_one_line(change, why):
    with pytest.raises(ValueError) as err:
        live.parse(change(model().to_dict()))
    assert why in str(err.value) and "\n" not in str(err.value)


def test_on_a_committed_gpu_run_the_model_of_the_chosen_profile_moves_with_its_acceptance():
    """H200, Qwen2.5-14B (synthetic weights, imposed acceptance), n8 chosen: the model built from its measurement
    against the unit's plain decoding reads its measured figure on its own counters, less with fewer tokens
    accepted per round, and 1 without drafts."""
    ceiling = json.loads((H200_14B / "ceiling.json").read_text())
    over = json.loads((H200_14B / "tune.json").read_text())["overheads"]
    costs = StepCosts.from_ceiling(ceiling, "fa=on,ctv=q8_0", "draft")
    o = Overheads(over["per_token_ms"] / 1e3, over["per_round_ms"] / 1e3, over["per_drafted_ms"] / 1e3)
    records = list(ResultStore(H200_14B / "measure").read("blocks.jsonl"))
    m, why = live.build(costs, o, records, "exact-n8", "exact-baseline")
    assert m is not None, why
    run, measured = live.arm_run(records, "exact-n8", "exact-baseline")
    assert measured is not None and 1.05 < measured < 1.2  # run 2 read n8 1.10x [1.08, 1.11] (geometric mean)
    assert m.predict(run) == pytest.approx(measured)
    fewer = Run(run.n_tokens, 0, run.drafts * 1.5, run.drafted * 1.5, run.accepted * 0.75)
    assert math.isfinite(m.predict(fewer) or math.nan) and m.predict(fewer) < measured
    assert m.predict(Run(run.n_tokens, 0, 0, 0, 0)) == pytest.approx(1.0)


def test_the_speed_gate_record_keeps_the_model_only_for_a_speculative_choice():
    kept = model().to_dict()
    for chosen, want in (("exact-ngram-mod", kept), ("plain", None)):
        result = {"chosen": chosen, "vars": {}, "candidates": [], "live_model": kept}
        assert deploy.summary(result, deploy.Applied({}), reused=False)["live_model"] == want
    assert deploy.summary({"chosen": "exact-n8"}, deploy.Applied({}), reused=True)["live_model"] is None  # older
