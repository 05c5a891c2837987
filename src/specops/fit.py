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

Per device (``estimate(per_device=True)``, what ``specops fit`` runs; on more than one GPU, or where the placement
settings name a device): a sum can fit where one card does not, so each device is checked against its own free
memory (nvidia-smi per GPU, ``llama-server --list-devices`` per device, or ``--device-mib`` per device). The target's
layers go where llama.cpp puts them (:func:`layer_devices`: whole layers by the split's cumulative fractions, in
float32, the output layer as one more layer; the split is ``tensor_split``, else each device's free memory, as
llama.cpp's default; split mode none: the main GPU alone), and each device holds::

    its layers' weights (the tensor table's blk.N.*) + their KV cells (the same formula, its layers only)
  + the compute buffer (the one-device estimate, on each device that holds layers) + the output layer where it lands
  + the draft (weights, KV, compute) where it is placed + the runtime (GPU_OVERHEAD, per device it uses)

The draft goes on ``draft_device``; left open on more than one device, on the device with the most room after the
target (specops's default: the fit prints the arguments that pin it). Each device's margin is the margin of its own
need; one that overflows is refused in one line naming it, what it would hold and what it has. Logits and the input
embedding stay in host memory and are not counted on a device.
"""

from __future__ import annotations

import bisect
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specops.devices import (
    DeviceError,
    device_list,
    parse_list_devices,
    placement_problem,
    placement_set,
    require_device,
    split_parts,
)
from specops.ggufmeta import GGUFInfo, read
from specops.knobs import CACHE_TYPES, LIST_DEVICES_FLAG, PLACEMENT, knob, spec_type_members
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
    # per layer: the bytes of its tensors (blk.N.*); () where not known (then the layers share the weights evenly)
    layer_bytes: tuple[int, ...] = ()
    output_bytes: int = 0  # the tensors of no layer but the input embedding (output.weight, output_norm, ...)

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
            **_by_layer(info, int(n_layer)),
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

    def layer_weights(self) -> list[int]:
        """Each layer's weight bytes (llama.cpp places whole layers): from the tensor table, else an even share of
        what is not the output layer."""
        if len(self.layer_bytes) == self.n_layer:
            return list(self.layer_bytes)
        each = max(0, self.weights - self.input_bytes - self.output_bytes) // max(1, self.n_layer)
        return [each] * self.n_layer

    def output_weights(self) -> int:
        """The output layer's bytes where it is offloaded: its own tensors, and with tied embeddings the copy of the
        input embedding that serves as the output matrix."""
        return self.output_bytes + (self.input_bytes if self.tied else 0)

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


_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.")


def _by_layer(info: GGUFInfo, n_layer: int) -> dict[str, Any]:
    """The weight bytes of each layer (``blk.N.*``) and of the rest but the input embedding (the output layer's)."""
    per = [0] * n_layer
    rest = 0
    for t in info.tensors:
        m = _LAYER_TENSOR.match(t.name)
        if m and int(m.group(1)) < n_layer:
            per[int(m.group(1))] += t.n_bytes
        elif t.name != INPUT_EMBEDDING:
            rest += t.n_bytes
    return {"layer_bytes": tuple(per), "output_bytes": rest}


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
    # where the layers go (the per-device fit, estimate(per_device=True)): None leaves it to llama.cpp
    ngl: int | str = unset("ngl")
    draft_ngl: int | str = unset("draft_ngl")
    device: str | None = None
    draft_device: str | None = None
    tensor_split: str | None = None
    split_mode: str = unset("split_mode")
    main_gpu: int = unset("main_gpu")


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
    devices: list[dict[str, Any]] = field(default_factory=list)  # per device: name, free_mib, total_mib, ...


@dataclass
class FitReport:
    items: list[Item]
    needed: int
    margin: int
    memory: Memory
    params: FitParams
    notes: list[str]
    # the per-device fit (estimate(per_device=True) on more than one device, or with placement settings): each
    # device against its own free memory decides, not the sum
    devices: list[Any] = field(default_factory=list)  # DeviceRow
    placement: Any = None  # Placement
    draft: bool = False  # a draft model is loaded (the placement's arguments name its devices)

    @property
    def fits(self) -> bool:
        if self.devices:
            return all(r.fits for r in self.devices)
        return self.needed + self.margin <= self.memory.available

    @property
    def refusal(self) -> str | None:
        """One line naming the device that overflows, what it would hold and what it has (per-device fit only)."""
        return overflow_line(self.devices, self.memory.available) if self.devices else None

    def as_dict(self) -> dict[str, Any]:
        mib = lambda b: round(b / MIB, 2)  # noqa: E731
        short = max(0, self.needed + self.margin - self.memory.available)
        if self.devices:
            short = max([0, *(-r.spare for r in self.devices)])
        out = {
            "fits": self.fits, "needed_mib": mib(self.needed), "margin_mib": mib(self.margin),
            "available_mib": mib(self.memory.available), "total_mib": mib(self.memory.total),
            "memory": {"kind": self.memory.kind, "source": self.memory.source,
                       "devices": self.memory.devices},
            "shortfall_mib": mib(short),
            "breakdown": [
                {"component": i.component, "mib": mib(i.bytes), "bytes": i.bytes, "detail": i.detail}
                for i in self.items
            ],
            "params": asdict(self.params), "notes": self.notes,
        }
        if self.devices:
            out.update(per_device=[r.as_dict() for r in self.devices], refusal=self.refusal,
                       placement=self.placement.as_dict(self.draft))
        return out


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


def _smi_gpu(index: int, row: dict[str, str], line: str) -> dict[str, Any]:
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
    out: dict[str, Any] = {"index": index, "total_mib": total, "used_mib": used, "free_mib": max(0, free)}
    return {**out, "description": row["name"]} if row.get("name") else out


def parse_nvidia_smi(text: str, fields: Sequence[str] = ("memory.total", "memory.used")) -> list[dict[str, Any]]:
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
    gpus: list[dict[str, Any]] = []
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


def gpu_memory(gpus: list[dict[str, Any]], source: str, prefix: str = "") -> Memory:
    """GPU memory summed over ``gpus``; each keeps its own figures (the per-device fit), named ``<prefix><i>`` as
    ggml names the backend's devices (CUDA0, CUDA1) where the tool that listed them gave no name."""
    named = [{**g, "name": g.get("name") or f"{prefix}{i}"} if prefix or g.get("name") else dict(g)
             for i, g in enumerate(gpus)]
    return Memory("GPU", sum(g["free_mib"] for g in gpus) * MIB, sum(g["total_mib"] for g in gpus) * MIB,
                  source, named)


def devices_memory(backend: str, list_devices_output: str) -> Memory:
    """GPU memory of ``backend``'s devices from ``llama-server --list-devices`` (any GPU backend, e.g. Vulkan)."""
    try:
        devs = require_device(backend, parse_list_devices(list_devices_output), list_devices_output)
    except DeviceError as exc:
        raise FitError(f"{exc}; or pass --memory-mib") from None
    return gpu_memory([{"name": d.name, "description": d.description, "total_mib": d.total_mib,
                        "free_mib": d.free_mib} for d in devs], f"llama-server {LIST_DEVICES_FLAG}")


def parse_device_mib(text: str) -> list[dict[str, Any]]:
    """``CUDA0=32000,CUDA1=24000``: each device's free memory in MiB, as the operator gives it."""
    gpus: list[dict[str, Any]] = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, eq, mib = part.partition("=")
        try:
            value = float(mib) if eq else -1.0
        except ValueError:
            value = -1.0
        if not name.strip() or value < 0:
            raise FitError(f"--device-mib {text!r}: {part!r} is not NAME=MiB; give each device's free memory as "
                           f"llama-server {LIST_DEVICES_FLAG} names it (CUDA0=32000,CUDA1=24000)")
        if any(g["name"] == name.strip() for g in gpus):
            raise FitError(f"--device-mib {text!r}: {name.strip()} is given twice; give each device once")
        gpus.append({"name": name.strip(), "total_mib": int(value), "free_mib": int(value)})
    if not gpus:
        raise FitError("--device-mib names no device; give NAME=MiB for each (CUDA0=32000,CUDA1=24000)")
    return gpus


# how ggml names a backend's devices, where nvidia-smi or rocm-smi listed them by index
_SMI_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "hip": "ROCm"}


def measure_memory(backend: str, basis: str = "available", *, memory_mib: float | None = None,
                   nvidia_smi_output: str | None = None, list_devices_output: str | None = None,
                   device_mib: str | None = None) -> Memory:
    backend = backend.lower()
    kind = "GPU" if backend in GPU_BACKENDS or list_devices_output is not None else "host RAM"
    prefix = _SMI_PREFIX.get(backend, "CUDA")
    if device_mib is not None:
        return gpu_memory(parse_device_mib(device_mib), "given (--device-mib)")
    if memory_mib is not None:
        return Memory(kind, int(memory_mib * MIB), int(memory_mib * MIB), "given (--memory-mib)")
    if nvidia_smi_output is not None:
        return gpu_memory(parse_nvidia_smi(nvidia_smi_output), "nvidia-smi output given", prefix)
    if list_devices_output is not None:
        return devices_memory(backend, list_devices_output)
    if backend == "cuda":
        q = ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_FIELDS)}", "--format=csv,noheader,nounits"]
        return gpu_memory(parse_nvidia_smi(_run(q), NVIDIA_FIELDS), "nvidia-smi", prefix)
    if backend in ("rocm", "hip"):
        return gpu_memory(parse_rocm_smi(_run(["rocm-smi", "--showmeminfo", "vram", "--json"])), "rocm-smi", prefix)
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


