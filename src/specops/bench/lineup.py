"""A bench run's second step: the hardware ceiling as the run has it (measured now, kept from the first run,
skipped or missing) and the arms it leaves (:class:`Lineup`): those that cannot pay are not run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.bench import ceiling as ceil
from specops.bench.arms import AA, BASELINE, Arm
from specops.bench.resolve import Inputs
from specops.bench.runner import BenchError, Progress
from specops.bench.settings import BenchSettings
from specops.bench.store import ResultStore
from specops.bench.voice import Say, Stop


@dataclass
class Ceiling:
    """The hardware ceiling as this run has it: measured now, kept from the first run, skipped or missing."""

    data: dict[str, Any] | None
    note: str
    seconds: float


@dataclass
class Lineup:
    """The arms that run once the ceiling has pruned those that cannot pay."""

    running: list[Arm]
    spec_arms: list[str]
    refs: dict[str, list[str]]  # identity reference → the running arms that refer to it
    cannot: dict[str, ceil.ArmCeiling]
    arm_ceilings: dict[str, dict[str, Any]]
    run_anyway: bool


def _measure_ceiling(opts: BenchSettings, prefix: Path, arms: list[Arm], drafts: dict[str, Path],
                     progress: Progress) -> tuple[dict[str, Any] | None, str]:
    bench_bin = prefix / "bin" / "llama-bench"
    if not bench_bin.exists():
        return None, (f"{bench_bin} is missing (build the llama-bench target): the hardware ceiling was not "
                      "measured, so no arm was pruned")
    if 1 not in opts.ceiling_k:
        raise BenchError("--ceiling-k must include 1 (one decode step is the unit)")
    nums: dict[str, ceil.Numerics] = {}
    need: dict[str, int] = {}  # the largest verified batch each numerics setting's arms can use
    for a in arms:
        num = ceil.Numerics.of_profile(a.profile, a.env)
        nums[num.name] = num
        k = ceil.arm_n_max(a.profile) + 1 if a.speculative else 2
        need[num.name] = max(need.get(num.name, 2), k)
    draft_k = max([ceil.arm_n_max(a.profile) + 1 for a in arms if a.draft is not None] or [2])
    try:
        data = ceil.measure(bench_bin, Path(str(opts.target)), list(nums.values()), drafts, opts.ceiling_depth,
                            opts.ceiling_reps, opts.threads, progress.note, ks=sorted(set(opts.ceiling_k)),
                            ks_for=need, draft_k_max=draft_k)
    except ceil.CeilingError as exc:
        return None, f"hardware ceiling not measured: {str(exc).splitlines()[0]}"
    return data, ""


def ceiling(opts: BenchSettings, store: ResultStore, inputs: Inputs, progress: Progress, say: Say) -> Ceiling:
    """The ceiling (kept in the work dir: a resumed run prunes exactly as the first one did); one that could not be
    measured is said, and nothing is pruned."""
    data = store.load_json("ceiling.json")
    note = ""
    seconds = (store.load_plan() or {}).get("ceiling_s", 0.0)
    if data is None and not opts.no_ceiling:
        drafts = {"draft": Path(opts.draft)} if inputs.needs_draft and opts.draft else {}
        drafts.update(inputs.derived)
        t0 = time.monotonic()
        try:
            data, note = _measure_ceiling(opts, inputs.prefix, inputs.selected, drafts, progress)
        except BenchError as exc:
            raise Stop(2, str(exc)) from None
        seconds = time.monotonic() - t0
        if data is not None:
            store.save_json("ceiling.json", data)
        else:
            say.err(note)
    elif opts.no_ceiling:
        data, note = None, "skipped (--no-ceiling)"
    return Ceiling(data, note, seconds)


def lineup(opts: BenchSettings, inputs: Inputs, ceiling: dict[str, Any] | None, progress: Progress) -> Lineup:
    """Prune the arms that cannot pay (unless run anyway) and the identity references no running arm needs."""
    arm_defs, selected = inputs.arm_defs, inputs.selected
    keep, cannot = ceil.prune({n: d for n, d in arm_defs.items() if n not in (BASELINE, AA)}, ceiling,
                              opts.ceiling_margin)
    arm_ceilings = {}
    for name, d in arm_defs.items():
        ac = ceil.arm_ceiling(name, d, ceiling) if ceiling and d["profile"].get("spec_type") != "none" else None
        if ac is not None:
            arm_ceilings[name] = ac.to_dict()
    run_anyway = opts.run_anyway or opts.exhaustive
    for name, ac in cannot.items():
        progress.note(f"ceiling: {name} cannot pay on this host (best {ac.best:.2f}× at draft length {ac.at_k}, "
                      f"draft cost {ac.draft_cost:.2f})" + ("; running it anyway" if run_anyway else "; not run"))
    running = [a for a in selected if a.name in (BASELINE, AA) or a.name in keep or run_anyway]
    spec_arms = [a.name for a in running if a.name not in (BASELINE, AA)]
    # an identity reference (exact-baseline) is only needed while an arm that refers to it runs
    refs = {a.name: [b.name for b in running if b.reference == a.name and b.name != a.name]
            for a in running if a.name not in (BASELINE, AA)}
    refs = {r: d for r, d in refs.items() if d}
    orphan = [r for r in spec_arms if arm_defs[r]["profile"].get("spec_type") == "none" and r not in refs]
    running = [a for a in running if a.name not in orphan]
    spec_arms = [a for a in spec_arms if a not in orphan]
    if not spec_arms:
        progress.note("every speculative arm was pruned by the ceiling: nothing can pay on this host")
    return Lineup(running=running, spec_arms=spec_arms, refs=refs, cannot=cannot, arm_ceilings=arm_ceilings,
                  run_anyway=run_anyway)
