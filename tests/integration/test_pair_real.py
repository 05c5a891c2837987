"""check-pair on real model headers. SmolLM2 is fetched through the fetch code (98 MB, cached); the Qwen
pair and Gemma 3 are used when already in the models cache (``specops fetch-model NAME``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specops.cli import main
from specops.fetch import catalog, fetch_model
from specops.pair import check_pair
from specops.paths import cache_dir

MODELS = cache_dir() / "models"


@pytest.fixture(scope="module")
def smollm() -> Path:
    result = fetch_model(catalog()["smollm2-135m"], MODELS, cache_dir(), progress=False)
    assert result.verified
    return result.path


def cached(name: str) -> Path:
    spec = catalog()[name]
    path = MODELS / spec.file
    if not path.exists() or path.stat().st_size != spec.size:
        pytest.skip(f"{spec.file} is not in {MODELS}: run `specops fetch-model {name}` to include this test")
    return path


def test_smollm2_with_itself(smollm: Path) -> None:
    report = check_pair(smollm, smollm)
    assert report.compatible
    assert report.target.vocab_type == "BPE" and report.target.vocab_size == 49152
    assert (report.target.bos, report.target.eos, report.target.add_bos) == (1, 2, False)
    assert report.target.n_layer == 30 and report.target.quant == "Q4_1"
    assert any("speedup will be small" in w for w in report.warnings)


@pytest.mark.integration
def test_qwen_pair_is_compatible_and_fast(capsys: pytest.CaptureFixture[str]) -> None:
    target, draft = cached("qwen2.5-coder-1.5b"), cached("qwen2.5-coder-0.5b")
    t0 = time.monotonic()
    assert main(["check-pair", "--json", str(target), str(draft)]) == 0
    elapsed = time.monotonic() - t0
    data = json.loads(capsys.readouterr().out)
    assert data["compatible"] and data["first_mismatch"] is None
    t, d = data["target"], data["draft"]
    assert (t["architecture"], t["n_layer"], t["vocab_size"], t["quant"]) == ("qwen2", 28, 151936, "Q4_K_M")
    assert (d["n_layer"], d["bos"], d["eos"]) == (24, 151643, 151645)
    assert t["file_size"] == 1_117_320_768
    # the draft is 44 % of the target: llama.cpp accepts it, the speedup will be small
    assert any("speedup will be small" in w for w in data["warnings"])
    # the stock GGUFReader needs ~30 s for these two headers; the header-only reader a second or two
    assert elapsed < 10, f"check-pair took {elapsed:.1f} s"


@pytest.mark.integration
def test_smollm2_draft_for_qwen_target_is_refused(smollm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = cached("qwen2.5-coder-1.5b")
    assert main(["check-pair", str(target), str(smollm)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  vocab size  151,936 vs 49,152 tokens" in out
    assert "first difference at id 5: target '&', draft '<file_sep>'" in out
    assert "INCOMPATIBLE (vocab size)" in out


@pytest.mark.integration
def test_gemma_and_smollm2_differ(smollm: Path) -> None:
    gemma = cached("gemma3-270m")
    report = check_pair(gemma, smollm)
    assert not report.compatible
    failed = {c.name for c in report.checks if not c.ok}
    assert "vocab size" in failed and "token text" in failed
    assert report.target.architecture == "gemma3" and report.target.n_layer == 18
