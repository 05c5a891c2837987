"""The per-device fit: where llama.cpp puts the target's layers and the draft (:func:`placement`,
:func:`place_draft`), what each device would hold against its own free memory (:func:`fit_devices`), and the
one-line refusal of the device that overflows (:func:`overflow_line`).

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specops.devices import device_list, placement_problem, split_parts
from specops.fitcost import EAGLE3_ARCH, GPU_OVERHEAD, ROLLBACK_TYPES, Item, kv_item
from specops.fitmemory import Memory
from specops.fitparams import MIB, FitError, FitParams, parse_margin
from specops.fitshape import ModelShape
from specops.knobs import PLACEMENT, knob, spec_type_members

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


# ggml's scheduler keeps GGML_SCHED_MAX_COPIES (4) copies of each split's inputs when llama.cpp turns pipeline
# parallelism on (src/llama-context.cpp at 0c1e57098: more than one device, every layer and the output offloaded,
# split mode layer, the KV offloaded, no tensor overrides, every device async with events)
SCHED_COPIES = 4


def pipeline_parallel(place: Placement, n_layer: int) -> bool:
    """Does llama.cpp turn pipeline parallelism on for the target here: whole layers over more than one device, the
    output layer too (tensor overrides, which the fit does not model, would turn it off)."""
    used = {d for d in place.layers if d != CPU}
    return place.split_mode == "layer" and len(used) > 1 and CPU not in place.layers[:n_layer + 1]


def pipeline_copies_bytes(s: ModelShape, cells: int, n_ubatch: int) -> int:
    """What each device's compute buffer reserves beyond the one-device figure under pipeline parallelism: the
    further copies of its split's inputs, the KQ mask (f16, cells × ubatch) and the hidden state (f32, n_embd ×
    ubatch). Measured at 0c1e57098 on two RPC devices (``-fa on``, ubatch 512), two models and three contexts:
    3 more masks and 5 more hidden states, within 0.1 MiB (Qwen2.5-Coder 1.5B at -c 2048/4096/8192: 81.60, 89.60,
    105.60 MiB a device against 60.53, 62.53, 66.53 on one device; SmolLM2-135M at -c 4096: 32.98 against 15.28)."""
    return (SCHED_COPIES - 1) * 2 * n_ubatch * cells + (SCHED_COPIES + 1) * 4 * n_ubatch * s.n_embd


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
        row.items.append(kv_item("target KV cache", s, cells, params.cache_type_k, params.cache_type_v, kv_layers))
    recurrent = [il for il in held if il < len(s.recurrent) and s.recurrent[il]]
    if recurrent:
        snaps = params.draft_n_max if members & set(ROLLBACK_TYPES) else 0
        rows = max(1, params.parallel) * (1 + snaps)
        row.items.append(Item("target recurrent state", 4 * len(recurrent) * rows * (s.n_embd_r + s.n_embd_s),
                              f"{len(recurrent)} recurrent layers × {rows} rows × f32"))
    mtp = [il for il in s.kv_layers(mtp=True) if place.layers[il] == i] if "draft-mtp" in members else []
    if mtp and s.n_nextn > 0:
        row.items.append(kv_item("MTP KV cache", s, cells, params.cache_type_k, params.cache_type_v, mtp))
    compute = s.compute_bytes(cells, params.ubatch_size, params.flash_attn)
    how = f"ubatch {params.ubatch_size} (estimate, as on one device)"
    if pipeline_parallel(place, s.n_layer):
        copies = pipeline_copies_bytes(s, cells, params.ubatch_size)
        compute += copies
        how += (f" + {copies / MIB:,.1f} MiB: {SCHED_COPIES} copies of each split's inputs under pipeline "
                "parallelism (measured)")
    row.items.append(Item("target compute", compute, how))
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
        row.items.append(kv_item("draft KV cache", s, cells, params.draft_cache_type_k, params.draft_cache_type_v,
                                  kv_layers))
    row.items.append(Item("draft compute", s.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                          f"ubatch {params.ubatch_size} (estimate)"))
    if output and s.arch == EAGLE3_ARCH:
        row.items.append(Item("draft logits (EAGLE-3)", 2 * s.n_vocab * params.ubatch_size * 4,
                              "logits for a whole ubatch in its compute buffer"))


def _runtime(row: DeviceRow) -> None:
    """The runtime's own share on a device this process uses: :data:`GPU_OVERHEAD`; none on an RPC device (its
    ``ggml-rpc-server`` holds its backend's context in its own process and reports the free memory left after it)."""
    if row.device.name.startswith("RPC"):
        return
    row.items.append(Item("runtime overhead", GPU_OVERHEAD, "CUDA context, cuBLAS and pools (per device)"))


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
            _runtime(row)
    if dshape is not None:
        place_draft(params, place, rows, dshape)
        draft_index = {n: i for i, n in enumerate(place.draft_devices)}
        for row in rows:
            if row.device.name in draft_index:
                had = bool(row.items)
                _draft_items(row, draft_index[row.device.name], place, dshape, params, cells)
                if row.items and not had:
                    _runtime(row)
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

