"""On-disk results of a bench run, written as they happen, so a run can resume where it stopped.

Layout of a work directory::

    run.json           the plan: models, build, task set digest, settings, arms, what the ceiling pruned
    ceiling.json       the hardware ceiling measurement (llama-bench)
    servers.jsonl      every server started: arm, repetition, argv, /slots speculation, warm-up, RSS
    blocks.jsonl       every finished block: task, the servers' answers (text, timings, counters), order
    outcome.json       how the run ended (done, budget, interrupted), wall time, per-arm stopping
    rss.json           peak RSS per arm
    logs/<arm>-rep<R>.log   the servers' logs

Resuming with a different plan (other task set, max tokens, models, build, arms) is refused, so results of
different experiments never mix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PLAN_KEYS = (
    "task_set_digest",
    "max_tokens",
    "seed",
    "target",
    "draft",
    "build_commit",
    "threads",
    "ctx_size",
    "arms",
    "reps",
    "design",
    "interleave",
)


class StoreError(RuntimeError):
    pass


def _atomic_write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)


class ResultStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # ---- plan ---------------------------------------------------------------------------
    @property
    def plan_path(self) -> Path:
        return self.root / "run.json"

    def load_plan(self) -> dict[str, Any] | None:
        if not self.plan_path.exists():
            return None
        return json.loads(self.plan_path.read_text())

    def init_plan(self, plan: dict[str, Any], fresh: bool = False) -> bool:
        """Record the plan, or check it against the one already there. True when resuming."""
        old = self.load_plan()
        if fresh and self.root.exists():
            for name in ("blocks.jsonl", "servers.jsonl", "ceiling.json", "outcome.json", "rss.json"):
                (self.root / name).unlink(missing_ok=True)
            old = None
        if old is not None:
            diff = [k for k in PLAN_KEYS if old.get(k) != plan.get(k)]
            if diff:
                raise StoreError(
                    f"{self.root} holds results of a different plan (differs in {', '.join(diff)}); "
                    "use another --work-dir or --fresh to discard them"
                )
            plan = {**plan, "started_at": old.get("started_at", plan.get("started_at"))}
        _atomic_write(self.plan_path, plan)
        return old is not None

    # ---- records ------------------------------------------------------------------------
    def log_path(self, arm: str, rep: int) -> Path:
        return self.root / "logs" / f"{arm}-rep{rep}.log"

    def append(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON line (flushed and synced: a crash loses at most the line being written)."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read(self, name: str) -> Iterator[dict[str, Any]]:
        """The records of a JSON-lines file; a last line cut by a crash is skipped."""
        path = self.root / name
        if not path.exists():
            return
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:
                    return
                raise StoreError(f"{path}:{i + 1}: not JSON; the work directory is damaged") from None

    # ---- other artefacts --------------------------------------------------------------------
    def save_json(self, name: str, data: Any) -> Path:
        path = self.root / name
        _atomic_write(path, data)
        return path

    def load_json(self, name: str) -> Any | None:
        path = self.root / name
        return json.loads(path.read_text()) if path.exists() else None
