"""What the exporter reads from ``/props`` (once per server start): build and target model."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from specops.exporter.slots import ShapeError

_BUILD_RE = re.compile(r"^b(?P<number>\d+)-(?P<commit>[0-9a-f]{6,40})$")


@dataclass(frozen=True)
class Props:
    build_info: str = ""
    build_number: str = ""
    build_commit: str = ""
    model: str = ""
    total_slots: int | None = None


def _short(value: Any, limit: int = 200) -> str:
    return str(value)[:limit] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def parse_props(data: Any) -> Props:
    if not isinstance(data, dict):
        raise ShapeError(f"/props: expected an object, got {type(data).__name__}")
    build = _short(data.get("build_info"))
    match = _BUILD_RE.match(build)
    model = _short(data.get("model_path"), 1000) or _short(data.get("model_alias"), 1000)
    slots = data.get("total_slots")
    return Props(
        build_info=build,
        build_number=match.group("number") if match else "",
        build_commit=match.group("commit") if match else "",
        model=PurePath(model).name if model else "",
        total_slots=slots if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 0 else None,
    )
