"""Will target + draft fit in memory? An estimate from the GGUF headers, checked against RAM or GPU memory.

needed = weights(target) + weights(draft)                      tensor data sizes from the GGUF tensor tables
       + KV(target) + KV(draft)
       + compute(target) + compute(draft)
       + output buffers + runtime overhead

KV(model) = n_layer × n_cells × (n_head_kv × key_length × bytes(cache_type_k)
                                 + n_head_kv × value_length × bytes(cache_type_v))

``n_cells`` follows llama.cpp (src/llama-context.cpp at 0c1e57098): ``-c`` is the *total* context shared
by the ``-np`` slots, padded to a multiple of 256; with a per-slot (non-unified) cache each slot gets
``pad(n_ctx / n_parallel, 256)`` cells, so n_cells = that × n_parallel. ``-c 0`` means the model's training
context. The draft context gets the same ``-c`` (common_base_params_to_speculative copies it) and its own
cache types (``-ctkd/-ctvd``, default f16). ``bytes(type)`` comes from ggml's block sizes: f32 4, f16/bf16 2,
q8_0 34/32, q5_1 24/32, q5_0 22/32, q4_1 20/32, q4_0 and iq4_nl 18/32. ``n_head_kv`` may be per layer.
Sliding-window layers (Gemma 3) are counted at full size: an upper bound.

compute(model), the ggml scheduler's reserve for one ubatch (default 512 tokens)::

    4 B × n_ubatch × (3 × n_ff + 4 × n_embd)        activations (FFN gate/up/act, residual stream)
  + 2 B × n_ubatch × n_cells                         the f16 KQ mask
  + 4 B × n_ubatch × n_cells × n_head                scores, only without flash attention

Calibrated on this commit's CPU build (flash attention auto = on): Qwen2.5-Coder 1.5B at -c 4096 reserves
68.51 MiB (formula: 68.5), the 0.5B draft 39.51 MiB (formula: 39.5). Output buffers: n_vocab × 4 B per output
row (target: n_parallel × (draft_n_max + 1) rows, draft: n_parallel). Runtime overhead: 128 MiB for the
process itself (binary, libraries, thread pools, HTTP server). CPU_REPACK duplicates of weights live in the
page cache, which the kernel can reclaim, and are not counted.

Against GPU memory (every layer offloaded, as the CUDA profiles deploy) the weights are those llama.cpp puts on
the GPU: all but the input embedding ``token_embd``, which stays in host RAM, except that a model with tied
embeddings (no ``output.weight``) gets a copy of it on the GPU as its output layer. The runtime overhead is the
process's CUDA context, cuBLAS handles and pools, 576 MiB. Checked against nvidia-smi's per-process use on an
H100 for Qwen2.5 1.5B/7B/14B shapes, alone and with the 0.5B draft, at -c 4096 and 32768: within 1.1%
(reports/gpu-h100.md, before: up to 27% low for the 1.5B).

It fits when needed + margin ≤ available, margin = max(10 % of needed, 512 MiB) by default.
Available: host RAM ``psutil.virtual_memory().available`` (or total with ``--memory-basis total``), or GPU
memory summed over GPUs for GPU backends (nvidia-smi's memory.free, which leaves out the driver's reserve;
rocm-smi's VRAM total − used), or a given number. Unified-memory GPUs (DGX Spark GB10) report no GPU memory:
those need --memory-mib.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specops.devices import DeviceError, parse_list_devices, require_device
from specops.ggufmeta import GGUFInfo, read
from specops.knobs import CACHE_TYPES, LIST_DEVICES_FLAG, knob, spec_type_members
from specops.nvsmi import MIB_CELL, header_names, read_table

MIB = 1024 * 1024
GPU_BACKENDS = ("cuda", "rocm", "hip")
OVERHEAD = 128 * MIB
# One llama-server process's CUDA context, cuBLAS handles and pools on the GPU, beyond its buffers: 571-583 MiB
# measured with nvidia-smi on an H100 (CUDA 13.0, driver 580) for four model shapes (reports/gpu-h100.md).
GPU_OVERHEAD = 576 * MIB
INPUT_EMBEDDING = "token_embd.weight"  # llama.cpp keeps the input layer in host RAM even with every layer offloaded
OUTPUT = "output.weight"
DEFAULT_MARGIN = "10%,512MiB"
NVIDIA_FIELDS = ("memory.total", "memory.used", "memory.free")  # what measure_memory asks nvidia-smi for
_ROCM_TOTAL = re.compile(r"vram total memory \(b\)", re.IGNORECASE)
_ROCM_USED = re.compile(r"vram (total )?used memory \(b\)", re.IGNORECASE)


_C, _NP, _UB, _CRAM = (knob(n).flag for n in ("ctx_size", "parallel", "ubatch_size", "cache_ram_mib"))


class FitError(ValueError):
    """Bad input or memory that cannot be measured; the message says what to do."""


def cache_type_bytes(name: str) -> float:
    if name.lower() not in CACHE_TYPES:
        raise FitError(f"unknown cache type {name!r}; llama.cpp accepts {', '.join(CACHE_TYPES)}")
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]
    return size / block


def pad(n: int, to: int = 256) -> int:
    return (n + to - 1) // to * to


def kv_cells(n_ctx: int, n_parallel: int, kv_unified: bool) -> int:
    cells = pad(n_ctx)
    if kv_unified or n_parallel <= 1:
        return cells
    return pad(cells // n_parallel) * n_parallel


@dataclass
class ModelShape:
    path: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: list[int]  # per layer
    key_length: int
    value_length: int
    n_vocab: int
    context_length: int
    weights: int
    sliding_window: int | None
    input_bytes: int = 0  # the input embedding (host RAM when offloaded)
    tied: bool = False  # no output matrix: the embedding is copied to the GPU as the output layer
    arch: str = ""
    n_nextn: int = 0  # MTP layers after the trunk (<arch>.nextn_predict_layers)
    recurrent: tuple[bool, ...] = ()  # per layer: a recurrent (linear-attention) layer, which keeps no KV
    n_embd_r: int = 0  # a recurrent layer's conv state per sequence (floats)
    n_embd_s: int = 0  # a recurrent layer's SSM state per sequence (floats)

    @classmethod
    def of(cls, info: GGUFInfo) -> ModelShape:
        n_layer = info.arch_get("block_count")
        n_embd = info.arch_get("embedding_length")
        n_head = info.arch_get("attention.head_count")
        if n_head is None:
            raw_heads = info.array(f"{info.arch}.attention.head_count")
            n_head = max(raw_heads) if raw_heads else None
        if not (n_layer and n_embd and n_head):
            raise FitError(f"{info.path}: {info.arch}.block_count/embedding_length/attention.head_count "
                           "missing: not a decoder LLM that this estimate understands")
        kv = info.arch_get("attention.head_count_kv")  # a scalar, or a per-layer array
        raw_kv = info.array(f"{info.arch}.attention.head_count_kv") if kv is None else None
        kv_list = [int(x) for x in raw_kv] if raw_kv else [int(n_head if kv is None else kv)] * int(n_layer)
        head_dim = int(n_embd) // int(n_head)
        n_ff = info.arch_get("feed_forward_length")
        if n_ff is None:
            raw_ff = info.array(f"{info.arch}.feed_forward_length")
            n_ff = max(raw_ff) if raw_ff else 4 * n_embd
        n_vocab = info.array_lengths.get("tokenizer.ggml.tokens") or int(info.arch_get("vocab_size", 0) or 0)
        return cls(
            path=str(info.path), n_layer=int(n_layer), n_embd=int(n_embd), n_ff=int(n_ff), n_head=int(n_head),
            n_head_kv=kv_list, key_length=int(info.arch_get("attention.key_length", head_dim)),
            value_length=int(info.arch_get("attention.value_length", head_dim)), n_vocab=int(n_vocab),
            context_length=int(info.arch_get("context_length", 0) or 0), weights=info.tensor_bytes,
            sliding_window=info.arch_get("attention.sliding_window"),
            input_bytes=sum(t.n_bytes for t in info.tensors if t.name == INPUT_EMBEDDING),
            tied=not any(t.name == OUTPUT for t in info.tensors), arch=str(info.arch), **_hybrid(info, int(n_layer)),
        )

    @property
    def n_trunk(self) -> int:
        return trunk_layers(self.n_layer, self.n_nextn)

    def kv_layers(self, mtp: bool = False) -> list[int]:
        """The layers with a KV cache: in the target's context its trunk's attention layers; in an MTP context
        (``--spec-type draft-mtp``) the MTP layers alone (llama_model::create_memory's layer filters)."""
        if mtp:
            return list(range(self.n_trunk, self.n_layer))
        return [il for il in range(self.n_trunk) if not (il < len(self.recurrent) and self.recurrent[il])]

    def recurrent_bytes(self, rows: int) -> int:
        """The recurrent layers' states (f32): ``rows`` = sequences × (1 + rollback snapshots)."""
        return 4 * sum(self.recurrent) * rows * (self.n_embd_r + self.n_embd_s)

    def gpu_weights(self) -> int:
        """Weight bytes on the GPU with every layer offloaded: all but the input embedding, which llama.cpp
        keeps in host RAM; with tied embeddings it is also the output layer, so a copy lives on the GPU."""
        return self.weights if self.tied else self.weights - self.input_bytes

    def kv_bytes(self, cells: int, type_k: str, type_v: str, layers: list[int] | None = None) -> int:
        bk, bv = cache_type_bytes(type_k), cache_type_bytes(type_v)
        heads = [self.n_head_kv[il] for il in (self.kv_layers() if layers is None else layers)]
        per_cell = sum(h * self.key_length * bk + h * self.value_length * bv for h in heads)
        return int(cells * per_cell)

    def compute_bytes(self, cells: int, n_ubatch: int, flash_attn: bool) -> int:
        act = 4 * n_ubatch * (3 * self.n_ff + 4 * self.n_embd)
        mask = 2 * n_ubatch * cells
        scores = 0 if flash_attn else 4 * n_ubatch * cells * self.n_head
        return act + mask + scores


# Gated-DeltaNet hybrids: every full_attention_interval-th trunk layer attends (keeps KV), the others are recurrent
# (src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp at 0c1e57098: attention.recurrent_layers when the file has it)
HYBRID_ARCHS = ("qwen35", "qwen35moe", "qwen3next")
NGRAM_MOD_POOL = 4 * 1024 * 1024 * 4  # ngram-mod's hash table: 4 Mi int32 entries (common_speculative_impl_ngram_mod)
EAGLE3_ARCH = "eagle3"  # an EAGLE-3 draft: one decoder layer over the target's hidden states (src/models/eagle3.cpp)
# spec types whose target context keeps draft_n_max recurrent-state snapshots per sequence for rollback
# (common_params_speculative::need_n_rs_seq)
ROLLBACK_TYPES = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")


def trunk_layers(n_layer: int, n_nextn: int) -> int:
    """The layers the target's own context runs: all but the MTP layers (llama.cpp keeps every layer where the
    model is MTP layers alone)."""
    return n_layer - n_nextn if 0 < n_nextn < n_layer else n_layer


def _hybrid(info: GGUFInfo, n_layer: int) -> dict[str, Any]:
    """The MTP layer count and, for a hybrid architecture, which layers are recurrent and their state sizes."""
    n_nextn = int(info.arch_get("nextn_predict_layers", 0) or 0)
    out: dict[str, Any] = {"n_nextn": n_nextn}
    if info.arch not in HYBRID_ARCHS:
        return out
    trunk = trunk_layers(n_layer, n_nextn)
    flags = info.array(f"{info.arch}.attention.recurrent_layers")
    if flags is not None and len(flags) == n_layer:
        out["recurrent"] = tuple(bool(f) for f in flags)
    else:
        every = int(info.arch_get("full_attention_interval", 4) or 4)
        out["recurrent"] = tuple(il < trunk and (il + 1) % every != 0 for il in range(n_layer))
    d_conv, d_inner = int(info.arch_get("ssm.conv_kernel", 0) or 0), int(info.arch_get("ssm.inner_size", 0) or 0)
    d_state, n_group = int(info.arch_get("ssm.state_size", 0) or 0), int(info.arch_get("ssm.group_count", 0) or 0)
    out["n_embd_r"] = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    out["n_embd_s"] = d_state * d_inner
    return out


def deployed(name: str, backend: str | None = None) -> Any:
    """What the service deploys for knob ``name`` on ``backend`` (our default there, else llama.cpp's):
    ``specops fit``'s default."""
    return knob(name).deployed_for(backend)


def unset(name: str) -> Any:
    """llama-server's own default for knob ``name``: what it runs with when the flag is not given."""
    return knob(name).llama_default


@dataclass
class FitParams:
    """The settings the estimate depends on (the knobs with ``fit=True``, same names). Unset, each is
    llama-server's own default (a bare server), except the context shape, which is the service's, and the
    prompt cache, counted only when given. ``specops fit`` starts from what the service deploys instead."""

    ctx_size: int = deployed("ctx_size")
    parallel: int = deployed("parallel")
    kv_unified: bool = unset("kv_unified")
    cache_type_k: str = unset("cache_type_k")
    cache_type_v: str = unset("cache_type_v")
    draft_cache_type_k: str = unset("draft_cache_type_k")
    draft_cache_type_v: str = unset("draft_cache_type_v")
    ubatch_size: int = unset("ubatch_size")
    flash_attn: bool = unset("flash_attn") != "off"
    draft_n_max: int = unset("draft_n_max")
    spec_type: str = deployed("spec_type")
    margin: str = DEFAULT_MARGIN
    cache_ram_mib: int = 0  # host RAM the prompt cache may fill (counted against host RAM only)


@dataclass
class Item:
    component: str
    bytes: int
    detail: str


@dataclass
class Memory:
    kind: str  # "host RAM" or "GPU"
    available: int
    total: int
    source: str
    devices: list[dict[str, int]] = field(default_factory=list)


@dataclass
class FitReport:
    items: list[Item]
    needed: int
    margin: int
    memory: Memory
    params: FitParams
    notes: list[str]

    @property
    def fits(self) -> bool:
        return self.needed + self.margin <= self.memory.available

    def as_dict(self) -> dict[str, Any]:
        mib = lambda b: round(b / MIB, 2)  # noqa: E731
        return {
            "fits": self.fits, "needed_mib": mib(self.needed), "margin_mib": mib(self.margin),
            "available_mib": mib(self.memory.available), "total_mib": mib(self.memory.total),
            "memory": {"kind": self.memory.kind, "source": self.memory.source,
                       "devices": self.memory.devices},
            "shortfall_mib": mib(max(0, self.needed + self.margin - self.memory.available)),
            "breakdown": [
                {"component": i.component, "mib": mib(i.bytes), "bytes": i.bytes, "detail": i.detail}
                for i in self.items
            ],
            "params": asdict(self.params), "notes": self.notes,
        }


def parse_margin(text: str, needed: int) -> int:
    """``10%``, ``512MiB``, ``1GiB``, ``200MB`` or several, comma-separated: the largest wins."""
    best = 0
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(%|[KMG]i?B|B)?", part, re.IGNORECASE)
        if not m:
            raise FitError(f"bad margin {part!r}: use e.g. 10%, 512MiB, 1GiB or '10%,512MiB'")
        value, unit = float(m.group(1)), (m.group(2) or "MiB").lower()
        if unit == "%":
            best = max(best, int(needed * value / 100))
        else:
            scale = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
                     "kib": 1024, "mib": MIB, "gib": 1024 * MIB}[unit]
            best = max(best, int(value * scale))
    return best


