"""fit on real headers, against the buffer sizes llama.cpp 0c1e57098 itself reports (CPU build, -c 4096,
flash attention auto): Qwen2.5-Coder 1.5B: KV 112.00 MiB, compute 68.51 MiB; 0.5B as draft: KV 48.00 MiB,
compute 39.51 MiB (from `llama-speculative -v` load logs on this machine)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from specops.fetch import catalog, fetch_model
from specops.fit import MIB, FitParams, Memory, estimate
from specops.paths import cache_dir
from specops.profile import ServerProfile
from specops.server import ServerProcess

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


_SIZE = re.compile(r"(llama_kv_cache|llama_memory_recurrent): size = +([\d.]+) MiB")
_BUF = re.compile(r" (compute|output) buffer size = +([\d.]+) MiB")


def _buffers(log: str) -> dict[str, list[float]]:
    """The memory llama-server reports, per context in order (the target's, then draft-mtp's): its KV caches and
    recurrent states, and its compute and output buffers (a context reserves its compute buffer again for another
    graph: the largest is what it holds)."""
    out: dict[str, list[float]] = {"kv": [], "recurrent": [], "compute": [], "output": []}
    for part in log.split("llama_context: constructing llama_context")[1:]:
        for kind, size in _SIZE.findall(part):
            out["kv" if kind == "llama_kv_cache" else "recurrent"].append(float(size))
        for kind in ("compute", "output"):
            sizes = [float(v) for k, v in _BUF.findall(part) if k == kind]
            if sizes:
                out[kind].append(max(sizes))
    return out


def reported_buffers(llama_build, profile: dict, tmp_path: Path, contexts: int = 1) -> dict[str, list[float]]:
    """Start the real llama-server with ``profile`` at -lv 4 (the library's buffer sizes are logged at info, which
    the server shows from 4), read what it allocated once it answers and its log holds the compute buffers of all
    ``contexts`` (a draft context's may reach the log after the server answers: seen once on a loaded machine, the
    MTP context's missing), stop it."""
    server = ServerProcess(llama_build.server, ServerProfile.from_dict(profile), llama_build.caps,
                           log_path=tmp_path / "llama-server.log")
    server.argv += ["-lv", "4"]
    server.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            got = _buffers(server.log_path.read_text())
            if len(got["compute"]) >= contexts or time.monotonic() > deadline:
                return got
            time.sleep(0.2)
    finally:
        server.stop()


@pytest.mark.integration
@pytest.mark.parametrize("spec_type", ["none", "draft-mtp", "draft-mtp,ngram-mod"])
def test_tiny_mtp_fit_per_kind_matches_what_llama_server_allocates(llama_build, tmp_path, spec_type) -> None:
    """The tiny qwen35 with one MTP layer (tests/tiny_mtp.py) in the real llama-server, per kind: the KV caches
    (the target's attention layer; draft-mtp's own context for the MTP layer) and the recurrent state (with
    draft_n_max rollback snapshots under draft-mtp) exactly as the server reports them; with the compute and output
    buffers, the total within 10%."""
    from tests import tiny_mtp

    path = tiny_mtp.cached()
    profile = {"model": str(path), "spec_type": spec_type, "draft_n_max": 3, "ctx_size": 4096, "parallel": 1,
               "threads": 1}
    mtp = spec_type != "none"
    got = reported_buffers(llama_build, profile, tmp_path, contexts=2 if mtp else 1)
    r = estimate(path, None, FitParams(ctx_size=4096, spec_type=spec_type, draft_n_max=3, flash_attn=True), BIG)
    assert len(got["kv"]) == (2 if mtp else 1) and len(got["recurrent"]) == 1, got
    assert mib(r, "target KV cache") == pytest.approx(got["kv"][0], abs=0.01)
    assert mib(r, "target recurrent state") == pytest.approx(got["recurrent"][0], abs=0.01)
    if mtp:
        assert mib(r, "MTP KV cache") == pytest.approx(got["kv"][1], abs=0.01)
    reported = sum(sum(v) for v in got.values())
    estimated = sum(i.bytes for i in r.items if i.component.endswith(
        ("KV cache", "recurrent state", "compute", "output buffers"))) / MIB
    assert estimated == pytest.approx(reported, rel=0.10), (got, [(i.component, i.bytes / MIB) for i in r.items])
    print(f"\nFIT | tiny qwen35 MTP, {spec_type}: llama-server {reported:.2f} MiB of buffers {got}, "
          f"specops fit {estimated:.2f} MiB ({estimated / reported - 1:+.1%})")


@pytest.mark.integration
def test_ngram_only_fit_matches_what_llama_server_allocates(llama_build, smollm, tmp_path) -> None:
    """SmolLM2 with ngram-mod and no draft model (the n-gram-only deploy's kind): its KV exactly and its buffers
    within 10% of what llama-server reports; the ngram-mod pool (16 MiB of host RAM, counted from the source) is
    no buffer llama.cpp reports, so it stays out of the comparison."""
    profile = {"model": str(smollm), "spec_type": "ngram-mod", "ctx_size": 2048, "parallel": 1, "threads": 1}
    got = reported_buffers(llama_build, profile, tmp_path)
    r = estimate(smollm, None, FitParams(ctx_size=2048, spec_type="ngram-mod", draft_n_max=3), BIG)
    assert mib(r, "target KV cache") == pytest.approx(got["kv"][0], abs=0.01)
    assert mib(r, "ngram-mod pool") == 16.0
    reported = sum(sum(v) for v in got.values())
    estimated = sum(i.bytes for i in r.items if i.component.endswith(("KV cache", "compute", "output buffers"))) / MIB
    assert estimated == pytest.approx(reported, rel=0.10), (got, [(i.component, i.bytes / MIB) for i in r.items])
    print(f"\nFIT | SmolLM2, ngram-mod: llama-server {reported:.2f} MiB of buffers {got}, specops fit "
          f"{estimated:.2f} MiB ({estimated / reported - 1:+.1%}) + the 16 MiB pool")
