"""Will an EXL2/EXL3 target + draft fit on these GPUs under TabbyAPI? Placed layer by layer, GPU by GPU.

Sizes (bytes), from each model directory's ``config.json`` (Llama-family layout, MoE experts counted):

    layer weights = params per layer (q, k, v, o, gate/up/down × experts, router) × bpw / 8
    head          = vocab × hidden × head_bits / 8           (EXL2 keeps the embedding table in system RAM)
    KV per layer  = cache tokens × kv heads × head_dim × (bytes(K) + bytes(V))

bpw and head_bits come from ``quantization_config`` (``quant_method`` exl2/exl3) or ``--bpw``. Cache bytes
per element follow ExLlamaV2's cache classes (exllamav2/cache.py at da07fac): FP16 2 + 2; Q8 1 + 1; Q6 1 + ½;
Q4 ½ + ½; every quantised mode adds an FP16 scale per 32 elements (1/16 byte each for K and V) and one FP16
K/V layer of scratch per GPU it lives on. An ExLlamaV3 ``k,v`` pair (e.g. ``4,6``) is counted as k/8 + 1/16
and v/8 + 1/16 bytes (an estimate). Cache tokens: ``cache_size``, else ``max_seq_len``, rounded up to 256; the
draft gets the same (TabbyAPI gives it the target's ``max_seq_len``).

Per GPU in use: a CUDA context and allocator slack of :data:`CUDA_CONTEXT` and the forward pass's scratch
(hidden state, mask and MLP intermediate for one ``chunk_size`` of prompt; an estimate). TabbyAPI (79126f9)
loads the draft first with the autosplit loader, then the target: with ``gpu_split`` [GiB per GPU], each GPU's
share holds weights and scratch, layers in order (ExLlamaV2 ``set_device_map``), the cache goes on top on the
same GPUs; without it, autosplit fills GPU 0, then GPU 1, ... leaving ``autosplit_reserve`` MiB (default 96 on
GPU 0) free -- here, the larger of that and the margin (default 10 % of the GPU, at least 512 MiB), so that a
layout this estimate accepts keeps its margin on every GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.fit import DEFAULT_MARGIN, MIB, FitError, parse_margin

GIB = 1024 * MIB
CUDA_CONTEXT = 512 * MIB
DEFAULT_HEAD_BITS = 6
CACHE_MODES = ("FP16", "Q8", "Q6", "Q4")
_PAIR = re.compile(r"^([2-8])\s*,\s*([2-8])$")
_SCALE = 1 / 16  # an FP16 scale per 32 elements
_BYTES = {"FP16": (2.0, 2.0), "Q8": (1 + _SCALE, 1 + _SCALE), "Q6": (1 + _SCALE, 0.5 + _SCALE),
          "Q4": (0.5 + _SCALE, 0.5 + _SCALE)}


def cache_bytes(mode: str, backend: str = "exllamav2") -> tuple[float, float]:
    """Bytes per K and per V element for a TabbyAPI ``cache_mode``."""
    text = str(mode).strip()
    if text.upper() in _BYTES:
        return _BYTES[text.upper()]
    m = _PAIR.match(text)
    if m and backend == "exllamav3":
        return int(m.group(1)) / 8 + _SCALE, int(m.group(2)) / 8 + _SCALE
    if m:
        raise FitError(f"cache mode {mode!r} is an ExLlamaV3 k,v pair; the exllamav2 backend would silently fall "
                       f"back to FP16: use one of {', '.join(CACHE_MODES)}")
    raise FitError(f"unknown cache mode {mode!r}: TabbyAPI knows {', '.join(CACHE_MODES)} "
                   "(and k,v bit pairs 2-8 such as 4,6 on exllamav3)")


def parse_size(text: str | float) -> int:
    """``32GiB``, ``24GB``, ``24576MiB`` or a bare number of GiB → bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB|G|M)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise FitError(f"bad GPU size {text!r}: use e.g. 32GiB, 24GB or 24576MiB")
    value, unit = float(m.group(1)), (m.group(2) or "GiB").lower()
    return int(value * {"gib": GIB, "g": GIB, "gb": 10**9, "mib": MIB, "m": MIB, "mb": 10**6}[unit])