# ---- per device ----------------------------------------------------------------------------------------------------
CPU = -1  # layer_devices' index of a layer llama.cpp keeps on the CPU


def layer_devices(n_layer: int, split: Sequence[float], n_gpu_layers: int | None = None) -> list[int]:
    """The device (an index into ``split``) of each layer 0..n_layer-1 and, last, of the output layer, as llama.cpp
    assigns them (llama_model_base::load_tensors at 0c1e57098, ``--split-mode layer``): the split's cumulative
    fractions in float32, layer ``il`` to the first device whose fraction exceeds ``(il - i_gpu_start) /
    act_gpu_layers`` (std::upper_bound), the output layer counted as layer ``n_layer``. ``n_gpu_layers`` (-ngl; None
    or negative: all, plus the output layer) keeps the first layers on the CPU (:data:`CPU`)."""
    f32 = np.float32
    cum: list[Any] = []
    total = f32(0)
    for part in split:
        total = f32(total + f32(part))
        cum.append(total)
    cum = [f32(c / total) for c in cum] if total > 0 else cum
    n_gpu = n_layer + 1 if n_gpu_layers is None or n_gpu_layers < 0 else n_gpu_layers
    start = max(n_layer + 1 - n_gpu, 0)
    active = min(n_gpu, n_layer + 1) if split else 0
    out = []
    for il in range(n_layer + 1):
        if il < start or il - start >= active:
            out.append(CPU)
            continue
        out.append(min(bisect.bisect_right(cum, f32(f32(il - start) / f32(active))), len(split) - 1))
    return out


