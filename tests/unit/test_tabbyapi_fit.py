"""The EXL2/EXL3 multi-GPU fit, on the seed's example (config.json of the seed's models in the fixtures)."""

from __future__ import annotations

import json

import pytest

from specops.cli import main
from specops.fit import MIB, FitError
from specops.tabbyapi.fit import GIB, Shape, TabbyFitParams, cache_bytes, estimate, parse_size
from tests.unit.test_tabbyapi_config import DRAFT, TARGET

SEED_GPUS = ["32GiB", "24GiB"]
SEED = ["fit", "--engine", "tabbyapi", str(TARGET), str(DRAFT), "-c", "16384", "--cache-mode", "Q4",
        "--gpu", "32GiB", "--gpu", "24GiB"]


def seed_report(**overrides):
    params = TabbyFitParams(**{"max_seq_len": 16384, "cache_mode": "Q4", **overrides})
    return estimate(Shape.of_dir(TARGET), Shape.of_dir(DRAFT), [parse_size(g) for g in SEED_GPUS], params)


def item(gpu, name) -> float:
    return sum(b for n, b in gpu.items if n == name) / MIB


def test_parameter_counts_of_the_seed_models():
    assert Shape.of_dir(TARGET).n_params == pytest.approx(68.98e9, rel=0.001)   # Llama-2-70B layout
    assert Shape.of_dir(DRAFT).n_params == pytest.approx(1.100e9, rel=0.001)    # TinyLlama 1.1B


def test_seed_example_fits_on_gpu0_by_autosplit():
    report = seed_report()
    gpu0, gpu1 = report.gpus
    # 68.45 B layer params × 2.5 bpw / 8 = 21.39 GB = 20,400 MiB; head 32000 × 8192 × 6 bits = 187.5 MiB
    assert item(gpu0, "target weights") == pytest.approx(20400.4, abs=0.5)
    assert item(gpu0, "target head") == pytest.approx(187.5)
    # Q4: (½ + 1/16) B for K and for V: 80 layers × 16384 × 8 × 128 × 1.125 B = 1,440 MiB
    assert item(gpu0, "target KV cache") == pytest.approx(1440.0)
    assert item(gpu0, "draft KV cache") == pytest.approx(352.0)        # FP16: 22 × 16384 × 4 × 64 × 4 B
    assert item(gpu0, "draft weights") == pytest.approx(462.0, abs=0.5)
    assert gpu1.used == 0 and report.fits
    assert report.placement["target"].startswith("GPU 0: layers 0-79")
    assert any("trained on 2,048 tokens" in n for n in report.notes)


def test_fp16_cache_at_32k_spills_onto_the_second_gpu():
    params = TabbyFitParams(max_seq_len=32768, cache_mode="FP16")
    report = estimate(Shape.of_dir(TARGET), Shape.of_dir(DRAFT), [32 * GIB, 24 * GIB], params)
    assert report.fits
    assert "GPU 1" in report.placement["target"] and report.gpus[1].used > 0


def test_a_single_24gib_gpu_does_not_fit_fp16_32k():
    params = TabbyFitParams(max_seq_len=32768, cache_mode="FP16")
    report = estimate(Shape.of_dir(TARGET), Shape.of_dir(DRAFT), [24 * GIB], params)
    assert not report.fits and "DOES NOT FIT" in report.placement["target"]


def test_explicit_split_places_layers_in_order():
    report = seed_report(gpu_split=[12.0, 12.0])
    assert report.fits
    where = report.placement["target"]
    assert where.startswith("GPU 0: layers 0-") and "GPU 1: layers" in where
    assert item(report.gpus[0], "target weights") <= 12 * 1024


@pytest.mark.parametrize("overrides,message", [
    ({"gpu_split": [10.0, 10.0]}, "holds only 78 of 80 layers"),
    ({"gpu_split": [40.0, 10.0]}, "40.0 GiB for GPU 0, which has 32.0 GiB"),
    ({"gpu_split": [10.0, 10.0, 10.0]}, "names 3 GPUs but only 2"),
    ({"cache_mode": "Q5"}, "unknown cache mode 'Q5'"),
])
def test_bad_splits_and_modes_are_errors(overrides, message):
    with pytest.raises(FitError, match=message):
        seed_report(**overrides)


def test_cache_bytes_follow_exllamav2():
    assert cache_bytes("FP16") == (2.0, 2.0)
    assert cache_bytes("q8") == (1.0625, 1.0625)
    assert cache_bytes("Q6") == (1.0625, 0.5625)
    assert cache_bytes("4,6", "exllamav3") == (0.5625, 0.8125)
    with pytest.raises(FitError, match="fall back to FP16"):
        cache_bytes("4,6", "exllamav2")


def test_cli_seed_example(capsys):
    assert main(SEED) == 0
    out = capsys.readouterr().out
    assert "placement: target: GPU 0: layers 0-79" in out and "result: fits" in out
    assert main([*SEED, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["gpus"][1]["used_mib"] == 0


@pytest.mark.parametrize("extra,message", [
    (["--gpu-split", "10,10"], "holds only 78 of 80 layers"),
    (["--cache-mode", "Q5"], "unknown cache mode"),
    (["--gpu", "lots"], "bad GPU size"),
])
def test_cli_bad_input_is_one_line_and_exit_2(capsys, extra, message):
    assert main([*SEED, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_cli_does_not_fit_is_exit_1(capsys):
    args = ["fit", "--engine", "tabbyapi", str(TARGET), str(DRAFT), "-c", "32768", "--gpu", "24GiB"]
    assert main(args) == 1
    assert "result: DOES NOT FIT" in capsys.readouterr().out
