"""The bench and the tune on a GPU build and with llama.cpp's synthetic acceptance (benchmarking only).

On a GPU build every server is told to put every layer on the GPU (not llama.cpp's ``auto``, which fits what is
free when it starts, so the later of several servers side by side would silently keep layers on the CPU), the
capacity counts GPU memory with one copy of the weights per server, and ``--spec-synth-rates`` carries exactly one
rate per draft position (llama.cpp refuses any other count).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.argv import build_argv
from specops.bench.arms import select_arms
from specops.bench.capacity import capacity
from specops.bench.config import parse_rates
from specops.bench.runner import BenchConfig, BenchError
from specops.bench.tasks import load_tasks
from specops.capabilities import parse_help
from specops.cli import main
from specops.paths import build_backend
from tests.unit.synthgguf import write_gguf

HELP = Path(__file__).parents[1] / "fixtures" / "llama-server-0c1e57098" / "llama-server_help.txt"
RATES = (0.87, 0.70, 0.64, 0.58, 0.53, 0.46, 0.43, 0.42)


def _cfg(gpu: bool, rates: tuple[float, ...] = ()) -> BenchConfig:
    return BenchConfig(target=Path("/m/t.gguf"), draft=Path("/m/d.gguf"), server_binary=Path("llama-server"),
                       caps=parse_help(HELP.read_text()), tasks=load_tasks(limit_per_workload=1),
                       backend="cuda" if gpu else "cpu", synth_rates=rates)


def _argv(cfg: BenchConfig, name: str) -> list[str]:
    arm = next(a for a in select_arms([name]) if a.name == name)
    return build_argv(cfg.profile_for(arm), cfg.caps)


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_a_gpu_build_puts_every_layer_of_both_models_on_the_gpu() -> None:
    spec, plain = _argv(_cfg(True), "exact-n8"), _argv(_cfg(True), "exact-baseline")
    assert _value(spec, "--gpu-layers") == "all" and _value(spec, "--spec-draft-ngl") == "all"
    assert _value(plain, "--gpu-layers") == "all" and "--spec-draft-ngl" not in plain
    cpu = _argv(_cfg(False), "exact-n8")
    assert "--gpu-layers" not in cpu and "--spec-draft-ngl" not in cpu


def test_synthetic_rates_one_per_draft_position_and_only_on_speculative_servers() -> None:
    cfg = _cfg(False, RATES)
    assert _value(_argv(cfg, "exact-n2"), "--spec-synth-rates") == "0.8700,0.7000"
    assert _value(_argv(cfg, "exact-n8"), "--spec-synth-rates") == ",".join(f"{r:.4f}" for r in RATES)
    assert "--spec-synth-rates" not in _argv(cfg, "exact-baseline")
    assert "--spec-synth-rates" not in _argv(_cfg(False), "exact-n8")
    with pytest.raises(BenchError, match="drafts up to 16 tokens but the synthetic acceptance gives 8 rates"):
        _argv(cfg, "draft-n16")


@pytest.mark.parametrize(("text", "expected"), [
    ("0.9,0.5", (0.9, 0.5)),
    ("1", (1.0,)),
])
def test_rates_parse(text: str, expected: tuple[float, ...]) -> None:
    assert parse_rates(text) == expected


def test_rates_from_the_pair_acceptance_file(tmp_path: Path) -> None:
    f = tmp_path / "pair.json"
    f.write_text(json.dumps({"rates": [0.8, 0.6, 0.6]}))
    assert parse_rates(str(f)) == (0.8, 0.6, 0.6)


@pytest.mark.parametrize("bad", ["0.5,0.9", "1.2", "x", "", "-0.1"])
def test_bad_rates_are_refused(bad: str) -> None:
    with pytest.raises(BenchError, match="synthetic acceptance"):
        parse_rates(bad)


def test_build_backend_reads_build_info(tmp_path: Path) -> None:
    assert build_backend(tmp_path) == "cpu"
    (tmp_path / "build-info.json").write_text(json.dumps({"backend": "CUDA"}))
    assert build_backend(tmp_path) == "cuda"
    (tmp_path / "build-info.json").write_text("{cut")
    assert build_backend(tmp_path) == "cpu"


def test_gpu_capacity_counts_one_copy_of_the_weights_per_server(tmp_path: Path) -> None:
    """Against GPU memory the model files are not shared (each server uploads its own copy): the capacity is what
    the fit says one server needs, repeated, within the GPU's memory less the margin."""
    target = write_gguf(tmp_path / "t.gguf", extra_tensor_elems=16 * 2**20)  # 64 MiB of f32 weights
    draft = write_gguf(tmp_path / "d.gguf")
    cfg = BenchConfig(target=target, draft=draft, server_binary=Path("llama-server"),
                      caps=parse_help(HELP.read_text()), tasks=load_tasks(limit_per_workload=1), backend="cuda")
    arms = select_arms(["exact-n8", "exact-n2"])  # with the two baselines: four servers
    # one server: 64 MiB of weights + 576 MiB CUDA context + KV/compute; 4 GiB less the 512 MiB margin holds all
    n, note = capacity(cfg, arms, memory_mib=4096)
    assert "of GPU" in note and n == len(arms), note
    # 2 GiB: the file is not counted as shared page cache, so fewer servers fit
    small, note_small = capacity(cfg, arms, memory_mib=2048)
    assert 1 <= small < n, note_small


def test_tune_refuses_synthetic_acceptance_under_the_identity_rule(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "llama"
    (prefix / "bin").mkdir(parents=True)
    for b in ("llama-server", "llama-bench"):
        (prefix / "bin" / b).write_text("")
    (prefix / "capabilities.json").write_text(json.dumps({"spec_types": ["draft-simple"], "options": []}))
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    rc = main(["tune", "--target", str(target), "--llama-prefix", str(prefix), "--synth-rates", "0.9,0.5",
               "--work-dir", str(tmp_path / "work")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "add --rule fastest" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "work").exists()
