"""Filters for roles/llama_server's auto-tune (tasks/tune.yml): what the tune may choose from the role's settings,
what of its result the deploy applies, and the summary the speed gate's record keeps (specops.tune.deploy); the
operator's task files and mix checked (specops.tune.inputs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from specops.tune import deploy, inputs


def specops_tune_scope(mode: str, spec_type: Any, draft_n_max: Any, has_draft: Any, lengths: list[int]) -> dict:
    return deploy.scope(str(mode), spec_type, draft_n_max, bool(has_draft), lengths).to_dict()


def _result(text: Any) -> dict[str, Any]:
    data = json.loads(text) if isinstance(text, str | bytes) else text
    if not isinstance(data, dict):
        raise ValueError("the tune's result is not a JSON object")
    return data


def specops_tune_apply(result: Any, spec_type: Any, draft_n_max: Any) -> dict:
    return deploy.apply(_result(result), spec_type, draft_n_max).to_dict()


def specops_tune_summary(result: Any, applied: dict[str, Any], reused: Any) -> dict:
    a = deploy.Applied(dict(applied.get("vars") or {}), dict(applied.get("kept") or {}), str(applied.get("message")))
    return deploy.summary(_result(result), a, bool(reused))


def specops_tune_input_problems(paths: Any, shares: Any, ctx_size: Any, max_tokens: Any, parallel: Any = 1) -> list:
    return inputs.problems(list(paths or []), dict(shares or {}), int(ctx_size or 0), int(max_tokens),
                           int(parallel or 1))


def specops_tune_mix_arg(shares: Any) -> str:
    return inputs.mix_text(dict(shares or {}))


class FilterModule:
    def filters(self) -> dict:
        return {"specops_tune_scope": specops_tune_scope, "specops_tune_apply": specops_tune_apply,
                "specops_tune_summary": specops_tune_summary,
                "specops_tune_input_problems": specops_tune_input_problems,
                "specops_tune_mix_arg": specops_tune_mix_arg}
