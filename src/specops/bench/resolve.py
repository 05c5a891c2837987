"""A bench run's first step: its settings resolved to arms, tasks, the llama.cpp build, the models and the derived
drafts (:class:`Inputs`); a bad one ends the run (:class:`~specops.bench.voice.Stop`, exit 2) before anything runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.bench import arms as armsmod
from specops.bench.arms import Arm
from specops.bench.design import STOPS
from specops.bench.quantize import QuantizeError, derive
from specops.bench.runner import BenchConfig, Progress
from specops.bench.settings import BenchSettings
from specops.bench.store import ResultStore
from specops.bench.tasks import Task, TaskError, load_tasks
from specops.bench.voice import Stop
from specops.capabilities import Capabilities
from specops.knobs import spec_type_members
from specops.paths import build_backend, llama_prefix
from specops.room import MTP_TYPE, mtp_problems


@dataclass
class Inputs:
    """What the settings resolve to before anything is measured."""

    reps: int
    selected: list[Arm]
    tasks: list[Task]
    prefix: Path
    caps: Capabilities
    needs_draft: bool
    derived: dict[str, Path]  # re-quantised drafts: type → GGUF
    cfg: BenchConfig
    arm_defs: dict[str, dict[str, Any]]


def _check_numbers(opts: BenchSettings, reps: int, budget_min: float | None) -> None:
    if reps < 1 or opts.max_tokens < 1 or opts.min_tasks < 2 or not 0 < opts.half_width < 1:
        raise Stop(2, "--reps and --max-tokens must be >= 1, --min-tasks >= 2, --half-width within (0, 1)")
    unknown = [s for s in opts.stop_on if s not in STOPS]
    if unknown:
        raise Stop(2, f"--stop-on: {', '.join(unknown)} is not a stop (they are: {', '.join(STOPS)})")
    if budget_min is not None and budget_min <= 0:
        raise Stop(2, "--budget must be a positive number of minutes")
    if not 0.05 <= opts.slice <= 10 or opts.recycle < 0:
        raise Stop(2, "--slice must be between 0.05 and 10 seconds, --recycle >= 0")


def _check_models(opts: BenchSettings, needs_draft: bool) -> None:
    if opts.target is None:
        raise Stop(2, "--target is required")
    for label, path in (("target", opts.target), ("draft", opts.draft if needs_draft else None)):
        if path is not None and not Path(path).exists():
            raise Stop(2, f"{label} model {path} not found (specops fetch-model …)")


def _check_mtp(opts: BenchSettings, selected: list[Arm]) -> None:
    mtp = [a.name for a in selected if MTP_TYPE in spec_type_members(a.profile.get("spec_type"))]
    if mtp and mtp_problems(MTP_TYPE, opts.target):
        raise Stop(2, f"arm{'s' if len(mtp) > 1 else ''} {', '.join(mtp)} draft with the target's own MTP head, but "
                   f"{Path(str(opts.target)).name} has no MTP layers (<arch>.nextn_predict_layers in its GGUF header): "
                   "leave them out or bench an MTP-headed target")


def _derive_drafts(opts: BenchSettings, prefix: Path, selected: list[Arm], progress: Progress) -> dict[str, Path]:
    derived: dict[str, Path] = {}
    for q in sorted({a.draft for a in selected if a.draft not in (None, "draft")}):  # type: ignore[type-var]
        progress.note(f"deriving draft {q} with llama-quantize (cached)")
        try:
            draft = Path(opts.draft)  # type: ignore[arg-type]
            derived[str(q)] = derive(prefix / "bin" / "llama-quantize", draft, str(q))
        except QuantizeError as exc:
            raise Stop(1, str(exc)) from None
    return derived


def resolve(opts: BenchSettings, store: ResultStore, progress: Progress) -> Inputs:
    """Arms, tasks, the llama.cpp build, the models and the derived drafts; a bad one ends the run."""
    reps = opts.reps if opts.reps is not None else (3 if opts.exhaustive else 1)
    budget_min = opts.budget if opts.budget is not None else (None if opts.exhaustive else 20.0)
    try:
        selected = armsmod.select_arms(opts.arm_names(), opts.plain)
        tasks = load_tasks(list(opts.tasks), list(opts.workloads) or None, opts.limit_per_workload,
                           opts.sample_every)
    except (armsmod.ArmError, TaskError) as exc:
        raise Stop(2, str(exc)) from None
    _check_numbers(opts, reps, budget_min)
    prefix = llama_prefix(opts.llama_prefix)
    server_bin, caps_file = prefix / "bin" / "llama-server", prefix / "capabilities.json"
    if not server_bin.exists() or not caps_file.exists():
        raise Stop(2, f"no llama.cpp build at {prefix} (need bin/llama-server and capabilities.json); "
                   "build it with playbooks/build.yml or pass --llama-prefix")
    caps = Capabilities.load(caps_file)
    needs_draft = any(a.draft is not None for a in selected)
    _check_models(opts, needs_draft)
    _check_mtp(opts, selected)
    if opts.fresh and store.root.exists():
        store.init_plan({}, fresh=True)  # clears results, keeps nothing of the old plan
        store.plan_path.unlink(missing_ok=True)

    derived = _derive_drafts(opts, prefix, selected, progress)
    cfg = BenchConfig(
        target=Path(str(opts.target)), draft=Path(opts.draft) if opts.draft else None, server_binary=server_bin,
        caps=caps, tasks=tasks, max_tokens=opts.max_tokens, seed=opts.seed, reps=reps, threads=opts.threads,
        draft_threads=opts.draft_threads if opts.draft_threads is not None else opts.threads,
        ctx_size=opts.ctx_size, derived_drafts=derived,
        budget_s=budget_min * 60 if budget_min is not None else None, request_guess_s=opts.request_guess,
        interleave=opts.interleave, slice_s=opts.slice, recycle=opts.recycle or None,
        backend=build_backend(prefix), synth_rates=tuple(opts.synth_rates),
    )
    arm_defs = {a.name: a.to_dict() for a in selected}
    return Inputs(reps=reps, selected=selected, tasks=tasks, prefix=prefix, caps=caps, needs_draft=needs_draft,
                  derived=derived, cfg=cfg, arm_defs=arm_defs)