def gpu_layers(value: Any) -> int | None:
    """-ngl / -ngld as a count: None for all (auto, all, unset, negative: the fit assumes every layer offloaded,
    as the GPU profiles deploy), else the number."""
    text = str(value).strip().lower() if value is not None else ""
    if text in ("", "auto", "all") or not text.lstrip("+-").isdigit():
        return None
    return None if int(text) < 0 else int(text)


@dataclass(frozen=True)
class DeviceFree:
    """One device's memory, as nvidia-smi, ``--list-devices`` or the operator (``--device-mib``) gives it."""

    name: str
    free: int  # bytes
    total: int
    description: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.description})" if self.description else self.name


def memory_devices(memory: Memory) -> list[DeviceFree]:
    """The named devices of a GPU memory measurement ([] for host RAM or one given number)."""
    if memory.kind != "GPU":
        return []
    return [DeviceFree(str(d["name"]), int(d["free_mib"]) * MIB, int(d.get("total_mib", d["free_mib"])) * MIB,
                       str(d.get("description") or "")) for d in memory.devices if d.get("name")]


@dataclass
class Placement:
    """Where llama.cpp puts the models: the target's devices and split, the draft's; ``chosen`` says what the fit
    filled in where the settings left it open."""

    devices: tuple[str, ...]
    split: tuple[float, ...]  # as llama.cpp takes it: the given proportions, or each device's free bytes
    split_mode: str = "layer"
    split_text: str = ""  # the split as -ts would give it (free memory in MiB where the fit chose it)
    draft_devices: tuple[str, ...] = ()
    draft_split: tuple[float, ...] = ()
    ngl: int | None = None
    draft_ngl: int | None = None
    chosen: dict[str, str] = field(default_factory=dict)  # knob name -> why (what specops or llama.cpp picked)
    layers: list[int] = field(default_factory=list)  # layer_devices of the target (indices into devices)
    draft_layers: list[int] = field(default_factory=list)  # of the draft (indices into draft_devices)

    def args(self, draft: bool) -> list[str]:
        """The llama-server arguments that pin this placement (the devices, the split, the draft's devices)."""
        out = [knob("device").flag, ",".join(self.devices) or "none"]
        if len(self.devices) > 1:
            out += [knob("tensor_split").flag, self.split_text]
        if self.split_mode != "layer":
            out += [knob("split_mode").flag, self.split_mode]
        if draft:
            out += [knob("draft_device").flag, ",".join(self.draft_devices) or "none"]
        return out

    def as_dict(self, draft: bool) -> dict[str, Any]:
        return {"devices": list(self.devices), "tensor_split": self.split_text, "split_mode": self.split_mode,
                "draft_devices": list(self.draft_devices) if draft else None, "chosen": self.chosen,
                "args": self.args(draft)}