def _smi_header(cells: list[str]) -> list[str] | None:
    """Column names if ``cells`` is a ``--format=csv`` header (``memory.total [MiB]`` -> ``memory.total``)."""
    names = header_names(cells)
    return names if names and any(n.startswith("memory.") for n in names) else None


def _smi_mib(cell: str, line: str) -> int | None:
    """``81559`` or ``81559 MiB``; None where nvidia-smi printed no figure (``[N/A]``, ``[Not Supported]``)."""
    if m := MIB_CELL.fullmatch(cell):
        return int(m.group(1))
    if cell.upper() == "N/A" or (cell.startswith("[") and cell.endswith("]")):
        return None
    raise FitError(f"cannot read {cell!r} in nvidia-smi output line {line!r} as MiB; pass --memory-mib")


def _smi_gpu(index: int, row: dict[str, str], line: str) -> dict[str, int]:
    total = _smi_mib(row["memory.total"], line)
    used = _smi_mib(row["memory.used"], line) if "memory.used" in row else None
    free = _smi_mib(row["memory.free"], line) if "memory.free" in row else None
    gpu = f"GPU {row.get('index', index)}" + (f" ({row['name']})" if row.get("name") else "")
    if total is None:
        raise FitError(
            f"nvidia-smi reports no memory.total for {gpu} ({row['memory.total']}): a unified-memory GPU "
            "(DGX Spark GB10, Jetson) has no VRAM of its own, its pool is host RAM; pass --memory-mib with the "
            "RAM the server may use, or --backend cpu to measure host RAM"
        )
    if used is None and free is None:
        raise FitError(
            f"nvidia-smi reports memory.total but neither memory.used nor memory.free for {gpu}; pass --memory-mib"
        )
    used = total - free if used is None else used
    free = total - used if free is None else free
    return {"index": index, "total_mib": total, "used_mib": used, "free_mib": max(0, free)}


