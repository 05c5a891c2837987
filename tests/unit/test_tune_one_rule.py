"""One rule on every recorded tune (issue 62 items 2-3): whatever the candidates measured together, what is served is
deployable (confidently faster than the unit's plain decoding, at the run's error budget's level since issue 79, and
not confidently under 1 + 5%), no cheaper member of
its tie is, and plain decoding is served only where no member of the best's tie is deployable. Replayed on the
committed GPU runs' blocks (tests/fixtures/gpu-tune-blocks: every subset of their draft lengths) and the CPU tunes'
(tests/fixtures/cpu-tune-blocks), as the tune decides on them; the hand-made counterexamples are
test_tune_decide.py's."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import pytest

from specops import kinds
from specops.bench.design import deployable
from specops.bench.stats import Interval
from specops.tune import choose, decide
from specops.tune.evidence import Blocks

pytestmark = pytest.mark.fast

ROOT = Path(__file__).parents[1] / "fixtures"
MARGIN = 0.05
GPU_RUNS = sorted((ROOT / "gpu-tune-blocks").glob("*.jsonl"))
CPU_RUNS = sorted((ROOT / "cpu-tune-blocks").glob("*.jsonl"))
UNIT_PLAIN = "exact-baseline"  # the GPU runs' unit plain decoding (test_tune_evidence.py)


def holds_the_rule(choice: decide.Choice, figures: dict[str, Interval]) -> None:
    """The served candidate is deployable (at the level the choice read, the run's error budget) and the cheapest
    deployable member of its tie; plain decoding only where no tie member is deployable."""
    tie = [n for n in choice.tie if n != kinds.PLAIN]
    assert tie == sorted(tie, key=kinds.tie_rank), choice.tie  # cheapest first (the order the rule reads)
    assert choice.level is not None and choice.level >= 0.98, choice.level
    able = [n for n in tie if deployable(figures[n], MARGIN, choice.level)]
    if choice.chosen == kinds.PLAIN:
        assert able == [], (choice.reason, {n: figures[n].fmt() for n in tie})
        return
    assert able and able[0] == choice.chosen, (choice.reason, {n: figures[n].fmt() for n in tie})


@pytest.mark.parametrize("run", GPU_RUNS, ids=lambda p: p.stem)
def test_every_subset_of_a_gpu_runs_lengths_serves_by_the_one_rule(run: Path) -> None:
    blocks = Blocks.load(run)
    arms = [a for a in blocks.arms if a.startswith("exact-n")]
    figures = {a: blocks.interval(a, UNIT_PLAIN) for a in arms}
    arms = [a for a in arms if figures[a] is not None and figures[a].has_ci]  # type: ignore[union-attr]
    assert len(arms) >= 3, arms
    served = set()
    for size in range(1, len(arms) + 1):
        for names in itertools.combinations(arms, size):
            choice = blocks.decide(names, UNIT_PLAIN, need_identical=False, margin=MARGIN)
            holds_the_rule(choice, figures)  # type: ignore[arg-type]
            served.add(choice.chosen)
    if run.stem == "h200-run3-14b":  # its best, n4 1.04x [1.00, 1.08], is not confidently faster at 99.65% or more
        assert served == {kinds.PLAIN}, served  # (issue 79 item 1: it served n4 at 95%)
        return
    assert served - {kinds.PLAIN}, served  # these runs have lengths that pay: the rule serves one


@pytest.mark.parametrize("run", CPU_RUNS, ids=lambda p: p.stem)
def test_each_cpu_tune_serves_by_the_one_rule(run: Path) -> None:
    rows = [json.loads(line) for line in run.read_text().splitlines() if line.strip()]
    arms = sorted({a for r in rows for a in r["results"] if a.startswith("exact-") and a != "exact-baseline"})
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["workload"]] = counts.get(r["workload"], 0) + 1
    results = {"blocks": rows, "plan": {"workload_counts": counts},
               "summary": {a: {"all": {"identical": len(rows), "compared": len(rows)}} for a in arms},
               "outcome": {"blocks": len(rows), "elapsed_s": rows[-1].get("elapsed_s", 0.0)}}
    args = argparse.Namespace(rule="identical", margin=MARGIN, mix=None, tasks=None)
    measured, choice, _ = choose._from_blocks(args, results, arms, arms)
    holds_the_rule(choice, {m.name: m.speedup for m in measured})
