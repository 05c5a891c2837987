"""The committed H100 runs (tests/fixtures/gpu-h100-runs/, see its README) as the cost model's and the tuner's
inputs: step costs from llama-bench, a plain run, and per arm the speculative run with its counters."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from specops.bench.costmodel import Run, StepCosts

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-h100-runs"
TARGETS = ("1.5b", "7b", "14b")
NUMERICS = "fa=on,ctv=q8_0"  # what every served arm ran with (-fa on -ctv q8_0)


@dataclass(frozen=True)
class Arm:
    target: str
    name: str
    k: int
    regime: str  # real-pair, synth=1, natural
    run: Run
    measured: float  # geometric mean of the paired per-request speedups, as the report quotes
    ratios: tuple[float, ...]
    per_pos: dict[str, float]


def costs(target: str) -> StepCosts:
    c = json.loads((DATA / f"ceiling-qwen2.5-{target}.json").read_text())
    (draft,) = c["draft"]
    return StepCosts.from_ceiling(c, NUMERICS, draft)


def _serve(target: str) -> dict:
    return json.loads((DATA / f"serve-qwen2.5-{target}.json").read_text())


def plain_run(target: str) -> Run:
    """Every plain request of the target's arms (one plain server, paired with each arm in turn)."""
    rows = [r for a in _serve(target)["arms"].values() for r in a["rows"]]
    return Run(sum(r["n_plain"] for r in rows), sum(r["n_plain"] / r["plain_tps"] for r in rows))


def arms(target: str) -> list[Arm]:
    out = []
    for name, a in _serve(target)["arms"].items():
        m = re.match(r"draft-n(\d+) (synth=real-pair|synth=1|natural)", name)
        if not m:
            continue  # the A/A and self arms
        c = a["counters"]
        rows = a["rows"]
        run = Run(sum(r["n_spec"] for r in rows), sum(r["n_spec"] / r["spec_tps"] for r in rows),
                  float(c["drafts"]), float(c["drafted"]), float(c["accepted"]))
        out.append(Arm(target, name, int(m.group(1)), m.group(2).replace("synth=real-pair", "real-pair"), run,
                       float(a["speedup_geomean"]), tuple(float(r["ratio"]) for r in rows), dict(c["per_pos"])))
    return out


def arm(target: str, k: int, regime: str) -> Arm:
    (found,) = [a for a in arms(target) if a.k == k and a.regime == regime]
    return found