@dataclass
class DeviceRow:
    """What one device would hold and what it has."""

    device: DeviceFree
    items: list[Item] = field(default_factory=list)
    margin: int = 0

    @property
    def needed(self) -> int:
        return sum(i.bytes for i in self.items)

    @property
    def fits(self) -> bool:
        return self.needed + self.margin <= self.device.free

    @property
    def spare(self) -> int:
        return self.device.free - self.needed - self.margin

    def get(self, component: str) -> int:
        return sum(i.bytes for i in self.items if i.component == component)

    def as_dict(self) -> dict[str, Any]:
        mib = lambda b: round(b / MIB, 2)  # noqa: E731
        return {"name": self.device.name, "description": self.device.description, "free_mib": mib(self.device.free),
                "total_mib": mib(self.device.total), "needed_mib": mib(self.needed), "margin_mib": mib(self.margin),
                "fits": self.fits, "items": [{"component": i.component, "mib": mib(i.bytes), "bytes": i.bytes,
                                              "detail": i.detail} for i in self.items]}


def _span(layers: list[int]) -> str:
    """``0-39`` (or ``0-3, 7``) for sorted layer indices."""
    runs: list[str] = []
    start = prev = None
    for il in [*layers, None]:
        if il is not None and prev is not None and il == prev + 1:
            prev = il
            continue
        if start is not None:
            runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = il
    return ", ".join(runs)


def _settings(params: FitParams) -> dict[str, Any]:
    return {name: getattr(params, name) for name in PLACEMENT}


def _model_devices(names: tuple[str, ...], mode: str, main_gpu: int) -> tuple[str, ...]:
    """The devices a model is loaded on: with split mode none, the main GPU's alone (llama_model_load_from_file)."""
    if mode == "none" and names:
        return (names[min(max(main_gpu, 0), len(names) - 1)],)
    return names


