"""The bench task set: JSONL files of chat requests grouped into workloads.

One task per line::

    {"id": "code-07", "workload": "code", "messages": [{"role": "user", "content": "..."}], "tags": ["edit"]}

``workload`` defaults to the file's stem. The standard set ships in ``specops/data/tasks``
(tool calls / structured JSON, code including copy-heavy edits, prose); users add their own files
with ``--tasks``. The set's identity (name + sha256 of the canonical content) is recorded in every
result so numbers from different task sets are never mixed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

STANDARD_SET = "specops-standard-v2"
ROLES = ("system", "user", "assistant")


class TaskError(ValueError):
    """A task file that cannot be used: names the file, the line and what is wrong."""


@dataclass(frozen=True)
class Task:
    id: str
    workload: str
    messages: tuple[tuple[str, str], ...]
    tags: tuple[str, ...] = field(default=())

    def chat_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workload": self.workload,
            "messages": self.chat_messages(),
            "tags": list(self.tags),
        }


def _parse_line(raw: dict[str, Any], where: str, default_workload: str) -> Task:
    if not isinstance(raw, dict):
        raise TaskError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    unknown = set(raw) - {"id", "workload", "messages", "tags"}
    if unknown:
        raise TaskError(f"{where}: unknown key(s) {sorted(unknown)}")
    task_id = raw.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        raise TaskError(f"{where}: 'id' must be a non-empty string")
    workload = raw.get("workload", default_workload)
    if not isinstance(workload, str) or not workload.strip():
        raise TaskError(f"{where}: 'workload' must be a non-empty string")
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TaskError(f"{where}: 'messages' must be a non-empty list of {{role, content}}")
    parsed: list[tuple[str, str]] = []
    for i, m in enumerate(messages, 1):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            # never the content itself: a task file can hold private prompts
            got = (f"role {str(m.get('role'))[:20]!r}, content of type {type(m.get('content')).__name__}"
                   if isinstance(m, dict) else f"a JSON {type(m).__name__}")
            raise TaskError(f"{where}: message {i} needs role in {ROLES} and string content (got {got})")
        parsed.append((m["role"], m["content"]))
    if parsed[-1][0] != "user":
        raise TaskError(f"{where}: the last message must be from the user")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskError(f"{where}: 'tags' must be a list of strings")
    return Task(task_id.strip(), workload.strip(), tuple(parsed), tuple(tags))


def load_file(path: str | Path) -> list[Task]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskError(f"cannot read task file {path}: {exc.strerror or exc}") from exc
    tasks: list[Task] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}:{n}: invalid JSON ({exc.msg})") from exc
        tasks.append(_parse_line(raw, f"{path}:{n}", path.stem))
    if not tasks:
        raise TaskError(f"task file {path} has no tasks (empty or only blank/comment lines)")
    return tasks


def standard_files() -> list[Path]:
    base = resources.files("specops") / "data" / "tasks"
    return sorted(Path(str(p)) for p in base.iterdir() if p.name.endswith(".jsonl"))


def load_tasks(
    paths: list[str | Path] | None = None,
    workloads: list[str] | None = None,
    limit_per_workload: int | None = None,
    sample_every: int | None = None,
) -> list[Task]:
    """Load task files (the standard set when ``paths`` is empty), checked for duplicate ids.

    ``workloads`` keeps only those workloads; ``limit_per_workload`` keeps the first N of each
    (for smoke runs: a limited run is recorded as such in the results); ``sample_every`` K keeps tasks
    1, 1+K, 1+2K, ... of each workload, a systematic sample that keeps each file's mix (e.g. generate vs edit).
    """
    files = [Path(p) for p in paths] if paths else standard_files()
    if not files:
        raise TaskError("no task files given and the standard task set is missing")
    tasks: list[Task] = []
    seen: dict[str, Path] = {}
    for f in files:
        for t in load_file(f):
            if t.id in seen:
                raise TaskError(f"duplicate task id {t.id!r} in {f} (first in {seen[t.id]})")
            seen[t.id] = f
            tasks.append(t)
    if workloads:
        known = sorted({t.workload for t in tasks})
        missing = [w for w in workloads if w not in known]
        if missing:
            raise TaskError(f"workload(s) {missing} not in the task set; known: {known}")
        tasks = [t for t in tasks if t.workload in workloads]
    if sample_every is not None:
        if sample_every < 1:
            raise TaskError("sample every K tasks needs K >= 1")
        tasks = _keep_by_position(tasks, lambda i: i % sample_every == 0)
    if limit_per_workload is not None:
        if limit_per_workload < 1:
            raise TaskError("limit per workload must be >= 1")
        tasks = _keep_by_position(tasks, lambda i: i < limit_per_workload)
    return tasks


def _keep_by_position(tasks: list[Task], keep: Callable[[int], bool]) -> list[Task]:
    """The tasks whose 0-based position within their own workload satisfies ``keep``."""
    seen: dict[str, int] = {}
    kept = []
    for t in tasks:
        i = seen.get(t.workload, 0)
        seen[t.workload] = i + 1
        if keep(i):
            kept.append(t)
    return kept


def task_set_digest(tasks: list[Task]) -> str:
    canonical = json.dumps([t.to_dict() for t in tasks], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def workloads_of(tasks: list[Task]) -> list[str]:
    out: list[str] = []
    for t in tasks:
        if t.workload not in out:
            out.append(t.workload)
    return out