def parse_nvidia_smi(text: str, fields: Sequence[str] = ("memory.total", "memory.used")) -> list[dict[str, int]]:
    """Parse ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]``, one GPU a line.

    Without a header the columns are ``fields`` (default: total, used, as ``--nvidia-smi-output`` documents);
    a header line (``--format=csv``) names them itself, so any field list that has memory.total and
    memory.used or memory.free is read. Free is ``memory.free`` where given (it leaves out the driver's
    reserved memory), else total - used.
    """
    header, rows = read_table(text, _smi_header)
    names = header or [f.lower() for f in fields]
    if "memory.total" not in names:
        raise FitError(
            f"nvidia-smi output has no memory.total column ({', '.join(names)}); query "
            "--query-gpu=memory.total,memory.used or pass --memory-mib"
        )
    gpus: list[dict[str, int]] = []
    for line, cells in rows:
        if len(cells) != len(names):
            raise FitError(
                f"cannot read nvidia-smi output line {line!r}: {len(cells)} columns where "
                f"{len(names)} were expected ({', '.join(names)}); pass --memory-mib"
            )
        gpus.append(_smi_gpu(len(gpus), dict(zip(names, cells, strict=True)), line))
    if not gpus:
        raise FitError("nvidia-smi listed no GPU; check the driver (nvidia-smi -L) or pass --memory-mib")
    return gpus