def placement(params: FitParams, devices: list[DeviceFree], tshape: ModelShape, source: str = "") -> Placement:
    """The target's placement the settings ask for on ``devices`` (their problems refused in one line, nothing
    changed): its devices (``device``, else every device listed), its split (``tensor_split``, else each device's
    free memory, as llama.cpp splits by default) and each layer's device by llama.cpp's rule; the draft's devices
    where ``draft_device`` names them (:func:`place_draft` fills in the rest once the target's share is known)."""
    listed = [d.name for d in devices]
    problem = placement_problem(_settings(params), listed, source=source)
    if problem:
        raise FitError(problem)
    free = {d.name: d.free for d in devices}
    chosen: dict[str, str] = {}
    names = device_list(params.device)
    if names is None:
        names = tuple(listed)
        chosen["device"] = "every device listed, llama.cpp's default"
    mode = str(params.split_mode or "layer")
    names = _model_devices(names, mode, int(params.main_gpu or 0))
    parts = split_parts(params.tensor_split)
    text = str(params.tensor_split or "")
    if parts is None or mode == "none":
        parts = tuple(float(free[n]) for n in names)  # llama.cpp: each device's free bytes, as float
        text = ",".join(f"{free[n] // MIB}" for n in names)
        if len(names) > 1:
            chosen["tensor_split"] = "each device's free MiB, llama.cpp's default"
    layers = layer_devices(tshape.n_layer, parts, gpu_layers(params.ngl)) if names else [CPU] * (tshape.n_layer + 1)
    if params.tensor_split is not None and mode != "none":
        empty = [n for i, n in enumerate(names) if i not in layers]
        if empty:
            counts = ", ".join(f"{n}: {layers.count(i)}" for i, n in enumerate(names))
            raise FitError(f"tensor_split={params.tensor_split!r} leaves {', '.join(empty)} no layer of the target's "
                           f"{tshape.n_layer} (llama.cpp places whole layers, the output layer counted: {counts}); "
                           f"raise {'its part' if len(empty) == 1 else 'their parts'} or leave "
                           f"{'it' if len(empty) == 1 else 'them'} out of device")
    return Placement(names, parts, mode, text, ngl=gpu_layers(params.ngl), draft_ngl=gpu_layers(params.draft_ngl),
                     chosen=chosen, layers=layers)


def _target_items(row: DeviceRow, i: int, place: Placement, s: ModelShape, params: FitParams, cells: int,
                  members: set[str]) -> None:
    """The target's share of device ``i``: its layers' weights and KV, the output layer, the compute buffer."""
    held = [il for il in range(s.n_layer) if place.layers[il] == i]
    output = place.layers[s.n_layer] == i
    if not held and not output:
        return
    weights = s.layer_weights()
    if place.split_mode in ("row", "tensor"):  # matrices split by rows over every device: its share of each
        share = place.split[i] / sum(place.split)
        row.items.append(Item("target layers", int(sum(weights) * share),
                              f"{share:.0%} of every layer's weights (split mode {place.split_mode}, estimate)"))
    else:
        row.items.append(Item("target layers", sum(weights[il] for il in held),
                              f"layers {_span(held)} ({len(held)} of {s.n_layer})" if held else "no layer"))
    if output:
        row.items.append(Item("target output layer", s.output_weights(), "output matrix and norm" +
                              (" (tied: a copy of the input embedding)" if s.tied else "")))
    kv_layers = [il for il in s.kv_layers() if place.layers[il] == i]
    if kv_layers:
        row.items.append(_kv_item("target KV cache", s, cells, params.cache_type_k, params.cache_type_v, kv_layers))
    recurrent = [il for il in held if il < len(s.recurrent) and s.recurrent[il]]
    if recurrent:
        snaps = params.draft_n_max if members & set(ROLLBACK_TYPES) else 0
        rows = max(1, params.parallel) * (1 + snaps)
        row.items.append(Item("target recurrent state", 4 * len(recurrent) * rows * (s.n_embd_r + s.n_embd_s),
                              f"{len(recurrent)} recurrent layers × {rows} rows × f32"))
    mtp = [il for il in s.kv_layers(mtp=True) if place.layers[il] == i] if "draft-mtp" in members else []
    if mtp and s.n_nextn > 0:
        row.items.append(_kv_item("MTP KV cache", s, cells, params.cache_type_k, params.cache_type_v, mtp))
    row.items.append(Item("target compute", s.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                          f"ubatch {params.ubatch_size} (estimate, as on one device)"))
    if output and "draft-mtp" in members and s.n_nextn > 0:
        row.items.append(Item("MTP compute", s.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                              "the MTP context's own compute buffer (estimate, as the target's)"))


