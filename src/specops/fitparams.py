"""The fit's inputs: the settings the estimate depends on (:class:`FitParams`, from the knob table), the safety
margin (:func:`parse_margin`), and :class:`FitError`, the one-line refusal of bad input or unmeasurable memory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from specops.knobs import knob

MIB = 1024 * 1024
DEFAULT_MARGIN = "10%,512MiB"


class FitError(ValueError):
    """Bad input or memory that cannot be measured; the message says what to do."""


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
