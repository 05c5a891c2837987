"""Does one probe at the longest draft length give the acceptance of the shorter ones? (issue 42, item 2)

Reads a bench work directory whose arms include ``draft-n<K>`` at several lengths (run on the same tasks side by
side), and for the longest length's per-position counters truncated at each shorter k compares the accepted tokens
per round with what the direct run at k measured - per workload and overall. Also checks the cost model
(specops.bench.costmodel) on the same run: overheads fitted on the plain arm and the longest + shortest draft arms,
the middle lengths predicted from their own counters and from the truncated probe.

    python -m specops_lab.probe_truncation ~/.cache/specops/probe-bench
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from specops.bench.costmodel import (
    Run,
    StepCosts,
    expected_accepted,
    fit_overheads,
    predicted_run_speedup,
    predicted_speedup,
    survival,
)


def _load(work: Path) -> tuple[list[dict], dict]:
    blocks = [json.loads(line) for line in (work / "blocks.jsonl").read_text().splitlines() if line.strip()]
    return [b for b in blocks if b.get("results")], json.loads((work / "ceiling.json").read_text())


def _costs(ceiling: dict) -> StepCosts:
    (name,) = ceiling["draft"]
    return StepCosts.from_ceiling(ceiling, "default", name)


def main(argv: list[str]) -> int:
    work = Path(argv[0]).expanduser()
    blocks, ceiling = _load(work)
    lengths = sorted({int(m.group(1)) for b in blocks for a in b["results"] if (m := re.match(r"draft-n(\d+)$", a))})
    kmax, kmin = max(lengths), min(lengths)
    # per workload: counters summed over its tasks, runs (tokens, server-running seconds)
    agg: dict[str, dict[str, dict]] = defaultdict(lambda: defaultdict(lambda: {"n": 0.0, "s": 0.0, "d": 0.0, "t": 0.0,
                                                                              "a": 0.0, "pp": defaultdict(float),
                                                                              "ratios": []}))
    for b in blocks:
        wl = b.get("workload") or b.get("task", "?").split("-")[0]
        base = b["results"].get("baseline", {})
        for arm, r in b["results"].items():
            if not r.get("decode_tps"):
                continue
            for key in (wl, "all"):
                x = agg[key][arm]
                x["n"] += r["n_predicted"]
                x["s"] += r["n_predicted"] / r["decode_tps"]
                sp = r.get("spec") or {}
                x["d"] += sp.get("drafts", 0)
                x["t"] += sp.get("draft_tokens", 0)
                x["a"] += sp.get("accepted", 0)
                for p, v in (sp.get("per_pos") or {}).items():
                    x["pp"][p] += v
                if base.get("decode_tps"):
                    x["ratios"].append(r["decode_tps"] / base["decode_tps"])
    costs = _costs(ceiling)
    print(f"Blocks: {len(blocks)}; lengths {lengths}; probe = draft-n{kmax}\n")
    print(f"| workload | k | accepted/round direct | from the n{kmax} probe | error |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for wl in sorted(agg):
        probe = agg[wl][f"draft-n{kmax}"]
        surv = survival(dict(probe["pp"]), probe["d"])
        for k in lengths[:-1]:
            x = agg[wl][f"draft-n{k}"]
            direct = x["a"] / x["d"] if x["d"] else float("nan")
            est = expected_accepted(surv, k)
            print(f"| {wl} | {k} | {direct:.2f} | {est:.2f} | {est / direct - 1:+.1%} |")
    print("\n| workload | k | measured speedup | predicted (own counters) | predicted (probe) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for wl in sorted(agg):
        arms = agg[wl]
        plain = Run(arms["baseline"]["n"], arms["baseline"]["s"])
        probes = [Run(arms[f"draft-n{k}"]["n"], arms[f"draft-n{k}"]["s"], arms[f"draft-n{k}"]["d"],
                      arms[f"draft-n{k}"]["t"], arms[f"draft-n{k}"]["a"]) for k in (kmax, kmin)]
        over = fit_overheads(costs, plain, probes)
        surv = survival(dict(arms[f"draft-n{kmax}"]["pp"]), arms[f"draft-n{kmax}"]["d"])
        for k in lengths:
            x = arms[f"draft-n{k}"]
            run = Run(x["n"], x["s"], x["d"], x["t"], x["a"])
            meas = statistics.geometric_mean(x["ratios"]) if x["ratios"] else float("nan")
            own = predicted_run_speedup(costs, over, run)
            via = predicted_speedup(costs, over, k, expected_accepted(surv, k))
            print(f"| {wl} | {k} | {meas:.3f} | {own:.3f} | {via:.3f} |")
        if wl == "all":
            print(f"\nOverheads (all): {json.dumps({k: round(v, 3) for k, v in over.to_dict().items()})}; "
                  f"target step {costs.target_step_s * 1e3:.1f} ms, draft step {costs.draft_step_s * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
