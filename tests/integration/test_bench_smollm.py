"""A small real bench: SmolLM2-135M as target and as its own draft, real llama-server processes.

Two arms (baseline + draft n-max 4), three tasks, 16 tokens, two repetitions (so the baseline's
determinism is checked across them), a hardware ceiling with k up to 2. Checks the mechanics end to end (speculation on,
counters read, identity judged, report and variables written), not speed.
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
    {
        "id": "t-json",
        "workload": "tool_calls",
        "messages": [{"role": "user", "content": "Give a JSON object with keys name and age for Ada, 36."}],
    },
    {
        "id": "t-code",
        "workload": "code",
        "messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
    },
    {
        "id": "t-prose",
        "workload": "prose",
        "messages": [{"role": "user", "content": "Describe the sea in two sentences."}],
    },
]


def test_small_bench_end_to_end(llama_build: lab.LlamaBuild, smollm: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    work, report, assets, vars_file = (
        tmp_path / "work",
        tmp_path / "report.md",
        tmp_path / "assets",
        tmp_path / "vars.yml",
    )
    rc = main(
        [
            "bench",
            "--llama-prefix",
            str(llama_build.prefix),
            "--target",
            str(smollm),
            "--draft",
            str(smollm),
            "--tasks",
            str(tasks),
            "--arms",
            "draft-n4",
            "--reps",
            "2",
            "--max-tokens",
            "16",
            "--threads",
            "2",
            "--ctx-size",
            "1024",
            "--ceiling-k-max",
            "2",
            "--ceiling-reps",
            "1",
            "--ceiling-depth",
            "32",
            "--work-dir",
            str(work),
            "--report",
            str(report),
            "--assets",
            str(assets),
            "--vars-file",
            str(vars_file),
            "--rule",
            "fastest",
            "--quiet",
        ]
    )
    assert rc == 0
    raw = json.loads((assets / "results.json").read_text())
    runs = raw["runs"]
    assert set(runs) == {"baseline", "draft-n4"}
    assert set(runs["baseline"]) == {"0", "1"}
    spec = runs["draft-n4"]["0"]
    assert spec["slots_speculative"] is True
    assert "--spec-draft-n-max" in spec["argv"] and "--spec-type" in spec["argv"]
    assert [r["task"] for r in spec["requests"]] == ["t-json", "t-code", "t-prose"]
    assert spec["spec"]["draft_tokens"] > 0 and spec["spec"]["drafts"] > 0
    summ = raw["summary"]["draft-n4"]["all"]
    assert summ["acceptance"] is not None and 0 < summ["acceptance"] <= 1
    assert summ["compared"] == 6
    assert raw["summary"]["baseline"]["all"]["identical"] == 3, "baseline must be deterministic across reps"
    assert runs["baseline"]["0"]["slots_speculative"] is False
    assert all(r["ttft_s"] and r["e2e_s"] >= r["ttft_s"] for r in runs["baseline"]["0"]["requests"])
    assert runs["baseline"]["0"]["rss"]["peak"] > 50 * 2**20
    ceiling = raw["ceiling"]["target"]["default"]["relative"]
    assert set(ceiling) == {"1", "2"} and ceiling["1"] == 1.0
    md = report.read_text()
    assert "## Hardware ceiling" in md and "## Output identity" in md
    assert (assets / "speedup_vs_draft_length.png").stat().st_size > 0
    variables = yaml.safe_load(vars_file.read_text())
    assert variables["llama_server_spec_type"] in ("none", "draft-simple")
