"""The deploy's proof of speculation (specops.probe.summarize_probe) on real llama-server output of both builds."""

import json
from pathlib import Path

from specops.probe import summarize_probe

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CURRENT, LEGACY = FIX / "llama-server-0c1e57098", FIX / "llama-server-4227c9be4"


def test_the_pinned_build_is_judged_by_its_speculation_counters():
    raw = {"metrics_before": (CURRENT / "base_metrics.txt").read_text(),
           "metrics_after": (CURRENT / "spec_metrics_after_bench.txt").read_text(),
           "slots": json.loads((CURRENT / "spec_slots.json").read_text()),
           "timings": json.loads((CURRENT / "spec_completion_0.json").read_text())["timings"]}
    s = summarize_probe(raw)
    assert s["counted_by"] == "metrics" and s["draft_tokens_delta"] > 0 and s["slots_speculative"]


def test_a_build_without_the_counters_is_judged_by_the_completion_timings():
    answer = json.loads((LEGACY / "completion.json").read_text())
    raw = {"metrics_before": (LEGACY / "metrics_before.txt").read_text(),
           "metrics_after": (LEGACY / "metrics_after.txt").read_text(),
           "slots": json.loads((LEGACY / "slots.json").read_text()), "timings": answer["timings"]}
    s = summarize_probe(raw)
    assert s["counted_by"] == "timings" and s["slots_speculative"]
    assert s["draft_tokens_delta"] == answer["timings"]["draft_n"] > 0
    assert 0 < s["acceptance"] <= 1


def test_a_request_that_did_not_speculate_is_not_taken_for_one_that_did():
    """4227c9be4 does not speculate on a request with cache_prompt false: no draft_n, nothing drafted."""
    answer = json.loads((LEGACY / "completion_cache_prompt_false.json").read_text())
    raw = {"metrics_before": (LEGACY / "metrics_before.txt").read_text(),
           "metrics_after": (LEGACY / "metrics_after.txt").read_text(), "slots": [], "timings": answer["timings"]}
    s = summarize_probe(raw)
    assert s["draft_tokens_delta"] == 0 and not s["slots_speculative"]