def place_draft(params: FitParams, place: Placement, rows: list[DeviceRow], dshape: ModelShape) -> None:
    """The draft's devices and split: ``draft_device`` where given (split by ``tensor_split``'s first parts, else by
    each device's room left after the target, as llama.cpp measures free memory when it loads the draft), else, on
    one device, the target's; on more, the one with the most room left after the target (specops's default:
    llama.cpp would split the draft like the target, so the fit's advice pins it with the draft device flag)."""
    room = {r.device.name: r.device.free - r.needed for r in rows}
    names = device_list(params.draft_device)
    mode = place.split_mode
    if names is None:
        if len(place.devices) > 1:
            best = max(place.devices, key=lambda n: room[n])  # the first of equals, as max keeps
            names = (best,)
            place.chosen["draft_device"] = (f"the most room after the target, {room[best] / MIB:,.0f} MiB: "
                                            "specops's default")
        else:
            names = place.devices
    elif len(names) == 1:
        mode = "layer"  # common_base_params_to_speculative: a draft on one device needs no split mode
    names = _model_devices(names, mode, int(params.main_gpu or 0))
    given = split_parts(params.tensor_split)
    parts = (given[:len(names)] if given is not None and len(given) >= len(names) and any(given[:len(names)])
             else tuple(float(max(room.get(n, 0), 0)) or 1.0 for n in names))
    place.draft_devices, place.draft_split = names, parts
    place.draft_layers = (layer_devices(dshape.n_layer, parts, place.draft_ngl) if names
                          else [CPU] * (dshape.n_layer + 1))


def _draft_items(row: DeviceRow, i: int, place: Placement, s: ModelShape, params: FitParams, cells: int) -> None:
    held = [il for il in range(s.n_layer) if place.draft_layers[il] == i]
    output = place.draft_layers[s.n_layer] == i
    if not held and not output:
        return
    weights = s.layer_weights()
    row.items.append(Item("draft weights", sum(weights[il] for il in held) + (s.output_weights() if output else 0),
                          f"{Path(s.path).name}: layers {_span(held) or 'none'}" + (" and the output layer"
                                                                                     if output else "")))
    kv_layers = [il for il in s.kv_layers() if place.draft_layers[il] == i]
    if kv_layers:
        row.items.append(_kv_item("draft KV cache", s, cells, params.draft_cache_type_k, params.draft_cache_type_v,
                                  kv_layers))
    row.items.append(Item("draft compute", s.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                          f"ubatch {params.ubatch_size} (estimate)"))
    if output and s.arch == EAGLE3_ARCH:
        row.items.append(Item("draft logits (EAGLE-3)", 2 * s.n_vocab * params.ubatch_size * 4,
                              "logits for a whole ubatch in its compute buffer"))


