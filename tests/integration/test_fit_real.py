"""fit on real headers, against the buffer sizes llama.cpp 0c1e57098 itself reports (CPU build, -c 4096,
flash attention auto): Qwen2.5-Coder 1.5B: KV 112.00 MiB, compute 68.51 MiB; 0.5B as draft: KV 48.00 MiB,
compute 39.51 MiB (from `llama-speculative -v` load logs on this machine)."""

from __future__ import annotations

import pytest

from specops.fetch import catalog, fetch_model
from specops.fit import MIB, FitParams, Memory, estimate
from specops.paths import cache_dir

MODELS = cache_dir() / "models"
BIG = Memory("host RAM", 64 * 1024 * MIB, 64 * 1024 * MIB, "test")


def mib(report, component: str) -> float:
    return next(i.bytes for i in report.items if i.component == component) / MIB


def test_smollm2_kv_and_weights() -> None:
    path = fetch_model(catalog()["smollm2-135m"], MODELS, cache_dir(), progress=False).path
    r = estimate(path, None, FitParams(ctx_size=8192), BIG)
    # 30 layers × 8192 cells × 3 kv heads × 64 × (2 + 2) B
    assert mib(r, "target KV cache") == 180.0
    r8 = estimate(path, None, FitParams(ctx_size=8192, cache_type_k="q8_0", cache_type_v="q8_0"), BIG)
    assert mib(r8, "target KV cache") == pytest.approx(180.0 * 34 / 64)
    assert mib(r, "target weights") == pytest.approx(92.1, abs=0.1)
    tiny = Memory("host RAM", 400 * MIB, 400 * MIB, "test")
    assert not estimate(path, None, FitParams(ctx_size=8192), tiny).fits


@pytest.mark.integration
def test_qwen_pair_matches_llama_cpp() -> None:
    files = [MODELS / catalog()[n].file for n in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")]
    for f in files:
        if not f.exists():
            pytest.skip(f"{f.name} is not in {MODELS}: run `specops fetch-model` for the Qwen pair")
    r = estimate(files[0], files[1], FitParams(ctx_size=4096), BIG)
    assert mib(r, "target KV cache") == 112.0
    assert mib(r, "draft KV cache") == 48.0
    assert mib(r, "target compute") == pytest.approx(68.51, abs=0.5)
    assert mib(r, "draft compute") == pytest.approx(39.51, abs=0.5)
    assert mib(r, "target weights") == pytest.approx(1059.89, abs=0.1)  # llama.cpp: CPU_Mapped model buffer
    assert 1850 < r.needed / MIB < 2000
