"""Summarise llama-server's ``/slots``, checked against a schema of what its builds send.

The payload is a non-empty list of slot objects. Each slot needs ``id`` (an integer ≥ 0) and ``is_processing``
(a boolean); ``speculative`` (a boolean) and ``params`` (an object whose ``speculative.types`` is a string) are
optional, for builds older than the speculative fields, but typed when present. Anything else is not an
answer from llama-server: the whole payload is rejected with :class:`ShapeError`, so a half-valid answer never
feeds the speculation state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SlotsSummary:
    total: int
    busy: int
    speculative: int
    spec_types: str  # from params["speculative.types"], e.g. "draft-simple" ("" when not reported)
    spec_reported: bool = True  # every slot said whether it speculates


class ShapeError(ValueError):
    """The payload is not what any known llama-server version sends."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_slot(i: int, slot: Any) -> None:
    if not isinstance(slot, dict):
        raise ShapeError(f"/slots[{i}]: expected an object, got {type(slot).__name__}")
    if not _is_int(slot.get("id")) or slot["id"] < 0:
        raise ShapeError(f"/slots[{i}]: id must be an integer >= 0, got {str(slot.get('id'))[:20]!r}")
    if not isinstance(slot.get("is_processing"), bool):
        raise ShapeError(f"/slots[{i}]: is_processing must be a boolean")
    if "speculative" in slot and not isinstance(slot["speculative"], bool):
        raise ShapeError(f"/slots[{i}]: speculative must be a boolean")
    params = slot.get("params", {})
    if not isinstance(params, dict):
        raise ShapeError(f"/slots[{i}]: params must be an object")
    if "speculative.types" in params and not isinstance(params["speculative.types"], str):
        raise ShapeError(f"/slots[{i}]: params.speculative.types must be a string")


def _spec_types(params: dict[str, Any]) -> str:
    raw = params.get("speculative.types")
    if raw is None:
        return ""
    kinds = [t.strip() for t in raw.split(",") if t.strip() and t.strip() != "none"]
    return ",".join(kinds)[:64] if kinds else "none"


def summarize_slots(data: Any) -> SlotsSummary:
    if not isinstance(data, list):
        raise ShapeError(f"/slots: expected a list, got {type(data).__name__}")
    if not data:
        raise ShapeError("/slots: an empty list (a server has at least one slot)")
    for i, slot in enumerate(data):
        _check_slot(i, slot)
    types = next((t for t in (_spec_types(s.get("params", {})) for s in data) if t), "")
    return SlotsSummary(
        total=len(data),
        busy=sum(s["is_processing"] for s in data),
        speculative=sum(s.get("speculative") is True for s in data),
        spec_types=types,
        spec_reported=all("speculative" in s for s in data),
    )
