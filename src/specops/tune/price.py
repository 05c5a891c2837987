"""The tune's second step: llama-bench on this host's device prices a verification batch and a draft step
(:class:`~specops.bench.costmodel.StepCosts`); a draft model that cannot pay even with every drafted token accepted
is ruled out before any probe (:func:`pruned`, by the bench's rule: :func:`specops.bench.ceiling.pays`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specops import kinds
from specops.bench import ceiling as ceil
from specops.bench.arms import EXACT_CACHE
from specops.bench.costmodel import StepCosts
from specops.tune import decide
from specops.tune.state import Setup, TuneError

CEILING_KS = (1, 2, 3, 5, 9, 13, 17)
# llama-bench repetitions per batch size (the median is used). Two on a CPU, where each costs seconds; five on a GPU,
# where each costs milliseconds and the first of a new batch shape can be several times slower: an H200 run with two
# read a 14B step of 14.1 ms and a 0.5B draft step of 4.9 ms against 7.2 ms per token of the whole plain server
# (reports/gpu-h200-tune.md)
CPU_CEILING_REPS = 2
GPU_CEILING_REPS = 5


def ceiling(s: Setup, args: argparse.Namespace) -> tuple[StepCosts, dict[str, Any]]:
    """The step costs, and llama-bench's figures they come from (kept as the work dir's ceiling.json)."""
    num = ceil.Numerics.of_profile(EXACT_CACHE, {})
    # verification batches up to the longest length + 1 where a kind drafts by lengths; the draft model's step only
    # where a kind is priced with it (an EAGLE-3 head cannot run in llama-bench without its target)
    longest = max((k for k in (kinds.of(n).length(n) for n in s.names) if k), default=None)
    kmax = longest + 1 if longest else 2
    ks = sorted({k for k in CEILING_KS if k <= kmax} | {kmax})
    drafts = {"draft": Path(args.draft)} if args.draft and priced_draft(s.names) else {}
    try:
        data = ceil.measure(s.prefix / "bin" / "llama-bench", Path(args.target), [num], drafts,
                            depth=args.ceiling_depth, reps=GPU_CEILING_REPS if s.cfg.gpu else CPU_CEILING_REPS,
                            threads=args.threads, progress=s.progress.note, ks=ks, draft_k_max=kmax)
    except ceil.CeilingError as exc:
        raise TuneError(f"llama-bench failed: {str(exc).splitlines()[0]}; nothing was changed") from exc
    return StepCosts.from_ceiling(data, num.name, "draft" if drafts else None), data


def priced_draft(names: list[str]) -> list[str]:
    """The candidates priced with the draft model's step (:data:`specops.kinds.TARGET_DRAFT`)."""
    return [n for n in names if kinds.of(n).priced == kinds.TARGET_DRAFT]


def pruned(s: Setup, args: argparse.Namespace, costs: StepCosts) -> tuple[dict[str, float], list[str]]:
    """Draft lengths the ceiling rules out before any probe: even with every drafted token accepted none would
    clear plain decoding by the margin (then their probes are skipped). Empty when one could, or with
    --measure-all or --probe-all (which compare every candidate). With it, what stays open (one line, or none)."""
    draft = [(n, k) for n in priced_draft(s.names) if (k := kinds.of(n).length(n))]
    if args.draft is None or not draft or args.measure_all or args.probe_all:
        return {}, []
    bounds = decide.ceiling_bounds(costs, [k for _, k in draft])
    if ceil.pays(max(bounds.values()), args.margin):
        return {}, []
    # a draft step as slow as the target's: a draft drafting for itself (nothing to win), or a ceiling measured
    # beside other load (a 0.5B step read 0.53 s against the 1.5B's 0.09 s while a test ran): only the first may
    # rule the probes out, and the ceiling cannot tell them apart from the costs alone
    if costs.draft_step_s >= costs.target_step_s and Path(args.draft).resolve() != Path(args.target).resolve():
        return {}, [f"the ceiling read the draft's step ({costs.draft_step_s * 1e3:.0f} ms) no faster than the "
                    f"target's ({costs.target_step_s * 1e3:.0f} ms): other load on the host? The draft model was "
                    "probed anyway"]
    s.progress.note(f"tune: the ceiling rules out the draft model (at most {max(bounds.values()):.2f}× with every "
                    "drafted token accepted): its probes are skipped")
    return {n: bounds[k] for n, k in draft}, []
