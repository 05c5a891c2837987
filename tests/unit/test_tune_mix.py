"""The traffic's mix (issue 52 item 1): shares parsed in one line, the whole mix's speedup weighted by time (not a mean
of ratios) with a delta-method interval, the choice made for the mix, and the mix in the record's key."""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

import pytest

from specops.bench.arms import BASELINE
from specops.tune import mix, record
from specops.tune.evidence import Blocks

pytestmark = pytest.mark.fast

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu-tune-blocks"
KNOWN = ["code", "edit", "prose", "tool_calls"]


def test_shares_are_normalised_and_zero_shares_left_out():
    assert mix.parse("code=0.5,edit=0.3,prose=0.2,tool_calls=0", KNOWN) == pytest.approx(
        {"code": 0.5, "edit": 0.3, "prose": 0.2})
    assert mix.parse(" edit=7 , prose=3 ", KNOWN) == pytest.approx({"edit": 0.7, "prose": 0.3})
    assert mix.parse(None, KNOWN) is None and mix.parse("  ", KNOWN) is None


@pytest.mark.parametrize(("text", "said"), [
    ("code=0.5,chat=0.5", "--mix names workload(s) chat not in the task set (it has: code, edit, prose, tool_calls)"),
    ("code=-0.1,edit=1", "--mix: code's share is negative (-0.1)"),
    ("code=0,edit=0", "--mix: every share is zero"),
    ("code:0.5", "--mix: 'code:0.5' is not workload=share (a number)"),
    ("code=half", "--mix: 'code=half' is not workload=share (a number)"),
    ("code=inf", "--mix: 'code=inf' is not workload=share (a number)"),
    ("=1", "--mix: '=1' is not workload=share (a number)"),
    ("code=1,code=2", "--mix: code is given twice"),
])
def test_bad_shares_are_one_line(text, said):
    with pytest.raises(mix.MixError) as err:
        mix.parse(text, KNOWN)
    assert str(err.value) == said and "\n" not in str(err.value)


def test_the_mix_is_weighted_by_time_not_a_mean_of_ratios():
    """Ratios 2.0 on code and 0.5 on prose, half the requests each: at 100 tokens and 10 tok/s plain, a code request
    takes 5 s instead of 10, a prose request 20 s instead of 10, so the mix takes 12.5 s for plain's 10: 0.8x. The
    geometric mean of the ratios reads 1.0, their mean 1.25."""
    plain_s, tokens = 10.0, 100
    spec_s = {"code": tokens / (plain_s * 2.0), "prose": tokens / (plain_s * 0.5)}
    expected = (0.5 * plain_s + 0.5 * plain_s) / (0.5 * spec_s["code"] + 0.5 * spec_s["prose"])
    times = {"code": [(1 / 2.0, 1.0)] * 3, "prose": [(1 / 0.5, 1.0)] * 3}
    got = mix.speedup(times, {"code": 1, "prose": 1})
    assert got.estimate == pytest.approx(expected) == pytest.approx(0.8)
    assert got.low == got.high == pytest.approx(0.8)  # no spread: a point
    assert mix.arithmetic({"code": 2.0, "prose": 0.5}, {"code": 1, "prose": 1}) == \
        "1 / (0.50/2.00 code + 0.50/0.50 prose) = 0.80×"


def test_within_a_workload_the_mean_is_harmonic():
    times = {"edit": [(1 / 1.5, 1.0), (1 / 1.0, 1.0)]}
    assert mix.speedup(times, {"edit": 1}).estimate == pytest.approx(2 / (1 / 1.5 + 1 / 1.0))


def test_a_workload_with_one_task_counts_and_a_missing_one_is_an_error():
    """Since issue 61 item 4 the spread is pooled over every task of the mix (n − K degrees of freedom): a workload
    with one task counts (it adds nothing to the sum of squares), where the rule before gave no interval; with no
    degree of freedom left (one task in every workload) there is none."""
    one = mix.speedup({"code": [(0.8, 1.0)], "prose": [(1.0, 1.0), (0.9, 1.0)]}, {"code": 1, "prose": 1})
    assert one.has_ci and one.n == 3 and one.estimate == pytest.approx(1 / (0.5 * 0.8 + 0.5 * 0.95))
    none = mix.speedup({"code": [(0.8, 1.0)], "prose": [(0.9, 1.0)]}, {"code": 1, "prose": 1})
    assert not none.has_ci and none.n == 2
    with pytest.raises(mix.MixError, match="no measured task of workload"):
        mix.speedup({"code": [(0.8, 1.0)]}, {"code": 1, "prose": 1})
    # a workload with no share needs no task
    assert mix.speedup({"code": [(0.5, 1.0), (0.5, 1.0)]}, {"code": 1, "prose": 0}).estimate == pytest.approx(2.0)


