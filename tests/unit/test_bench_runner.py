"""The runner against a fake llama-server (no model): records, resume, a server dying mid-run,
the report and inventory variables built from the stored results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from specops.bench.arms import select_arms
from specops.bench.runner import ArmFailure, BenchConfig, Progress, run_bench, run_server_arm
from specops.bench.store import ResultStore, StoreError
from specops.bench.summary import build
from specops.bench.tasks import load_tasks, task_set_digest, workloads_of
from specops.capabilities import parse_help

HERE = Path(__file__).resolve().parent
HELP = HERE.parents[0] / "fixtures" / "llama-server-0c1e57098" / "llama-server_help.txt"


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    wrapper = tmp_path / "llama-server"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "fake_llama_server.py"} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def make_cfg(fake_bin: Path, tmp_path: Path, reps: int = 1) -> BenchConfig:
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    return BenchConfig(
        target=target,
        draft=target,
        server_binary=fake_bin,
        caps=parse_help(HELP.read_text()),
        tasks=load_tasks(limit_per_workload=2),
        max_tokens=8,
        reps=reps,
        start_timeout=30,
    )


def plan_for(cfg: BenchConfig, arms: list) -> dict:
    counts: dict[str, int] = {}
    for t in cfg.tasks:
        counts[t.workload] = counts.get(t.workload, 0) + 1
    return {
        "task_set_digest": task_set_digest(cfg.tasks),
        "max_tokens": cfg.max_tokens,
        "seed": cfg.seed,
        "target": str(cfg.target),
        "draft": str(cfg.draft),
        "build_commit": "x",
        "threads": None,
        "ctx_size": cfg.ctx_size,
        "reps": cfg.reps,
        "arms": [a.name for a in arms],
        "arm_defs": [a.to_dict() for a in arms],
        "workload_counts": {w: counts[w] for w in workloads_of(cfg.tasks)},
        "machine": {"hostname": "testhost"},
    }


def test_arm_record_shape(fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_cfg(fake_bin, tmp_path)
    store = ResultStore(tmp_path / "work")
    arm = select_arms(["baseline"])[0]
    rec = run_server_arm(arm, 0, cfg, store, Progress(6, quiet=True))
    assert rec["argv"][0] == str(fake_bin) and "--spec-type" in rec["argv"]
    assert len(rec["requests"]) == len(cfg.tasks)
    r0 = rec["requests"][0]
    assert r0["text"].startswith("echo ") and r0["ttft_s"] is not None and r0["e2e_s"] >= r0["ttft_s"]
    assert r0["decode_tps"] > 0 and r0["finish_reason"] == "stop"
    assert rec["rss"]["peak"] > 0
    assert store.has("baseline", 0) and not store.path("baseline", 0, partial=True).exists()


def test_speculation_must_really_be_on(fake_bin: Path, tmp_path: Path) -> None:
    cfg = make_cfg(fake_bin, tmp_path)
    store = ResultStore(tmp_path / "work")
    arm = select_arms(["ngram-mod"])[1]
    with pytest.raises(ArmFailure, match="speculation is off"):
        run_server_arm(arm, 0, cfg, store, Progress(6, quiet=True))


def test_server_dying_mid_run_keeps_partial_results(
    fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_cfg(fake_bin, tmp_path)
    store = ResultStore(tmp_path / "work")
    arms = select_arms(["baseline-again"])
    monkeypatch.setenv("FAKE_DIE_AFTER", "3")  # warm-up + 2 tasks, dies on the 3rd task
    with pytest.raises(ArmFailure) as err:
        run_bench(cfg, arms, store, {"server": run_server_arm}, Progress(12, quiet=True))
    msg = str(err.value)
    assert "exited with code 3" in msg and "partial results" in msg
    partial = json.loads(store.path("baseline", 0, partial=True).read_text())
    assert partial["status"] == "failed" and len(partial["requests"]) == 2
    assert "error" in partial
    # resume: the server behaves now; the failed arm-repetition is redone and the run completes
    monkeypatch.delenv("FAKE_DIE_AFTER")
    run_bench(cfg, arms, store, {"server": run_server_arm}, Progress(12, quiet=True))
    assert store.has("baseline", 0) and store.has("baseline-again", 0)
    assert not store.path("baseline", 0, partial=True).exists()


def test_resume_skips_finished_and_refuses_other_plans(fake_bin: Path, tmp_path: Path) -> None:
    cfg = make_cfg(fake_bin, tmp_path)
    store = ResultStore(tmp_path / "work")
    arms = select_arms(["baseline"])
    store.init_plan(plan_for(cfg, arms))
    run_bench(cfg, arms, store, {"server": run_server_arm}, Progress(6, quiet=True))
    mtime = store.path("baseline", 0).stat().st_mtime_ns
    calls: list[str] = []
    run_bench(cfg, arms, store, {"server": lambda a, *rest: calls.append(a.name) or {}}, Progress(6, quiet=True))
    assert calls == [] and store.path("baseline", 0).stat().st_mtime_ns == mtime
    other = plan_for(cfg, arms) | {"max_tokens": 99}
    with pytest.raises(StoreError, match="different plan"):
        store.init_plan(other)


def test_report_and_inventory_from_results(fake_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_cfg(fake_bin, tmp_path, reps=2)
    cfg.tasks = load_tasks(limit_per_workload=3)
    store = ResultStore(tmp_path / "work")
    arms = select_arms(["baseline-again", "ngram-mod"])
    store.init_plan(plan_for(cfg, arms))
    run_bench(cfg, arms[:2], store, {"server": run_server_arm}, Progress(99, quiet=True))
    monkeypatch.setenv("FAKE_SPEC", "1")
    run_bench(cfg, arms[2:], store, {"server": run_server_arm}, Progress(99, quiet=True))
    out = build(
        store,
        tmp_path / "reports" / "speculative_benchmark.md",
        tmp_path / "reports" / "bench",
        "fastest",
        tmp_path / "inv" / "speculative.yml",
    )
    md = out.report.read_text()
    assert "Machine **testhost**" in md and "## Results: code" in md and "## Output identity" in md
    assert all(p.exists() and p.stat().st_size > 0 for p in out.images)
    raw = json.loads(out.raw_json.read_text())
    assert set(raw["runs"]) == {"baseline", "baseline-again", "ngram-mod"}
    # the fake's ngram arm is 1.5x faster on every task → it wins under "fastest"
    assert out.picks["all"].arm == "ngram-mod"
    assert raw["summary"]["ngram-mod"]["all"]["acceptance"] == pytest.approx(0.75)
    assert raw["summary"]["ngram-mod"]["all"]["mean_accept_len"] == pytest.approx(4.0)
    variables = yaml.safe_load(out.vars_file.read_text())  # type: ignore[union-attr]
    assert variables["llama_server_spec_type"] == "ngram-mod"
    assert set(variables) >= {
        "llama_server_draft_n_max",
        "llama_server_flash_attn",
        "llama_server_cache_type_v",
        "llama_server_repack",
        "llama_server_threads",
        "llama_server_draft_threads",
    }
    # under "identical" the fake's ngram output differs?  No: same text → it also qualifies
    ident = build(store, tmp_path / "r2.md", tmp_path / "a2", "identical", None)
    assert ident.picks["all"].arm == "ngram-mod"
    # an arm whose text differs is excluded under the identity rule
    monkeypatch.setenv("FAKE_TEXT_SUFFIX", " (different)")
    for rep in range(2):
        store.path("ngram-mod", rep).unlink()
    run_bench(cfg, arms[2:], store, {"server": run_server_arm}, Progress(99, quiet=True))
    ident = build(store, tmp_path / "r3.md", tmp_path / "a3", "identical", None)
    assert ident.picks["all"].arm == "baseline"
    assert "output differs" in ident.picks["all"].rejected["ngram-mod"]