def _card_number(key: str) -> int:
    """``card3`` -> 3; -1 for rocm-smi's other top-level keys (``system``)."""
    m = re.fullmatch(r"card(\d+)", key)
    return int(m.group(1)) if m else -1


def _rocm_bytes(card: str, values: dict[str, Any], key: re.Pattern[str]) -> int | None:
    raw = next((v for k, v in values.items() if key.fullmatch(k.strip())), None)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise FitError(f"rocm-smi reports {raw!r} for {card}'s VRAM, not a byte count; pass --memory-mib") from None


def parse_rocm_smi(text: str) -> list[dict[str, int]]:
    """Parse ``rocm-smi --showmeminfo vram --json`` (other --show* flags may add keys; ``system`` is skipped)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise FitError("cannot parse rocm-smi JSON output; pass --memory-mib") from None
    if not isinstance(data, dict):
        raise FitError("rocm-smi JSON is not an object keyed by card; pass --memory-mib")
    gpus = []
    for card in sorted((k for k in data if _card_number(k) >= 0 and isinstance(data[k], dict)), key=_card_number):
        total, used = _rocm_bytes(card, data[card], _ROCM_TOTAL), _rocm_bytes(card, data[card], _ROCM_USED)
        if total is None or used is None:
            continue
        gpus.append(
            {
                "index": len(gpus),
                "total_mib": total // MIB,
                "used_mib": used // MIB,
                "free_mib": max(0, total - used) // MIB,
            }
        )
    if not gpus:
        raise FitError("rocm-smi reported no VRAM figures; pass --memory-mib")
    return gpus


def _run(cmd: list[str]) -> str:
    if not shutil.which(cmd[0]):
        raise FitError(f"{cmd[0]} not found: the backend needs it to measure GPU memory; install the driver "
                       "tools or pass --memory-mib")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if run.returncode != 0:
        raise FitError(f"{' '.join(cmd)} failed ({run.returncode}): {run.stderr.strip()[-300:]}; "
                       "pass --memory-mib to skip the query")
    return run.stdout


def gpu_memory(gpus: list[dict[str, int]], source: str) -> Memory:
    return Memory("GPU", sum(g["free_mib"] for g in gpus) * MIB, sum(g["total_mib"] for g in gpus) * MIB,
                  source, gpus)


def devices_memory(backend: str, list_devices_output: str) -> Memory:
    """GPU memory of ``backend``'s devices from ``llama-server --list-devices`` (any GPU backend, e.g. Vulkan)."""
    try:
        devs = require_device(backend, parse_list_devices(list_devices_output), list_devices_output)
    except DeviceError as exc:
        raise FitError(f"{exc}; or pass --memory-mib") from None
    return gpu_memory([{"total_mib": d.total_mib, "free_mib": d.free_mib} for d in devs],
                      f"llama-server {LIST_DEVICES_FLAG}")