def test_the_interval_covers_the_mix_s_mean_speedup():
    """Seeded simulation: lognormal per-task ratios per workload (known population), 8 tasks each, a 70/30 mix;
    the delta-method interval (a confidence interval for the mean speedup, not for a new request) holds the
    population's time-weighted speedup about 95% of the time."""
    rng = random.Random(52)
    pop = {"edit": (math.log(1.3), 0.15), "prose": (math.log(0.95), 0.08)}
    shares = {"edit": 0.7, "prose": 0.3}
    truth = 1 / sum(w * math.exp(-pop[k][0] + pop[k][1] ** 2 / 2) for k, w in shares.items())  # E[1/r] lognormal
    hits, runs = 0, 1500
    for _ in range(runs):
        times = {k: [(1 / math.exp(rng.gauss(mu, sd)), 1.0) for _ in range(8)] for k, (mu, sd) in pop.items()}
        iv = mix.speedup(times, shares)
        assert iv.low is not None and iv.high is not None
        hits += iv.low <= truth <= iv.high
    assert 0.92 <= hits / runs <= 0.98, hits / runs


def _blocks(ratios: dict[str, dict[str, float]], per_workload: int = 4, seed: int = 0) -> Blocks:
    """Blocks of a measurement: per workload ``per_workload`` tasks, each arm at its ratio to plain (100 tok/s)
    with ±0.2% noise."""
    rng = random.Random(seed)
    workloads = sorted({w for r in ratios.values() for w in r})
    records = []
    for wl in workloads:
        for i in range(per_workload):
            res = {BASELINE: {"decode_tps": 100.0}}
            for arm, r in ratios.items():
                if wl in r:
                    res[arm] = {"decode_tps": 100.0 * r[wl] * (1 + rng.uniform(-0.002, 0.002))}
            records.append({"workload": wl, "task": f"{wl}-{i}", "results": res})
    return Blocks(records)


# exact-n8 doubles edits and slows prose; exact-ngram-mod gains a little on both
LOPSIDED = {"exact-n8": {"edit": 2.0, "prose": 0.8}, "exact-ngram-mod": {"edit": 1.2, "prose": 1.15}}


def test_the_mix_decides_where_a_mean_of_ratios_would_not():
    """Pooled (every task the same weight, a geometric mean), n8 reads best (1.26x against 1.17x), but its tasks'
    spread (2.0 and 0.8) leaves it undecided: ngram-mod, in its tie and confidently faster, is served (issue 62
    item 3: the cheapest deployable tie member, not plain decoding). Equal shares weighted by time pick ngram-mod
    (n8: 1 / (0.5/2.0 + 0.5/0.8) = 1.14x; ngram-mod 1.17x); a 70/30 edit/prose mix picks n8 (1.38x), and the reason
    shows the arithmetic."""
    blocks = _blocks(LOPSIDED)
    names = list(LOPSIDED)
    pooled = blocks.decide(names, BASELINE, need_identical=False)
    assert pooled.chosen == "exact-ngram-mod" and pooled.settled and pooled.runner_up == "exact-n8"
    # ngram-mod is out of n8's tie (n8 measured more than the 5% margin ahead, paired), and n8's tie (n8 alone) has
    # nothing confidently faster: ngram-mod's own tie is served
    assert "no member of exact-n8's tie (exact-n8) is confidently faster than plain decoding" in pooled.reason
    assert "exact-n8 measured ahead by more than 5%" in pooled.reason
    n8, ngram = (blocks.interval(n, BASELINE) for n in names)
    assert n8 is not None and ngram is not None and n8.estimate > ngram.estimate and "the mix" not in pooled.reason
    equal = blocks.decide(names, BASELINE, need_identical=False, mix={"edit": 1, "prose": 1})
    assert equal.chosen == "exact-ngram-mod", equal
    assert "the mix, weighted by time: exact-ngram-mod 1 / (0.50/1.20 edit + 0.50/1.15 prose) = 1.17×" in equal.reason
    assert equal.figures["exact-n8"].startswith("1.14×")
    edits = blocks.decide(names, BASELINE, need_identical=False, mix={"edit": 0.7, "prose": 0.3})
    assert edits.chosen == "exact-n8" and "0.70/2.00 edit + 0.30/0.80 prose) = 1.38×" in edits.reason
    # the chosen against the runner-up, over the same mix: n8's time ÷ ngram-mod's
    assert edits.paired and edits.paired.startswith("exact-n8 ÷ exact-ngram-mod = 1.17×")


