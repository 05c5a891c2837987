"""specops tune end to end with real processes: llama-bench, probe servers one at a time, predictions, the
side-by-side measurement of what may pay, the choice and its record. SmolLM2-135M is its own draft (a draft as
costly as the target cannot pay on a CPU: the draft lengths must be predicted below plain decoding and never
measured); ngram-simple on a repeated list may pay or not - either way its figures must be there. Checks the
mechanics, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.cli import main
from specops.tune import band, live
from tests import lab
from tests.integration.test_bench_smollm import TASKS

pytestmark = pytest.mark.integration


def test_tune_end_to_end(llama_build: lab.LlamaBuild, smollm: Path, tmp_path: Path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    out = tmp_path / "tune.json"
    rc = main(["tune", "--llama-prefix", str(llama_build.prefix), "--target", str(smollm), "--draft", str(smollm),
               "--tasks", str(tasks), "--lengths", "2,4", "--ngram", "ngram-simple", "--no-default",
               "--budget", "5", "--probe-tokens", "24", "--max-tokens", "24", "--threads", "1", "--ctx-size", "1024",
               "--limit-per-workload", "3", "--rule", "fastest", "--work-dir", str(tmp_path / "work"),
               "--out", str(out), "--quiet", "--probe-all"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    res = json.loads(out.read_text())
    by = {c["name"]: c for c in res["candidates"]}
    assert set(by) == {"exact-n2", "exact-n4", "exact-ngram-simple"}
    # the probes ran alone and speculated: the draft probes at the longest and shortest length; on a CPU build the
    # n-gram type is not probed (--ngram-probes auto) but measured side by side
    probes = res["probes"]
    assert set(probes) == {"exact-baseline", "exact-n4", "exact-n2"}
    assert probes["exact-baseline"]["drafts"] == 0 and probes["exact-baseline"]["n_tokens"] > 0
    for name in ("exact-n4", "exact-n2"):
        assert probes[name]["drafts"] > 0 and probes[name]["per_pos"], probes[name]
        assert probes[name]["accepted"] > 0  # the draft is the target itself
    over = res["overheads"]
    assert over["runs"] == 2 and over["per_token_ms"] >= 0 and over["per_round_ms"] >= 0
    # self-speculation on a CPU: predicted, and dropped without a measurement where the prediction cannot clear plain
    # decoding (the prediction moves with the host's load: 1.18x once beside the whole suite)
    for name in ("exact-n2", "exact-n4"):
        assert by[name]["predicted"] is not None
        if by[name]["predicted"] < 1.05:
            assert "cannot clear plain decoding" in by[name]["verdict"] and by[name]["measured"] is None
    ng = by["exact-ngram-simple"]
    assert ng["predicted"] is None and "not probed on a CPU build" in ng["how"]
    # shortlisted without a prediction: measured side by side with the unit's plain decoding (or said open)
    assert ng["measured"] is not None or res["open"], res
    assert res["reference"].startswith("the unit's plain decoding") and "-ctv q8_0" in res["reference"]
    assert isinstance(res["settled"], bool) and isinstance(res["tie"], list)
    if ng["measured"] is not None:  # the decision's interval: paired with plain decoding in the same blocks
        assert ng["measured_interval"]["n"] >= 1
    if not res["settled"]:
        assert res["chosen"] == "plain" and any(x.startswith("undecided") for x in res["open"]), res
    assert res["chosen"] in ("plain", "exact-ngram-simple")
    assert res["vars"]["llama_server_spec_type"] == ("none" if res["chosen"] == "plain" else "ngram-simple")
    assert res["build"]["commit"] and res["elapsed_s"] > 0
    # the cost model the exporter prices the live traffic with: only for a speculative choice, read back strictly
    if res["chosen"] == "plain":
        assert res["live_model"] is None
    elif res["live_model"] is None:
        assert any("no live prediction" in line for line in res["open"]), res["open"]
    else:
        assert live.parse(res["live_model"]).measured > 0
        # beside it the live check's prediction band for a window of n requests (issue 62 item 7), or why not
        kept = res["live_model"].get("band")
        assert kept is not None or any("no prediction band" in line for line in res["open"]), res["open"]
        if kept is not None:
            b = band.parse(kept)
            low, high = b.edges(10 * b.shares.tokens_per_request)
            assert b.shares.tokens_per_request > 0 and 0 < low <= high, kept
    # the plain server was probed twice (before and after the others): both count, the drift is recorded
    assert probes["exact-baseline"]["n_tokens"] >= 2 * probes["exact-n4"]["n_tokens"] * 0.9
    assert isinstance(res["plain_drift"], float)
    assert set(res["phases_s"]) >= {"ceiling", "probes"}
    # what the user reads: the table and the choice
    assert "| exact-n4 |" in printed and "chosen: " in printed and "variables: " in printed