@dataclass
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int
    tied: bool
    context: int | None
    bpw: float | None
    head_bits: float
    quant_method: str | None

    @classmethod
    def of(cls, config: dict[str, Any], name: str) -> Shape:
        cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        try:
            hidden, layers, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), \
                int(cfg["num_attention_heads"])
            intermediate, vocab = int(cfg["intermediate_size"]), int(cfg["vocab_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FitError(f"{name}: config.json lacks {exc} (hidden_size, num_hidden_layers, num_attention_heads, "
                           "intermediate_size, vocab_size): not a decoder model this estimate understands") from None
        q = config.get("quantization_config") or {}
        method = str(q.get("quant_method", "")).lower() or None
        return cls(
            name=name, hidden=hidden, layers=layers, heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads), intermediate=intermediate, vocab=vocab,
            experts=int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1),
            tied=bool(cfg.get("tie_word_embeddings", False)), context=cfg.get("max_position_embeddings"),
            bpw=float(q["bits"]) if method in ("exl2", "exl3") and q.get("bits") else None,
            head_bits=float(q.get("head_bits") or DEFAULT_HEAD_BITS), quant_method=method,
        )

    @classmethod
    def of_dir(cls, path: str | Path) -> Shape:
        p = Path(path)
        cfg = p / "config.json"
        if not cfg.is_file():
            raise FitError(f"{p} has no config.json: not a Hugging Face model directory (EXL2/EXL3)")
        try:
            return cls.of(json.loads(cfg.read_text(encoding="utf-8")), p.name)
        except json.JSONDecodeError as exc:
            raise FitError(f"{cfg}: not JSON ({exc})") from None

    @property
    def layer_params(self) -> int:
        attn = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        mlp = 3 * self.hidden * self.intermediate * self.experts + (self.hidden * self.experts if self.experts > 1
                                                                     else 0)
        return attn + mlp + 2 * self.hidden

    @property
    def n_params(self) -> int:
        return self.layers * self.layer_params + self.vocab * self.hidden * (1 if self.tied else 2)

    def kv_layer(self, tokens: int, mode: str, backend: str) -> int:
        bk, bv = cache_bytes(mode, backend)
        return int(tokens * self.kv_heads * self.head_dim * (bk + bv))

    def kv_temp(self, tokens: int, mode: str) -> int:
        return 0 if str(mode).upper() == "FP16" else tokens * self.kv_heads * self.head_dim * 2 * 2

    def scratch(self, chunk: int, max_seq_len: int) -> int:
        return 2 * chunk * self.hidden + 2 * chunk * chunk + 4 * self.head_dim * max_seq_len \
            + 4 * chunk * self.intermediate


@dataclass
class TabbyFitParams:
    max_seq_len: int = 4096
    cache_size: int | None = None
    cache_mode: str = "FP16"
    draft_cache_mode: str = "FP16"
    bpw: float | None = None
    draft_bpw: float | None = None
    gpu_split: list[float] = field(default_factory=list)      # GiB per GPU for the target; [] = autosplit
    draft_gpu_split: list[float] = field(default_factory=list)
    autosplit_reserve_mib: list[float] = field(default_factory=lambda: [96.0])
    chunk_size: int = 2048
    backend: str = "exllamav2"
    margin: str = DEFAULT_MARGIN


@dataclass
class Gpu:
    index: int
    total: int
    items: list[tuple[str, int]] = field(default_factory=list)

    @property
    def used(self) -> int:
        return sum(b for _n, b in self.items)

    def add(self, name: str, size: int) -> None:
        for i, (n, b) in enumerate(self.items):
            if n == name:
                self.items[i] = (n, b + size)
                return
        self.items.append((name, size))


@dataclass
class TabbyFitReport:
    gpus: list[Gpu]
    margins: list[int]
    placement: dict[str, str]
    params: TabbyFitParams
    cache_tokens: int
    notes: list[str]
    target: Shape
    draft: Shape | None

    @property
    def fits(self) -> bool:
        return all(g.used + m <= g.total for g, m in zip(self.gpus, self.margins, strict=True))

    def as_dict(self) -> dict[str, Any]:
        mib = lambda b: round(b / MIB, 1)  # noqa: E731
        return {"fits": self.fits, "cache_tokens": self.cache_tokens, "placement": self.placement,
                "gpus": [{"index": g.index, "total_mib": mib(g.total), "used_mib": mib(g.used),
                          "margin_mib": mib(m), "free_mib": mib(g.total - g.used),
                          "items": [{"component": n, "mib": mib(b)} for n, b in g.items]}
                         for g, m in zip(self.gpus, self.margins, strict=True)],
                "notes": self.notes}


