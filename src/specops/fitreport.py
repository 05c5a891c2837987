"""The fit's answer: :class:`FitReport` (the breakdown, the per-device rows, the verdict, its JSON), its text
(:func:`render`, :func:`render_devices`) and how ``specops fit`` prints it or a refusal (either engine)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from specops.fitcost import Item
from specops.fitdevices import overflow_line
from specops.fitmemory import Memory
from specops.fitparams import MIB, FitParams
from specops.knobs import knob

_C, _NP = (knob(n).flag for n in ("ctx_size", "parallel"))


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