def fit_devices(tshape: ModelShape, dshape: ModelShape | None, params: FitParams, devices: list[DeviceFree],
                cells: int, source: str = "") -> tuple[Placement, list[DeviceRow]]:
    """Each device against its own free memory: the target's layers on it (whole layers, llama.cpp's split), their
    KV cells, the compute buffer it reserves, the output layer where it lands, the draft (and its KV) where it is
    placed, and the runtime's own share (the CUDA context, cuBLAS and pools: :data:`GPU_OVERHEAD` on every device the
    process uses). Bad placement settings are refused in one line (:class:`FitError`); the rows' margins are
    ``params.margin`` of each device's own need."""
    place = placement(params, devices, tshape, source)
    members = set(spec_type_members(params.spec_type))
    rows = [DeviceRow(d) for d in devices]
    index = {n: i for i, n in enumerate(place.devices)}
    for row in rows:
        if row.device.name in index:
            _target_items(row, index[row.device.name], place, tshape, params, cells, members)
    for row in rows:  # the runtime where the target is: before the draft's device is picked by the room left
        if row.items:
            row.items.append(Item("runtime overhead", GPU_OVERHEAD, "CUDA context, cuBLAS and pools (per device)"))
    if dshape is not None:
        place_draft(params, place, rows, dshape)
        draft_index = {n: i for i, n in enumerate(place.draft_devices)}
        for row in rows:
            if row.device.name in draft_index:
                had = bool(row.items)
                _draft_items(row, draft_index[row.device.name], place, dshape, params, cells)
                if row.items and not had:
                    row.items.append(Item("runtime overhead", GPU_OVERHEAD,
                                          "CUDA context, cuBLAS and pools (per device)"))
    for row in rows:
        row.margin = parse_margin(params.margin, row.needed) if row.items else 0
    return place, rows