def _bpw(shape: Shape, given: float | None, role: str) -> float:
    bpw = given if given is not None else shape.bpw
    if bpw is None:
        raise FitError(f"{role} {shape.name}: config.json has no EXL2/EXL3 quantization_config; pass "
                       f"--{'draft-' if role == 'draft' else ''}bpw")
    if not 1.0 <= bpw <= 16.0:
        raise FitError(f"{role} bits per weight {bpw} is outside 1..16")
    return bpw


def _place(label: str, shape: Shape, bpw: float, tokens: int, mode: str, p: TabbyFitParams, gpus: list[Gpu],
           split: list[float], reserve: list[int]) -> str:
    """Put ``shape``'s layers and head on ``gpus``; return where they went ("GPU 0: layers 0-79 ...")."""
    layer_w = int(shape.layer_params * bpw / 8)
    layer_kv = shape.kv_layer(tokens, mode, p.backend)
    head = int(shape.vocab * shape.hidden * shape.head_bits / 8)
    scratch = shape.scratch(min(p.chunk_size, p.max_seq_len), p.max_seq_len)
    budget = [int(s * GIB) for s in split] if split else None
    spent = [0] * len(gpus)
    where: dict[int, list[int]] = {}
    dev = 0

    def start(g: int) -> None:
        if g not in where:
            where[g] = []
            if not any(n == "CUDA context" for n, _b in gpus[g].items):
                gpus[g].add("CUDA context", CUDA_CONTEXT)
            gpus[g].add(f"{label} scratch", scratch)
            spent[g] += scratch
            gpus[g].add(f"{label} KV temp", shape.kv_temp(tokens, mode))

    def room(g: int, need: int) -> bool:
        if budget is not None:
            return spent[g] + need + (0 if g in where else scratch) <= budget[g]
        keep = max(reserve[g], parse_margin(p.margin, gpus[g].total))  # autosplit leaves the margin free
        return gpus[g].used + need + (0 if g in where else CUDA_CONTEXT + scratch) <= gpus[g].total - keep

    for layer in range(shape.layers + 1):
        is_head = layer == shape.layers
        need = head if is_head else layer_w + (0 if budget is not None else layer_kv)
        while not room(dev, need):
            dev += 1
            if dev >= len(gpus):
                done = f"{layer} of {shape.layers} layers"
                if budget is not None:
                    raise FitError(f"{label} gpu_split {split} GiB holds only {done} (weights "
                                   f"{(shape.layers * layer_w + head) / GIB:.1f} GiB + scratch): raise the split, "
                                   "or leave it empty for autosplit")
                raise _Full(label, done)
        start(dev)
        spent[dev] += need
        if is_head:
            gpus[dev].add(f"{label} head", head)
        else:
            gpus[dev].add(f"{label} weights", layer_w)
            gpus[dev].add(f"{label} KV cache", layer_kv)
            where[dev].append(layer)
    return "; ".join(f"GPU {g}: layers {ls[0]}-{ls[-1]}" if ls else f"GPU {g}: head"
                     for g, ls in where.items()) + f", head on GPU {dev}"


class _Full(Exception):
    def __init__(self, label: str, done: str) -> None:
        super().__init__(f"{label}: the GPUs are full after {done}")
        self.label, self.done = label, done


