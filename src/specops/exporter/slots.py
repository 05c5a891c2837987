"""Summarise llama-server's ``/slots`` (a list of slot objects) without trusting its shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SlotsSummary:
    total: int
    busy: int
    speculative: int
    spec_types: str  # from params["speculative.types"], e.g. "draft-simple" ("" when unknown)
    malformed: int  # entries that were not objects


class ShapeError(ValueError):
    """The payload is not what any known llama-server version sends."""


def _spec_types(params: Any) -> str:
    if not isinstance(params, dict):
        return ""
    raw = params.get("speculative.types")
    if not isinstance(raw, str):
        return ""
    kinds = [t.strip() for t in raw.split(",") if t.strip() and t.strip() != "none"]
    return ",".join(kinds) if kinds else "none"


def summarize_slots(data: Any) -> SlotsSummary:
    if not isinstance(data, list):
        raise ShapeError(f"/slots: expected a list, got {type(data).__name__}")
    busy = spec = malformed = 0
    types = ""
    for slot in data:
        if not isinstance(slot, dict):
            malformed += 1
            continue
        if slot.get("is_processing") is True:
            busy += 1
        if slot.get("speculative") is True:
            spec += 1
        types = types or _spec_types(slot.get("params"))
    return SlotsSummary(total=len(data) - malformed, busy=busy, speculative=spec, spec_types=types,
                        malformed=malformed)
