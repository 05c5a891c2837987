"""fit: the KV/compute arithmetic, llama.cpp's cell rounding, margins, GPU memory parsing, CLI exit codes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from specops.cli import main
from specops.fit import (
    GPU_OVERHEAD,
    MIB,
    OVERHEAD,
    FitError,
    FitParams,
    Memory,
    ModelShape,
    cache_type_bytes,
    estimate,
    kv_cells,
    measure_memory,
    parse_margin,
    parse_nvidia_smi,
    parse_rocm_smi,
)
from specops.ggufmeta import read
from tests.unit.synthgguf import write_gguf

BIG = Memory("host RAM", 64 * 1024 * MIB, 64 * 1024 * MIB, "test")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    # 4 layers, n_embd 64, 4 heads → head_dim 16, 2 kv heads, n_ff 128
    return write_gguf(tmp_path / "m.gguf")


def test_cache_type_sizes() -> None:
    assert cache_type_bytes("f16") == 2 and cache_type_bytes("f32") == 4
    assert cache_type_bytes("q8_0") == 34 / 32 and cache_type_bytes("q4_0") == 18 / 32
    assert cache_type_bytes("q5_1") == 24 / 32 and cache_type_bytes("iq4_nl") == 18 / 32
    with pytest.raises(FitError, match="unknown cache type"):
        cache_type_bytes("q3_k")


@pytest.mark.parametrize(
    ("n_ctx", "n_par", "unified", "cells"),
    [
        (4096, 1, False, 4096),
        (4000, 1, False, 4096),
        (4096, 4, False, 4096),
        (4096, 3, False, 4608),  # pad(4096 / 3 = 1365, 256) = 1536 per slot
        (4096, 3, True, 4096),
        (100, 2, False, 512),
    ],
)
def test_kv_cells_follow_llama_cpp(n_ctx: int, n_par: int, unified: bool, cells: int) -> None:
    assert kv_cells(n_ctx, n_par, unified) == cells


def test_kv_bytes(model: Path, tmp_path: Path) -> None:
    s = ModelShape.of(read(model))
    assert (s.n_layer, s.key_length, s.value_length, s.n_head_kv) == (4, 16, 16, [2, 2, 2, 2])
    # per layer and cell: 2 heads × 16 × 2 B for K and the same for V = 128 B
    assert s.kv_bytes(4096, "f16", "f16") == 4 * 4096 * 128
    assert s.kv_bytes(4096, "q8_0", "f16") == 4 * 4096 * (2 * 16 * 34 / 32 + 64)
    per_layer = ModelShape.of(read(write_gguf(tmp_path / "pl.gguf", n_head_kv=[2, 0, 2, 0])))
    assert per_layer.kv_bytes(4096, "f16", "f16") == 2 * 4096 * 128


def test_estimate_breakdown(model: Path, tmp_path: Path) -> None:
    draft = write_gguf(tmp_path / "d.gguf", n_layer=2)
    r = estimate(model, draft, FitParams(ctx_size=4096, cache_type_k="q8_0", cache_type_v="q8_0"), BIG)
    items = {i.component: i.bytes for i in r.items}
    assert items["target weights"] == read(model).tensor_bytes
    assert items["target KV cache"] == int(4 * 4096 * 2 * (2 * 16 * 34 / 32))
    assert items["draft KV cache"] == 2 * 4096 * 128  # draft cache types default to f16
    assert items["target compute"] == 4 * 512 * (3 * 128 + 4 * 64) + 2 * 512 * 4096
    assert r.needed == sum(items.values())
    assert r.margin == 512 * MIB and r.fits
    no_fa = estimate(model, None, FitParams(flash_attn=False), BIG)
    fa = estimate(model, None, FitParams(flash_attn=True), BIG)
    diff = {i.component: i.bytes for i in no_fa.items}["target compute"] - {
        i.component: i.bytes for i in fa.items
    }["target compute"]
    assert diff == 4 * 512 * 4096 * 4  # the score matrix: ubatch × cells × heads × 4 B


def test_gpu_weights_leave_the_input_embedding_in_host_ram(tmp_path: Path) -> None:
    """Measured on an H100 (reports/gpu-h100.md): llama.cpp keeps token_embd in host RAM with every layer
    offloaded, and copies it to the GPU as the output layer when the model has no output matrix."""
    tied = write_gguf(tmp_path / "tied.gguf")
    untied = write_gguf(tmp_path / "untied.gguf", output_tensor=True)
    embd = next(t.n_bytes for t in read(untied).tensors if t.name == "token_embd.weight")
    gpu = Memory("GPU", 80 * 1024 * MIB, 80 * 1024 * MIB, "test")
    for path, on_gpu in ((tied, read(tied).tensor_bytes), (untied, read(untied).tensor_bytes - embd)):
        items = {i.component: i.bytes for i in estimate(path, tied, FitParams(), gpu).items}
        assert items["target weights"] == on_gpu
        assert items["draft weights"] == read(tied).tensor_bytes
        assert items["runtime overhead"] == GPU_OVERHEAD
        host = {i.component: i.bytes for i in estimate(path, None, FitParams(), BIG).items}
        assert host["target weights"] == read(path).tensor_bytes and host["runtime overhead"] == OVERHEAD


def test_ctx_zero_means_training_context(model: Path) -> None:
    r = estimate(model, None, FitParams(ctx_size=0), BIG)
    assert {i.component: i.bytes for i in r.items}["target KV cache"] == 4 * 2048 * 128


def test_margin_parsing() -> None:
    assert parse_margin("10%,512MiB", 10 * 1024 * MIB) == 1024 * MIB
    assert parse_margin("10%,512MiB", 1024 * MIB) == 512 * MIB
    assert parse_margin("1GiB", 0) == 1024 * MIB
    assert parse_margin("0", 100) == 0
    with pytest.raises(FitError, match="bad margin"):
        parse_margin("lots", 0)


def test_nvidia_smi_parsing() -> None:
    gpus = parse_nvidia_smi("24576, 1024\n\n 8192 MiB, 8000 MiB \n")
    assert [g["free_mib"] for g in gpus] == [23552, 192]
    with pytest.raises(FitError, match="unified-memory GPU"):
        parse_nvidia_smi("[N/A], [N/A]\n")
    with pytest.raises(FitError, match="3 columns where 2 were expected"):
        parse_nvidia_smi("24576, 1024, 23552\n")
    with pytest.raises(FitError, match="listed no GPU"):
        parse_nvidia_smi("\n")


def test_rocm_smi_parsing() -> None:
    text = json.dumps(
        {
            "card0": {
                "VRAM Total Memory (B)": str(16 * 1024 * MIB),
                "VRAM Total Used Memory (B)": str(1024 * MIB),
            }
        }
    )
    assert parse_rocm_smi(text)[0]["free_mib"] == 15 * 1024


def test_cuda_backend_queries_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\necho \'16384, 4096, 11776\'\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    mem = measure_memory("cuda")
    # available is memory.free (total - used - the driver's reserve), not total - used
    assert (mem.kind, mem.available, mem.total) == ("GPU", 11776 * MIB, 16384 * MIB)
    assert (
        "--query-gpu=memory.total,memory.used,memory.free --format=csv,noheader,nounits"
        in (fake.parent / "args").read_text()
    )
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FitError, match="nvidia-smi not found"):
        measure_memory("cuda")


def test_cli_exit_codes(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(model), "--memory-mib", "100000"]) == 0
    assert "result: fits" in capsys.readouterr().out
    assert main(["fit", str(model), "--memory-mib", "600", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is False and data["shortfall_mib"] > 0
    assert {b["component"] for b in data["breakdown"]} >= {"target weights", "target KV cache"}
    assert "DOES NOT FIT" in data["message"]
    assert main(["fit", str(tmp_path / "nope.gguf")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["fit", str(model), "--nvidia-smi-output", "garbage", "--backend", "cuda"]) == 2


def test_gpu_memory_from_llama_server_list_devices() -> None:
    from specops.fit import measure_memory

    out = ("Available devices:\n  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 23000 MiB free)\n"
           "  Vulkan1: llvmpipe (LLVM 15.0.6, 256 bits) (23000 MiB, 22000 MiB free)\n")
    mem = measure_memory("vulkan", list_devices_output=out)
    assert mem.kind == "GPU" and mem.source == "llama-server --list-devices"
    assert mem.available == (23000 + 22000) * 2**20 and mem.total == (24560 + 23000) * 2**20
    with pytest.raises(FitError, match="finds no cuda device"):
        measure_memory("cuda", list_devices_output=out)


def test_prompt_cache_counts_against_host_ram_only(model: Path) -> None:
    base = estimate(model, None, FitParams(), BIG)
    cached = estimate(model, None, FitParams(cache_ram_mib=1024), BIG)
    assert {i.component for i in cached.items} - {i.component for i in base.items} == {"prompt cache"}
    assert cached.needed - base.needed == 1024 * MIB
    gpu = Memory("GPU", 24 * 1024 * MIB, 24 * 1024 * MIB, "test")
    assert estimate(model, None, FitParams(cache_ram_mib=1024), gpu).needed == estimate(
        model, None, FitParams(), gpu).needed
    assert any("unbounded" in n for n in estimate(model, None, FitParams(cache_ram_mib=-1), BIG).notes)


def test_a_hybrid_mtp_target_counts_what_llama_cpp_allocates_per_kind(tmp_path: Path) -> None:
    """The tiny qwen35 (tests/tiny_mtp.py: 2 trunk layers, Gated DeltaNet then attention, 1 MTP layer): only the
    trunk's attention layer keeps KV in the target's context, the MTP layer's KV lives in draft-mtp's own context,
    and the recurrent layer's states carry draft_n_max rollback snapshots under draft-mtp (the sizes llama.cpp
    0c1e57098 reports for this file: tests/integration/test_fit_real.py)."""
    from tests import tiny_mtp

    path = tiny_mtp.write(tmp_path / "tiny.gguf")
    shape = ModelShape.of(read(path))
    assert shape.n_nextn == 1 and shape.recurrent == (True, False, False)
    assert shape.kv_layers() == [1] and shape.kv_layers(mtp=True) == [2]
    assert (shape.n_embd_r, shape.n_embd_s) == (3 * (256 + 2 * 2 * 128), 128 * 256)
    big = Memory("host RAM", 1 << 40, 1 << 40, "test")
    mib = lambda r, c: next((i.bytes for i in r.items if i.component == c), None)  # noqa: E731
    plain = estimate(path, None, FitParams(ctx_size=4096, spec_type="none", draft_n_max=3), big)
    assert mib(plain, "target KV cache") == 4096 * 2 * 128 * 4  # one attention layer, f16 K and V
    assert mib(plain, "target recurrent state") == 4 * 1 * (2304 + 32768)  # one sequence, no snapshot
    assert mib(plain, "MTP KV cache") is None
    mtp = estimate(path, None, FitParams(ctx_size=4096, spec_type="draft-mtp", draft_n_max=3), big)
    assert mib(mtp, "MTP KV cache") == 4096 * 2 * 128 * 4
    assert mib(mtp, "target recurrent state") == 4 * (1 + 3) * (2304 + 32768)
    assert mib(mtp, "MTP compute") and mib(mtp, "MTP output buffers")
    assert mtp.needed > plain.needed
    ngram = estimate(path, None, FitParams(ctx_size=4096, spec_type="draft-mtp,ngram-mod", draft_n_max=3), big)
    assert ngram.needed == mtp.needed + 16 * MIB  # ngram-mod's pool


def test_ngram_mod_counts_its_pool_in_host_ram(model: Path) -> None:
    """ngram-mod (and llama.cpp's ``default``, which is ngram-mod at 0c1e57098) keeps a 16 MiB hash table per server
    in host RAM; other kinds and GPU memory do not count it."""
    ram = Memory("host RAM", 1 << 40, 1 << 40, "test")
    pool = lambda r: next((i.bytes for i in r.items if i.component == "ngram-mod pool"), None)  # noqa: E731
    for spec_type, want in (("ngram-mod", 16 * MIB), ("default", 16 * MIB), ("ngram-simple", None), ("none", None),
                            ("draft-mtp,ngram-mod", 16 * MIB)):
        assert pool(estimate(model, None, FitParams(ctx_size=1024, spec_type=spec_type), ram)) == want, spec_type
    gpu = Memory("GPU", 1 << 40, 1 << 40, "test")
    assert pool(estimate(model, None, FitParams(ctx_size=1024, spec_type="ngram-mod"), gpu)) is None