def estimate(target: Shape, draft: Shape | None, gpu_sizes: list[int], p: TabbyFitParams) -> TabbyFitReport:
    if not gpu_sizes:
        raise FitError("no GPU given: pass --gpu SIZE once per GPU, e.g. --gpu 32GiB --gpu 24GiB")
    if p.max_seq_len < 256:
        raise FitError(f"max_seq_len {p.max_seq_len} is below 256")
    for name, split in (("gpu_split", p.gpu_split), ("draft_gpu_split", p.draft_gpu_split)):
        if len(split) > len(gpu_sizes):
            raise FitError(f"{name} {split} names {len(split)} GPUs but only {len(gpu_sizes)} are given")
        for i, share in enumerate(split):
            if share < 0 or share * GIB > gpu_sizes[i]:
                raise FitError(f"{name} {split}: {share} GiB for GPU {i}, which has {gpu_sizes[i] / GIB:.1f} GiB")
    cache_bytes(p.cache_mode, p.backend)
    if draft is not None:
        cache_bytes(p.draft_cache_mode, "exllamav2")  # TabbyAPI's draft_cache_mode takes FP16/Q8/Q6/Q4 only
    tokens = -(-(p.cache_size or p.max_seq_len) // 256) * 256
    gpus = [Gpu(i, size) for i, size in enumerate(gpu_sizes)]
    reserve = [int(r * MIB) for r in p.autosplit_reserve_mib] + [0] * len(gpus)
    notes: list[str] = []
    placement: dict[str, str] = {}
    tbpw = _bpw(target, p.bpw, "target")
    try:
        if draft is not None:
            dbpw = _bpw(draft, p.draft_bpw, "draft")
            placement["draft"] = _place("draft", draft, dbpw, tokens, p.draft_cache_mode, p, gpus,
                                        p.draft_gpu_split, reserve)
        placement["target"] = _place("target", target, tbpw, tokens, p.cache_mode, p, gpus, p.gpu_split, reserve)
    except _Full as full:
        placement[full.label] = f"DOES NOT FIT: {full.done} placed"
        notes.append(f"{full.label} does not fit: the GPUs are full after {full.done}")
        gpus[-1].add("(unplaced)", gpus[-1].total + 1)
    if draft is not None and draft.context and p.max_seq_len > draft.context:
        notes.append(f"the draft was trained on {draft.context:,} tokens; TabbyAPI gives it max_seq_len "
                     f"{p.max_seq_len:,} with rope alpha auto: long prompts draft poorly")
    if target.context and p.max_seq_len > target.context:
        notes.append(f"max_seq_len {p.max_seq_len:,} exceeds the target's max_position_embeddings {target.context:,}")
    notes.append("the embedding tables stay in system RAM (ExLlamaV2): "
                 f"{(target.vocab * target.hidden * 2 + (draft.vocab * draft.hidden * 2 if draft else 0)) / GIB:.2f}"
                 " GiB of host memory, not counted here")
    margins = [parse_margin(p.margin, g.used) if g.items else 0 for g in gpus]
    return TabbyFitReport(gpus, margins, placement, p, tokens, notes, target, draft)


def render(report: TabbyFitReport) -> str:
    p, t, d = report.params, report.target, report.draft
    lines = [f"TabbyAPI memory estimate ({p.backend}): max_seq_len {p.max_seq_len:,} (cache {report.cache_tokens:,} "
             f"tokens), cache {p.cache_mode}" + (f", draft cache {p.draft_cache_mode}" if d else "")
             + f", split {p.gpu_split or 'auto'}",
             f"  target {t.name}: {t.n_params / 1e9:.1f} B params at {p.bpw or t.bpw} bpw, {t.layers} layers, "
             f"{t.kv_heads} kv heads × {t.head_dim}"]
    if d:
        lines.append(f"  draft  {d.name}: {d.n_params / 1e9:.2f} B params at {p.draft_bpw or d.bpw} bpw, "
                     f"{d.layers} layers, {d.kv_heads} kv heads × {d.head_dim}")
    lines += [f"  placement: {role}: {where}" for role, where in report.placement.items()]
    for g, m in zip(report.gpus, report.margins, strict=True):
        lines.append("")
        lines.append(f"  GPU {g.index} ({g.total / GIB:.1f} GiB)      {'MiB':>10}")
        for name, size in g.items:
            if name != "(unplaced)" and size:
                lines.append(f"    {name:20} {size / MIB:>10,.1f}")
        used = sum(b for n, b in g.items if n != "(unplaced)")
        free = (g.total - used) / MIB
        lines.append(f"    {'used':20} {used / MIB:>10,.1f}   margin {m / MIB:,.0f}, free {free:,.0f}")
    lines += [f"note: {n}" for n in report.notes]
    if report.fits:
        spare = sum(g.total - g.used - m for g, m in zip(report.gpus, report.margins, strict=True))
        lines.append(f"result: fits, {spare / MIB:,.0f} MiB to spare beyond the margins")
    else:
        lines.append("result: DOES NOT FIT: lower max_seq_len, quantise the cache (Q8, Q6, Q4), use a lower-bpw "
                     "quant or a smaller draft, or add a GPU")
    return "\n".join(lines)