def measure_memory(backend: str, basis: str = "available", *, memory_mib: float | None = None,
                   nvidia_smi_output: str | None = None, list_devices_output: str | None = None) -> Memory:
    backend = backend.lower()
    kind = "GPU" if backend in GPU_BACKENDS or list_devices_output is not None else "host RAM"
    if memory_mib is not None:
        return Memory(kind, int(memory_mib * MIB), int(memory_mib * MIB), "given (--memory-mib)")
    if nvidia_smi_output is not None:
        return gpu_memory(parse_nvidia_smi(nvidia_smi_output), "nvidia-smi output given")
    if list_devices_output is not None:
        return devices_memory(backend, list_devices_output)
    if backend == "cuda":
        q = ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_FIELDS)}", "--format=csv,noheader,nounits"]
        return gpu_memory(parse_nvidia_smi(_run(q), NVIDIA_FIELDS), "nvidia-smi")
    if backend in ("rocm", "hip"):
        return gpu_memory(parse_rocm_smi(_run(["rocm-smi", "--showmeminfo", "vram", "--json"])), "rocm-smi")
    vm = psutil.virtual_memory()
    avail = vm.total if basis == "total" else vm.available
    return Memory("host RAM", int(avail), int(vm.total), f"psutil ({basis})")


def _kv_item(component: str, s: ModelShape, cells: int, tk: str, tv: str, layers: list[int]) -> Item:
    kv = [s.n_head_kv[il] for il in layers] or [0]
    heads = kv[0] if len(set(kv)) == 1 else f"{min(kv)}..{max(kv)}"
    return Item(component, s.kv_bytes(cells, tk, tv, layers),
                f"{len(layers)} layers × {cells} cells × {heads} kv heads × "
                f"({s.key_length}×{tk} + {s.value_length}×{tv})")