def overflow_line(rows: list[DeviceRow], pool_free: int) -> str | None:
    """The device that overflows most, in one line: what it would hold and what it has; None when all fit."""
    over = [r for r in rows if not r.fits]
    if not over:
        return None
    r = min(over, key=lambda r: r.spare)
    held = ", ".join(f"{i.component} {i.bytes / MIB:,.0f}" for i in r.items if i.bytes >= MIB // 2)
    total = sum(x.needed + x.margin for x in rows)
    whole = (f"; all devices together would hold {total / MIB:,.0f} MiB of {pool_free / MIB:,.0f} MiB free"
             + (" (the sum fits, this device does not)" if total <= pool_free else ""))
    return (f"{r.device.label} would hold {r.needed / MIB:,.0f} MiB ({held}) + {r.margin / MIB:,.0f} MiB margin and "
            f"has {r.device.free / MIB:,.0f} MiB free{whole}")


def estimate(target: str | Path, draft: str | Path | None, params: FitParams, memory: Memory,
             per_device: bool = False) -> FitReport:
    """The memory ``target`` and ``draft`` need with ``params``, against ``memory`` as one pool; ``per_device``: also
    each device against its own free memory (:func:`fit_devices`) where the memory names more than one device or the
    placement settings ask for one, and that decides whether it fits."""
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
    report = FitReport(items, needed, parse_margin(params.margin, needed), memory, params, notes)
    if per_device:
        _per_device(report, tshape, dshape, cells)
    return report


def _per_device(report: FitReport, tshape: ModelShape, dshape: ModelShape | None, cells: int) -> None:
    """The per-device fit into ``report`` where it applies: a GPU measurement naming more than one device, or any
    naming one with placement settings given. Placement settings with no device to place on are refused (host RAM:
    a CPU build lists none); with one number for all GPU memory (--memory-mib) they are noted, not checked."""
    params, memory = report.params, report.memory
    given = placement_set({name: getattr(params, name) for name in PLACEMENT})
    devices = memory_devices(memory)
    if memory.kind != "GPU" and given:
        problem = placement_problem({name: getattr(params, name) for name in PLACEMENT}, [],
                                    source=f"{memory.kind}, {memory.source}")
        raise FitError(f"{problem}; or fit the GPU build's memory (--backend cuda, --device-mib, --devices-output)")
    if not devices:
        if given:
            report.notes.append(f"placement ({', '.join(given)}) not checked per device: {memory.source} is one "
                                "number for all GPU memory; give each device's (--device-mib CUDA0=MiB,CUDA1=MiB)")
        return
    if len(devices) < 2 and not given:
        return
    report.placement, report.devices = fit_devices(tshape, dshape, params, devices, cells, memory.source)
    report.draft = dshape is not None
    if "nvidia-smi" in memory.source and len(devices) > 1:
        report.notes.append("device names follow nvidia-smi's order (CUDA0 = its first GPU); CUDA numbers devices "
                            f"fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID: llama-server {LIST_DEVICES_FLAG} "
                            "(--devices-output) names them as llama.cpp does")
    if not report.fits and "tensor_split" in report.placement.chosen:
        report.notes.append("the split is llama.cpp's default; its own fit (on by default) may move layers itself "
                            "where it projects a device over, to another device or to the CPU (slower): set "
                            "tensor_split to decide where they go")
    report.notes.append("per device: the compute buffer is the one-device estimate on each device that holds layers, "
                        "and the logits (output buffers) and the input embedding stay in host memory")


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
    if report.devices:
        lines += ["", *render_devices(report)]
    lines += [f"note: {n}" for n in report.notes]
    if report.devices:
        if report.fits:
            least = min((r for r in report.devices if r.items), key=lambda r: r.spare, default=report.devices[0])
            lines.append(f"result: fits on every device, {least.spare / MIB:,.0f} MiB to spare beyond the margin on "
                         f"{least.device.name} (the least)")
        else:
            lines.append(f"result: DOES NOT FIT: {report.refusal}. Move layers off it ({knob('tensor_split').short()},"
                         f" llama_server_tensor_split), put the draft on another device "
                         f"({knob('draft_device').short()}, llama_server_draft_device), lower {_C} or quantize the "
                         "KV cache")
    elif report.fits:
        spare = m.available - report.needed - report.margin
        lines.append(f"result: fits, {spare / MIB:,.0f} MiB to spare beyond the margin")
    else:
        short = report.needed + report.margin - m.available
        lines.append(f"result: DOES NOT FIT: short by {short / MIB:,.0f} MiB (needed + margin > available). "
                     f"Lower {_C} or {_NP}, quantize the KV cache (q8_0), pick smaller models, "
                     "or use a host with more memory")
    return "\n".join(lines)


def render_devices(report: FitReport) -> list[str]:
    """The per-device table: what each device would hold (MiB) against its own free memory, and the placement."""
    place = report.placement
    chosen = place.chosen
    how = [f"split mode {place.split_mode}"]
    if len(place.devices) > 1:
        how.append(f"{knob('tensor_split').short()} {place.split_text}"
                   + (f": {chosen['tensor_split']}" if "tensor_split" in chosen else ""))
    if report.draft:
        how.append(f"draft on {','.join(place.draft_devices) or 'the CPU'}"
                   + (f": {chosen['draft_device']}" if "draft_device" in chosen else ""))
    cols = ["target layers", "target output layer", "target KV cache", "target compute", "draft weights",
            "draft KV cache", "draft compute", "runtime overhead"]
    heads = ["weights", "output", "KV", "compute", "draft", "draft KV", "draft cmp", "runtime"]
    other = {r.device.name: sum(i.bytes for i in r.items if i.component not in cols) for r in report.devices}
    if any(other.values()):  # recurrent states, the MTP context, EAGLE-3's logits: the details in the JSON
        heads.append("other")
    width = max(8, *(len(r.device.name) for r in report.devices))
    lines = [f"per device ({'; '.join(how)}):",
             f"  {'device':{width}} {'free':>9} {'layers':>6} " + " ".join(f"{h:>9}" for h in heads)
             + f" {'needed':>9} {'margin':>8} {'spare':>9}"]
    for r in report.devices:
        mine = place.devices.index(r.device.name) if r.device.name in place.devices else None
        held = sum(1 for dev in place.layers[:-1] if mine is not None and dev == mine)
        values = [r.get(c) for c in cols] + ([other[r.device.name]] if len(heads) > len(cols) else [])
        lines.append(f"  {r.device.name:{width}} {r.device.free / MIB:>9,.0f} {held:>6} "
                     + " ".join(f"{v / MIB:>9,.0f}" for v in values)
                     + f" {r.needed / MIB:>9,.0f} {r.margin / MIB:>8,.0f} {r.spare / MIB:>9,.0f}"
                     + ("" if r.fits else "  OVER"))
    if chosen.get("draft_device") or chosen.get("tensor_split"):
        lines.append(f"  placement the fit assumed, to pin it: {' '.join(place.args(report.draft))}")
    return lines


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
