"""A small real bench: SmolLM2-135M as target and as its own draft, real llama-server processes side by side.

The ceiling (real llama-bench) must prune the draft-model arm (a draft as costly as the target cannot pay);
the n-gram arm runs in time-sliced blocks beside the two baselines; the counters, identity, the A/A check,
the report and the variables come out of it. Checks the mechanics end to end, not speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specops.cli import main
from tests import lab

pytestmark = pytest.mark.integration

TASKS = [
    {"id": f"t-json-{i}", "workload": "tool_calls",
     "messages": [{"role": "user", "content": f"Give a JSON object with keys name and age for person number {i}."}]}
    for i in range(3)
] + [
    {"id": f"t-edit-{i}", "workload": "edit",
     "messages": [{"role": "user",
                   "content": "Repeat this list exactly, one item per line:\n"
                   + "\n".join(f"- item{j + i}" for j in range(12))}]}
    for i in range(3)
]
# The edit prompt is one SmolLM2-135M copies: "Repeat this list exactly: item0, item1, ..." on one line was copied for
# one offset in three, and which one changed with the thread count (-t 1 copied item2's, -t 2 item1's), so a run whose
# edit conclusion settled before that task drafted nothing (CI, 2026-12-03). One item per line: copied at every offset
# 0-4, at -t 1 and -t 2 (20 draft tokens each in 32).


def test_small_bench_end_to_end(llama_build: lab.LlamaBuild, smollm: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    work, report, assets, vars_file = tmp_path / "work", tmp_path / "report.md", tmp_path / "assets", tmp_path / "v.yml"
    rc = main([
        "bench", "--llama-prefix", str(llama_build.prefix), "--target", str(smollm), "--draft", str(smollm),
        "--tasks", str(tasks), "--arms", "draft-n4,ngram-simple", "--max-tokens", "32", "--threads", "1",
        "--ctx-size", "1024", "--ceiling-k", "1,2,3,5", "--ceiling-reps", "5", "--ceiling-depth", "32",
        "--min-tasks", "2", "--slice", "0.2", "--work-dir", str(work), "--report", str(report),
        "--assets", str(assets), "--vars-file", str(vars_file), "--rule", "fastest", "--quiet",
    ])
    assert rc == 0
    raw = json.loads((assets / "results.json").read_text())
    plan = raw["plan"]
    # the ceiling: a draft that costs as much as the target cannot pay, whatever its acceptance
    assert "draft-n4" in plan["pruned"] and plan["pruned"]["draft-n4"]["best"] < 1.05
    # the draft is the target itself: its step cost is ~1 target step on an idle host, but the two are timed one
    # after the other, so a neighbour's load can halve it (0.48 seen beside a lab-host bring-up); still pruned
    assert plan["pruned"]["draft-n4"]["draft_cost"] > 0
    # The n-gram arm's ceiling (a free draft, extrapolated to draft length 48 from c(3)..c(5)) sits near the margin
    # for SmolLM2 on these two cores: 1.33x and 16.6x in two idle suite runs, 1.0x in one run on a slowed machine
    # (c(2) = 2.67 measured: its k=1 timing in a quiet moment, the rest under load). Five repetitions give llama-bench's
    # timings a true median; a run that still prunes it must say so and run no speculative arm.
    if "ngram-simple" in plan["pruned"]:
        assert plan["design"]["arms"] == [], plan["design"]
        assert "cannot pay on this host" in report.read_text()
        return
    assert plan["design"]["arms"] == ["ngram-simple"]
    # every server runs the unit's numerics (--plain unit, the default): the ceiling is priced at them
    assert list(raw["ceiling"]["target"]) == ["fa=on,ctv=q8_0"], list(raw["ceiling"]["target"])
    ceiling = raw["ceiling"]["target"]["fa=on,ctv=q8_0"]["relative"]
    assert set(ceiling) == {"1", "2", "3", "5"} and ceiling["1"] == 1.0
    # blocks: both baselines and the n-gram arm, time-sliced, every answer with its rate and counters
    blocks = [b for b in raw["blocks"] if b.get("type") != "fail"]
    assert blocks and all(set(b["arms"]) == {"baseline", "baseline-again", "ngram-simple"} for b in blocks)
    for b in blocks:
        for r in b["results"].values():
            assert r["decode_tps"] > 0 and r["slices"] >= 1 and r["running_s"] > 0 and r["text"]
    servers = {s["arm"]: s for s in raw["servers"]}
    assert servers["ngram-simple"]["speculative"] is True and servers["baseline"]["speculative"] is False
    # the baseline is the unit's plain decoding: the role's numerics, speculation off
    for flags in (["--flash-attn", "on"], ["--cache-type-v", "q8_0"], ["--spec-type", "none"]):
        i = servers["baseline"]["argv"].index(flags[0])
        assert servers["baseline"]["argv"][i + 1] == flags[1], servers["baseline"]["argv"]
    assert raw["plan"]["plain"] == "unit" and "the unit's plain decoding" in report.read_text()
    assert "--spec-type" in servers["ngram-simple"]["argv"]
    edits = [b["results"]["ngram-simple"] for b in blocks if b["workload"] == "edit"]
    assert sum(r["spec"]["draft_tokens"] for r in edits) > 0, "a repeated list must give n-gram drafts"
    summ = raw["summary"]
    assert summ["baseline-again"]["all"]["identical"] == summ["baseline-again"]["all"]["compared"] > 0
    assert summ["baseline-again"]["all"]["speedup"]["estimate"] > 0
    md = report.read_text()
    for part in ("## Ceiling first", "cannot pay on this host", "## The A/A check", "## Output identity"):
        assert part in md
    assert (assets / "speedup_by_workload.png").stat().st_size > 0
    pick = raw["recommendation"]["all"]
    if pick["valid"]:
        assert yaml.safe_load(vars_file.read_text())["llama_server_spec_type"] in ("none", "ngram-simple")
    else:
        assert not vars_file.exists()