def _kind_items(tshape: ModelShape, dshape: ModelShape | None, params: FitParams, cells: int,
                gpu: bool = False) -> list[Item]:
    """What a kind of speculation adds beside the models' own KV: a hybrid target's recurrent states (with
    draft_n_max rollback snapshots each for MTP-like types), and draft-mtp's second context on the target (KV for
    the MTP layers, its compute buffer and outputs)."""
    members = set(spec_type_members(params.spec_type))
    out: list[Item] = []
    if any(tshape.recurrent):
        snaps = params.draft_n_max if members & set(ROLLBACK_TYPES) else 0
        rows = max(1, params.parallel) * (1 + snaps)
        out.append(Item("target recurrent state", tshape.recurrent_bytes(rows),
                        f"{sum(tshape.recurrent)} recurrent layers × {max(1, params.parallel)} sequences × "
                        f"(1 + {snaps} rollback snapshots) × ({tshape.n_embd_r} + {tshape.n_embd_s}) × f32"))
    if dshape is not None and dshape.arch == EAGLE3_ARCH:
        out.append(Item("draft logits (EAGLE-3)", 2 * dshape.n_vocab * params.ubatch_size * 4,
                        f"its compute buffer holds logits for a whole ubatch: 2 × {dshape.n_vocab} vocab × "
                        f"{params.ubatch_size} tokens × 4 B (llama.cpp reports it with the draft's compute)"))
    if members & {"ngram-mod", "default"} and not gpu:  # ``default`` is ngram-mod at 0c1e57098
        out.append(Item("ngram-mod pool", NGRAM_MOD_POOL, "4 Mi n-gram entries × 4 B in host RAM, one per server "
                        "(common/speculative.cpp)"))
    if "draft-mtp" in members and dshape is None and tshape.n_nextn > 0:
        out.append(_kv_item("MTP KV cache", tshape, cells, params.cache_type_k, params.cache_type_v,
                            tshape.kv_layers(mtp=True)))
        out.append(Item("MTP compute", tshape.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                        "the MTP context's own compute buffer (estimate, as the target's)"))
        out.append(Item("MTP output buffers", tshape.n_vocab * 4 * max(1, params.parallel),
                        "logits rows × n_vocab × 4 B"))
    return out


