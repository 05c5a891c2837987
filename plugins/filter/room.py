"""Filters for the first play's room checks (specops.room): disk on the host, context against training."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.errors import AnsibleFilterError

from specops import room


def specops_disk_problems(facts: Any, host: str, margin_mib: Any) -> list[str]:
    return room.disk_problems(host, facts, int(margin_mib))


def specops_build_estimate(backend: Any) -> int:
    """Bytes a build of this backend adds on a host (an upper estimate)."""
    return room.BUILD_ESTIMATE_MIB.get(str(backend or "cpu"), max(room.BUILD_ESTIMATE_MIB.values())) * room.MIB


def specops_context_problems(models: Any, ctx_size: Any, parallel: Any) -> list[str]:
    """``models``: {"target": controller path, "draft": controller path or ""}."""
    try:
        trained = [room.trained(role, path) for role, path in dict(models).items() if path]
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"cannot read a model's GGUF header for the context check: {exc}") from exc
    return room.context_problems(int(ctx_size or 0), int(parallel or 1), trained)


def specops_mtp_problems(target: Any, spec_type: Any) -> list[str]:
    """``target``: the target's controller path ("" = not read: a file installed some other way)."""
    if not target:
        return []
    try:
        return room.mtp_problems(str(spec_type or ""), str(target))
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"cannot read the target's GGUF header for the draft-mtp check: {exc}") from exc


def specops_eagle3_problems(target: Any, spec_type: Any, draft: Any) -> list[str]:
    """``target``, ``draft``: controller paths ("" = not read: a file installed some other way, or no draft)."""
    if not target or not draft:
        return []
    try:
        return room.eagle3_problems(str(spec_type or ""), str(target), str(draft))
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"cannot read a model's GGUF header for the draft-eagle3 check: {exc}") from exc


class FilterModule:
    def filters(self) -> dict:
        return {"specops_disk_problems": specops_disk_problems, "specops_build_estimate": specops_build_estimate,
                "specops_context_problems": specops_context_problems, "specops_mtp_problems": specops_mtp_problems,
                "specops_eagle3_problems": specops_eagle3_problems}
