"""The saturation soak, short: ``specops saturate`` with SmolLM2 drafting for itself against ``--parallel N`` for
N = 1 and 4, speculative and plain alternating (ABBA), a kill -9 in both arms of every second block. The claim is
about the mechanics (every request accounted for, every slot used, per-slot and A/B figures present, faults
recovered), not about speed: the shared machine makes no speed verdict here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import lab

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"
LEVELS = (1, 4)   # one slot, and several (2 proved nothing 4 does not; it cost ~45 s)


def test_short_saturation_soak(llama_build: lab.LlamaBuild, smollm: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "specops.cli", "saturate", "--llama-prefix", str(llama_build.prefix),
            "--target", str(smollm), "--draft", str(smollm), "--levels", ",".join(map(str, LEVELS)),
            "--duration", "16s", "--phase", "4s", "--faults", "kill9", "--fault-every", "2", "--fault-at", "0.2",
            "--max-tokens", "8", "--threads", "1", "--ctx-per-slot", "512", "--timeout", "300",
            "--report-dir", str(tmp_path / "reports"), "--run-id", "itest"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert "saturation itest: PASS" in proc.stdout

    data = json.loads((tmp_path / "reports" / "saturation-itest.json").read_text())
    assert data["verdict"] == "pass" and not data["problems"], data["problems"]
    assert [lv["level"] for lv in data["levels"]] == list(LEVELS)
    for lv in data["levels"]:
        n = lv["level"]
        assert lv["ratio"] is not None and len(lv["block_ratios"]) == 2  # ABBA: two paired blocks
        for arm in ("speculative", "plain"):
            a = lv["arms"][arm]
            assert a["lost"] == 0 and a["failed"] == 0, (n, arm, a)
            assert a["tokens_per_s"] and a["tokens_per_s"] > 0
            # every slot served requests (pinned), and /slots itself saw each one processing
            assert sorted(int(k) for k in a["slots"]) == list(range(n)), a["slots"]  # JSON: keys are text
            for sid, s in a["slots"].items():
                assert s["requests"] > 0 and s["tokens_per_s"] and s["decode_tokens_per_s"], (n, arm, sid, s)
                seen = a["slots_seen"][sid]
                assert seen["processing_seen"] > 0 and seen["speculative"] == [arm == "speculative"], seen
                if arm == "speculative":  # SmolLM2 drafting for itself: acceptance known per slot, both ways
                    assert s["acceptance"] is not None and 0 < s["acceptance"] <= 1, s
                    assert a["server_acceptance"][sid]["drafted"] > 0
                else:
                    assert s["acceptance"] is None and s["draft_tokens"] == 0
            for key in ("ttft_s", "total_s"):
                assert all(a[key][q] is not None for q in ("p50", "p95", "p99")), a[key]
                assert a[key]["p50"] <= a[key]["p95"] <= a[key]["p99"]
            assert a["ttft_s"]["p50"] <= a["total_s"]["p99"]
            assert a["rss_max_bytes"] and a["anon_per_slot_bytes"] and a["kv_per_slot_bytes"]
            # the kill -9 of block 1: injected, recovered from, the server restarted by the supervisor
            assert [f["kind"] for f in a["faults"]] == ["kill9"], a["faults"]
            assert all(f["error"] is None and f["time_to_recovery"] > 0 for f in a["faults"])
            assert a["restarts"] == 1
        # the speculative arm's KV per slot includes the draft's
        assert lv["arms"]["speculative"]["kv_per_slot_bytes"] > lv["arms"]["plain"]["kv_per_slot_bytes"]

    md = (tmp_path / "reports" / "saturation-itest.md").read_text()
    assert md.startswith("# Saturation soak itest: PASS")
    for n in LEVELS:  # the A/B row per level, and per-slot rows of both arms
        assert any(line.startswith(f"| {n} | ") and line.count("×") >= 1 for line in md.splitlines())
        for arm in ("speculative", "plain"):
            for sid in range(n):
                assert f"| {n} | {arm} | {sid} |" in md