def estimate(target: str | Path, draft: str | Path | None, params: FitParams, memory: Memory) -> FitReport:
    for t in (params.cache_type_k, params.cache_type_v, params.draft_cache_type_k, params.draft_cache_type_v):
        cache_type_bytes(t)
    if params.parallel < 1 or params.ctx_size < 0 or params.ubatch_size < 1:
        raise FitError(f"{_NP} and {_UB} must be ≥ 1, {_C} ≥ 0")
    tshape = ModelShape.of(read(target))
    dshape = ModelShape.of(read(draft)) if draft else None
    n_ctx = params.ctx_size or tshape.context_length
    if not n_ctx:
        raise FitError(f"{_C} 0 asks for the model's training context, but the GGUF does not say it")
    cells = kv_cells(n_ctx, params.parallel, params.kv_unified)
    items: list[Item] = []
    notes: list[str] = []
    # the target verifies draft_n_max + 1 rows per slot whenever something drafts (a draft model, MTP, n-gram types)
    drafting = dshape is not None or bool(set(spec_type_members(params.spec_type)) - {"none", "auto"})
    target_rows = params.parallel * (params.draft_n_max + 1) if drafting else params.parallel
    roles: list[tuple[str, ModelShape, str, str, int]] = [
        ("target", tshape, params.cache_type_k, params.cache_type_v, target_rows)]
    if dshape is not None:
        roles.append(("draft", dshape, params.draft_cache_type_k, params.draft_cache_type_v, params.parallel))
    gpu = memory.kind == "GPU"
    for role, s, _tk, _tv, _outputs in roles:
        if gpu:
            items.append(Item(f"{role} weights", s.gpu_weights(), f"{Path(s.path).name}, every layer on the GPU"
                              + ("" if s.tied else f" (input embedding, {s.input_bytes / MIB:,.0f} MiB, in host RAM)")))
        else:
            items.append(Item(f"{role} weights", s.weights, Path(s.path).name))
    for role, s, tk, tv, _outputs in roles:
        items.append(_kv_item(f"{role} KV cache", s, cells, tk, tv, s.kv_layers()))
        if s.sliding_window:
            notes.append(f"{role} has sliding-window layers (window {s.sliding_window}); its KV is "
                         "counted at full size, an upper bound")
    items += _kind_items(tshape, dshape, params, cells, gpu)
    for role, s, _tk, _tv, _outputs in roles:
        items.append(Item(f"{role} compute", s.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                          f"ubatch {params.ubatch_size}, flash attention {'on' if params.flash_attn else 'off'} "
                          "(estimate)"))
    out = sum(s.n_vocab * 4 * outputs for _r, s, _k, _v, outputs in roles)
    items.append(Item("output buffers", out, "logits rows × n_vocab × 4 B"))
    if gpu:
        items.append(Item("runtime overhead", GPU_OVERHEAD, "CUDA context, cuBLAS and pools per process (measured)"))
    else:
        items.append(Item("runtime overhead", OVERHEAD, "process, libraries, threads, HTTP (fixed)"))
    if params.cache_ram_mib > 0 and memory.kind == "host RAM":
        items.append(Item("prompt cache", params.cache_ram_mib * MIB,
                          f"{_CRAM}: saved prompt states fill host RAM up to this bound as requests vary"))
    elif params.cache_ram_mib < 0:
        notes.append(f"{_CRAM} -1: the prompt cache is unbounded; host RAM use grows with distinct prompts")
    if n_ctx > tshape.context_length > 0:
        notes.append(f"{_C} {n_ctx} exceeds the target's training context {tshape.context_length}")
    needed = sum(i.bytes for i in items)
    return FitReport(items, needed, parse_margin(params.margin, needed), memory, params, notes)


