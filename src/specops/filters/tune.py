"""Filters for roles/llama_server_tune (tasks/main.yml): what the tune may choose from the role's settings,
what of its result the deploy applies, and the summary the speed gate's record keeps (specops.tune.deploy); the
operator's task files and mix checked (specops.tune.inputs); the tune's command line for the role's settings
(specops.tune.settings)."""

from __future__ import annotations

from typing import Any

from specops.filters import json_object, refused
from specops.tune import deploy, inputs, settings


def tune_scope(mode: str, spec_type: Any, draft_n_max: Any, has_draft: Any, lengths: list[int]) -> dict[str, Any]:
    return deploy.scope(str(mode), spec_type, draft_n_max, bool(has_draft), lengths).to_dict()


def tune_apply(result: Any, spec_type: Any, draft_n_max: Any) -> dict[str, Any]:
    """``result``: the tune's result, as JSON text or parsed."""
    return deploy.apply(json_object(result, "the tune's result"), spec_type, draft_n_max).to_dict()


def tune_summary(result: Any, applied: dict[str, Any], reused: Any) -> dict[str, Any]:
    """``applied``: what :func:`tune_apply` returned."""
    return deploy.summary(json_object(result, "the tune's result"),
                          deploy.Applied(dict(applied.get("vars") or {}), dict(applied.get("kept") or {}),
                                         str(applied.get("message"))), bool(reused))


def tune_disputed(gate: Any, summary: Any) -> str:
    """``gate``: the speed gate's verdict (specops_speed_gate); ``summary``: specops_tune_summary's, or none."""
    return deploy.disputed(dict(gate or {}), dict(summary) if summary else None)


def tune_input_problems(paths: Any, shares: Any, ctx_size: Any, max_tokens: Any, parallel: Any = 1) -> list[str]:
    return inputs.problems(list(paths or []), dict(shares or {}), int(ctx_size or 0), int(max_tokens),
                           int(parallel or 1))


def tune_setting_vars(_: Any = None) -> list[str]:
    """The role variables :func:`tune_setting_args` takes, in its order (``query('ansible.builtin.vars', ...)``)."""
    return settings.argv_vars()


def tune_setting_args(values: list[Any], tasks_dir: Any) -> list[str]:
    """``specops tune``'s words for the values of :func:`tune_setting_vars`; ``tasks_dir``: the host's copy of the
    task files."""
    with refused(ValueError, prefix="specops_tune_setting_args: "):
        return settings.argv(list(values), str(tasks_dir))


def tune_task_source(paths: Any) -> str:
    """The team's task files as the tune's record names them (each file's name and sha256 prefix): the speed gate's
    ``traffic``, so that the gate's record and the tune's name a file alike."""
    from pathlib import Path

    from specops.tune.record import task_source  # its bench imports: only when asked
    return task_source([Path(str(p)) for p in paths or []])


FILTERS = {
    "specops_tune_scope": tune_scope,
    "specops_tune_apply": tune_apply,
    "specops_tune_summary": tune_summary,
    "specops_tune_disputed": tune_disputed,
    "specops_tune_input_problems": tune_input_problems,
    "specops_tune_setting_vars": tune_setting_vars,
    "specops_tune_setting_args": tune_setting_args,
    "specops_tune_task_source": tune_task_source,
}
