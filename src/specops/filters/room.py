"""Filters for the first play's room checks (specops.room): disk on the host, context against training, the
target's MTP head and an EAGLE-3 draft's fit. A model's GGUF header that cannot be read fails the task in one line."""

from __future__ import annotations

from typing import Any

from specops import room
from specops.filters import refused, refusing


def disk_problems(facts: Any, host: str, margin_mib: Any) -> list[str]:
    return room.disk_problems(host, facts, int(margin_mib))


def context_problems(models: Any, ctx_size: Any, parallel: Any) -> list[str]:
    """``models``: {"target": controller path, "draft": controller path or ""}."""
    with refused(room.HeaderError):
        return room.context_check(dict(models), int(ctx_size or 0), int(parallel or 1))


FILTERS = {
    "specops_disk_problems": disk_problems,
    "specops_build_estimate": room.build_estimate,
    "specops_context_problems": context_problems,
    "specops_mtp_problems": refusing(room.mtp_check, room.HeaderError),
    "specops_eagle3_problems": refusing(room.eagle3_check, room.HeaderError),
}