def render(report: FitReport) -> str:
    p = report.params
    lines = [f"memory estimate: {knob('ctx_size').short()} {p.ctx_size} {knob('parallel').short()} {p.parallel}"
             f"{' ' + knob('kv_unified').flag if p.kv_unified else ''}, cache K/V {p.cache_type_k}/{p.cache_type_v}, "
             f"draft cache K/V {p.draft_cache_type_k}/{p.draft_cache_type_v}", ""]
    lines.append(f"  {'component':18} {'MiB':>10}  detail")
    for i in report.items:
        lines.append(f"  {i.component:18} {i.bytes / MIB:>10,.1f}  {i.detail}")
    m = report.memory
    lines += [
        f"  {'-' * 18} {'-' * 10}",
        f"  {'needed':18} {report.needed / MIB:>10,.1f}",
        f"  {'margin':18} {report.margin / MIB:>10,.1f}  {p.margin}",
        f"  {'available':18} {m.available / MIB:>10,.1f}  {m.kind} of {m.total / MIB:,.0f} MiB, {m.source}",
    ]
    lines += [f"note: {n}" for n in report.notes]
    if report.fits:
        spare = m.available - report.needed - report.margin
        lines.append(f"result: fits, {spare / MIB:,.0f} MiB to spare beyond the margin")
    else:
        short = report.needed + report.margin - m.available
        lines.append(f"result: DOES NOT FIT: short by {short / MIB:,.0f} MiB (needed + margin > available). "
                     f"Lower {_C} or {_NP}, quantize the KV cache (q8_0), pick smaller models, "
                     "or use a host with more memory")
    return "\n".join(lines)


def print_error(exc: Exception, as_json: bool) -> int:
    """`specops fit`'s refusal (either engine): one line on stderr (and a JSON answer with --json); exit 2."""
    if as_json:
        print(json.dumps({"fits": None, "error": str(exc)}))
    print(f"specops fit: {exc}", file=sys.stderr)
    return 2


def print_report(report: Any, text: str, as_json: bool) -> int:
    """`specops fit`'s answer (either engine): the report as JSON or text; exit 0 when it fits, else 1."""
    if as_json:
        print(json.dumps({**report.as_dict(), "message": text}, ensure_ascii=False))
    else:
        print(text)
    return 0 if report.fits else 1
