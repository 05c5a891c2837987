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

It fits when needed + margin ≤ available, margin = max(10 % of needed, 512 MiB) by default; available is host RAM
or GPU memory (:mod:`specops.fitmemory` says whose figures), and on more than one GPU, or where the placement
settings name a device, each device is checked against its own free memory (:mod:`specops.fitdevices`).

The pieces, one module each: the inputs (:mod:`specops.fitparams`), the models' shapes and KV arithmetic
(:mod:`specops.fitshape`), the memory there is (:mod:`specops.fitmemory`), the breakdown's lines per kind
(:mod:`specops.fitcost`), the per-device placement and fit (:mod:`specops.fitdevices`) and the report
(:mod:`specops.fitreport`); this module adds them up (:func:`estimate`) and keeps every name importable from here.
"""

from __future__ import annotations

from pathlib import Path

from specops.devices import placement_problem, placement_set
from specops.fitcost import (
    EAGLE3_ARCH,
    GPU_OVERHEAD,
    NGRAM_MOD_POOL,
    OVERHEAD,
    ROLLBACK_TYPES,
    Item,
    kind_items,
    kv_item,
)
from specops.fitdevices import (
    CPU,
    DeviceFree,
    DeviceRow,
    Placement,
    fit_devices,
    gpu_layers,
    layer_devices,
    memory_devices,
    overflow_line,
    place_draft,
    placement,
)
from specops.fitmemory import (
    GPU_BACKENDS,
    NVIDIA_FIELDS,
    Memory,
    devices_memory,
    gpu_memory,
    measure_memory,
    parse_device_mib,
    parse_nvidia_smi,
    parse_rocm_smi,
)
from specops.fitparams import DEFAULT_MARGIN, MIB, FitError, FitParams, deployed, parse_margin, unset
from specops.fitreport import FitReport, print_error, print_report, render, render_devices
from specops.fitshape import (
    HYBRID_ARCHS,
    INPUT_EMBEDDING,
    OUTPUT,
    ModelShape,
    cache_type_bytes,
    kv_cells,
    pad,
    trunk_layers,
)
from specops.ggufmeta import read
from specops.knobs import LIST_DEVICES_FLAG, PLACEMENT, knob, spec_type_members

__all__ = [
    "CPU", "DEFAULT_MARGIN", "EAGLE3_ARCH", "GPU_BACKENDS", "GPU_OVERHEAD", "HYBRID_ARCHS", "INPUT_EMBEDDING",
    "MIB", "NGRAM_MOD_POOL", "NVIDIA_FIELDS", "OUTPUT", "OVERHEAD", "ROLLBACK_TYPES", "DeviceFree", "DeviceRow",
    "FitError", "FitParams", "FitReport", "Item", "Memory", "ModelShape", "Placement", "cache_type_bytes",
    "deployed", "devices_memory", "estimate", "fit_devices", "gpu_layers", "gpu_memory", "kv_cells",
    "layer_devices", "measure_memory", "memory_devices", "overflow_line", "pad", "parse_device_mib", "parse_margin",
    "parse_nvidia_smi", "parse_rocm_smi", "place_draft", "placement", "print_error", "print_report", "render",
    "render_devices", "trunk_layers", "unset"
]

_C, _NP, _UB, _CRAM = (knob(n).flag for n in ("ctx_size", "parallel", "ubatch_size", "cache_ram_mib"))


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
        items.append(kv_item(f"{role} KV cache", s, cells, tk, tv, s.kv_layers()))
        if s.sliding_window:
            notes.append(f"{role} has sliding-window layers (window {s.sliding_window}); its KV is "
                         "counted at full size, an upper bound")
    items += kind_items(tshape, dshape, params, cells, gpu)
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