def test_without_a_mix_the_decision_is_unchanged():
    blocks = Blocks.load(FIXTURES / "h200-run2-14b.jsonl")
    names = [f"exact-n{k}" for k in (2, 4, 8, 12, 16)]
    assert blocks.decide(names, "exact-baseline", False, mix=None) == blocks.decide(names, "exact-baseline", False)
    assert blocks.measured(names, "exact-baseline", mix={}) == blocks.measured(names, "exact-baseline")


@pytest.mark.parametrize("run", sorted(p.stem for p in FIXTURES.glob("*.jsonl")))
def test_equal_shares_by_time_never_read_above_the_pooled_geometric_mean(run):
    """Each committed run has as many tasks per workload: equal shares by time are the harmonic mean of every task's
    ratio, which never exceeds their geometric mean."""
    blocks = Blocks.load(FIXTURES / f"{run}.jsonl")
    equal = {w: 1.0 for w in blocks.workloads}
    for arm in blocks.arms:
        pooled, timed = blocks.interval(arm, "exact-baseline"), blocks.figure(arm, "exact-baseline", equal)
        if pooled is None or isinstance(timed, str):
            continue
        assert timed.estimate <= pooled.estimate * (1 + 1e-12), arm


def test_a_workload_of_the_mix_never_measured_is_an_error_and_a_candidate_without_it_is_left_out():
    blocks = _blocks({"exact-n8": {"edit": 1.5, "prose": 1.1}, "exact-ngram-mod": {"edit": 1.2}})
    with pytest.raises(mix.MixError, match=r"workload\(s\) code in the mix but no task of it measured"):
        blocks.decide(["exact-n8"], BASELINE, False, mix={"edit": 1, "code": 1})
    c = blocks.decide(["exact-n8", "exact-ngram-mod"], BASELINE, False, mix={"edit": 1, "prose": 1})
    assert c.chosen == "exact-n8"
    assert any(line.startswith("exact-ngram-mod: no task of prose (in the mix)") for line in c.left_out), c.left_out
    # a share of zero: prose is not needed, and ngram-mod is compared
    only_edit = blocks.decide(["exact-n8", "exact-ngram-mod"], BASELINE, False, mix={"edit": 1, "prose": 0})
    assert only_edit.left_out == () and only_edit.chosen == "exact-n8"


def test_the_record_says_the_mix_and_a_changed_mix_tunes_again(tmp_path: Path):
    prefix = tmp_path / "llama"
    prefix.mkdir()
    (prefix / "build-info.json").write_text(json.dumps({"build_id": "b1"}))
    target = tmp_path / "t.gguf"
    target.write_bytes(b"x")

    def facts(**kw):
        base = {k: None for k in record.SETTINGS} | {"synth_rates": (), "tasks": None, "target": target,
                                                      "draft": None}
        return record.facts(prefix, "cpu", argparse.Namespace(**(base | kw)))

    none, a, b = facts(), facts(mix={"edit": 0.7, "prose": 0.3}), facts(mix={"edit": 0.5, "prose": 0.5})
    assert "mix" not in none["settings"]  # a result written before the setting keeps its key
    assert record.changed(none, a) == ["setting mix"] and record.changed(a, b) == ["setting mix"]
    assert record.key(a) != record.key(b) and record.changed(a, facts(mix={"edit": 0.7, "prose": 0.3})) == []
    assert record.task_source(None) == "the bench's standard set (specops-standard-v2)"
    mine = tmp_path / "edits.jsonl"
    mine.write_text("{}\n")
    assert record.task_source([mine]) == "edits.jsonl (sha256 ca3d163bab055381)"
    assert "mix" in mix.describe(None) and "edit 70%, prose 30%" in mix.describe({"edit": 0.7, "prose": 0.3})
