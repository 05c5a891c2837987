"""On-disk results of a bench run: one JSON file per (arm, repetition), written as they finish.

Layout of a work directory::

    run.json                         the plan: models, build, task set digest, settings, arms
    arms/<arm>/rep<R>.json           a finished arm-repetition (requests, counters, RSS)
    arms/<arm>/rep<R>.partial.json   what an interrupted or failed arm-repetition got done
    logs/<arm>-rep<R>.log            the server's log
    ceiling.json                     the hardware ceiling measurement

A run is resumable: finished arm-repetitions are skipped. Resuming with a different plan (other
task set, max tokens, models, build) is refused, so results of different experiments never mix.
"""

from __future__ import annotations

import json
import os
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

    def init_plan(self, plan: dict[str, Any], fresh: bool = False) -> None:
        """Record the plan, or check it against the one already there (resume)."""
        old = self.load_plan()
        if old is not None and not fresh:
            diff = [k for k in PLAN_KEYS if old.get(k) != plan.get(k)]
            if diff:
                raise StoreError(
                    f"{self.root} holds results of a different plan (differs in {', '.join(diff)}); "
                    "use another --work-dir or --fresh to discard them"
                )
            arms = list(dict.fromkeys([*old.get("arms", []), *plan.get("arms", [])]))
            plan = {**plan, "arms": arms}
        if fresh and self.root.exists():
            for p in [*sorted(self.root.glob("arms/*/*.json")), self.root / "ceiling.json"]:
                p.unlink(missing_ok=True)
        _atomic_write(self.plan_path, plan)

    # ---- arm repetitions --------------------------------------------------------------------
    def path(self, arm: str, rep: int, partial: bool = False) -> Path:
        return self.root / "arms" / arm / (f"rep{rep}.partial.json" if partial else f"rep{rep}.json")

    def log_path(self, arm: str, rep: int) -> Path:
        return self.root / "logs" / f"{arm}-rep{rep}.log"

    def has(self, arm: str, rep: int) -> bool:
        return self.path(arm, rep).exists()

    def save(self, arm: str, rep: int, data: dict[str, Any]) -> Path:
        path = self.path(arm, rep)
        _atomic_write(path, {**data, "status": "complete"})
        self.path(arm, rep, partial=True).unlink(missing_ok=True)
        return path

    def save_partial(self, arm: str, rep: int, data: dict[str, Any]) -> Path:
        path = self.path(arm, rep, partial=True)
        _atomic_write(path, {**data, "status": data.get("status", "partial")})
        return path

    def load_all(self, include_partial: bool = False) -> dict[str, dict[int, dict[str, Any]]]:
        """``{arm: {rep: data}}`` of finished (and optionally partial) arm-repetitions."""
        out: dict[str, dict[int, dict[str, Any]]] = {}
        for path in sorted(self.root.glob("arms/*/rep*.json")):
            partial = path.name.endswith(".partial.json")
            if partial and not include_partial:
                continue
            rep = int(path.name[3:].split(".")[0])
            data = json.loads(path.read_text())
            arm = data.get("arm", path.parent.name)
            if partial and rep in out.get(arm, {}):
                continue
            out.setdefault(arm, {})[rep] = data
        return out

    # ---- other artefacts --------------------------------------------------------------------
    def save_json(self, name: str, data: Any) -> Path:
        path = self.root / name
        _atomic_write(path, data)
        return path

    def load_json(self, name: str) -> Any | None:
        path = self.root / name
        return json.loads(path.read_text()) if path.exists() else None
