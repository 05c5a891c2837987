"""The operator's own tune inputs, checked on the controller before anything changes (issue 52): the task files
(``llama_server_tune_tasks``: the bench's JSONL format, chat messages + workload) and the traffic's mix
(``llama_server_tune_mix``: each workload's share of the requests).

Each problem is one line naming the variable, the file (and line) and the fix. No line ever quotes a prompt: task
files can hold private requests; a task is named by its id and its length only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specops.bench.tasks import Task, TaskError, load_tasks, workloads_of
from specops.requestlog.sample import CHARS_PER_TOKEN, estimated_tokens
from specops.tune import mix as mixes
from specops.tune.settings import mix_text, setting

TASKS_VAR = setting("tune_tasks").var
MIX_VAR = setting("tune_mix").var
MAX_FILE_BYTES = 4 * 1024 * 1024  # a task file the deploy ships to the host (and the tune reads whole)
# the tune's servers' context when llama_server_ctx_size is 0 (the model's own): specops tune --ctx-size's default
TUNE_CTX = int(setting("ctx_size").cli_default)


def _file_problems(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    names: dict[str, str] = {}
    for raw in paths:
        p = Path(str(raw)).expanduser()
        if not p.is_file():
            out.append(f"{TASKS_VAR}={raw}: not a file on the controller; give the path of a task file (JSONL, "
                       "the bench's format; `specops tasks --from-requests LOG` writes one from a request log)")
            continue
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            out.append(f"{TASKS_VAR}={raw}: {size / 2**20:.1f} MiB, more than the {MAX_FILE_BYTES // 2**20} MiB "
                       "the deploy ships for the tune; sample it down (`specops tasks --from-requests LOG "
                       "--per-workload N`)")
        if p.name in names:
            out.append(f"{TASKS_VAR}={raw}: it and {names[p.name]} have the same file name ({p.name}): the host keeps "
                       "them side by side under that name; rename one")
        names[p.name] = str(raw)
    return out


def _too_long(files: Mapping[str, Sequence[Task]], ctx: int, max_tokens: int) -> list[str]:
    out = []
    for path, tasks in files.items():
        for t in tasks:
            chars = sum(len(c) for _, c in t.messages)
            if estimated_tokens(chars) + max_tokens > ctx:
                out.append(f"{TASKS_VAR}={path}: task {t.id!r} ({t.workload}) has a prompt of {chars} characters, "
                           f"about {estimated_tokens(chars)} tokens (÷ {CHARS_PER_TOKEN}), which with the tune's "
                           f"{max_tokens} tokens of answer exceeds the slot's context of {ctx}: leave it out of the "
                           "file, or raise llama_server_ctx_size")
    return out


def problems(paths: Sequence[str] | None, shares: Mapping[str, Any] | None, ctx_size: int, max_tokens: int,
             parallel: int = 1) -> list[str]:
    """Every problem of the tune's task files and mix, one line each ([] when they can be used). ``ctx_size``:
    llama_server_ctx_size (0: the model's own, the tune then runs at :data:`TUNE_CTX`); the slot's context is
    that over ``parallel`` (llama-server divides its context among its slots)."""
    paths = [str(p) for p in paths or () if str(p).strip()]
    out = _file_problems(paths)
    if out:
        return out
    files: dict[str, list[Task]] = {}
    try:
        for path in paths:
            files[path] = load_tasks([path])
        tasks = [t for ts in files.values() for t in ts] if paths else load_tasks(None)
        if paths:
            load_tasks(paths)  # ids unique across the files
    except TaskError as exc:
        return [f"{TASKS_VAR}={path}: {exc}" if paths else f"the bench's standard task set: {exc}"]
    if shares:
        bad = [k for k, v in shares.items() if isinstance(v, bool) or not isinstance(v, (int, float))
               or not math.isfinite(float(v))]
        if bad:
            return [f"{MIX_VAR}={dict(shares)!r}: the share of {', '.join(map(str, bad))} is not a number; give each "
                    "workload's share of the requests, e.g. {edit: 70, prose: 30}"]
        try:
            mixes.parse(mix_text(shares), workloads_of(tasks))
        except mixes.MixError as exc:
            return [f"{MIX_VAR}={dict(shares)!r}: {re.sub(r'^--mix:? ', '', str(exc))}" + ("" if paths else " (no "
                    f"{TASKS_VAR}: the bench's standard set)")]
    ctx = ctx_size if ctx_size > 0 else TUNE_CTX
    return _too_long(files, max(1, ctx // max(1, parallel)), max_tokens)
