"""The tune's first step: the build, the models, the settings, the candidates, the tasks and the memory fit checked,
each refused in one line before anything runs (:class:`~specops.tune.state.TuneError`, nothing changed); the
:class:`~specops.tune.state.Setup` the steps after it share."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specops import kinds
from specops.bench.runner import BenchConfig, Progress
from specops.bench.store import ResultStore
from specops.bench.tasks import TaskError, load_tasks, workloads_of
from specops.capabilities import Capabilities
from specops.fit import MIB, FitError, FitParams, estimate, measure_memory
from specops.ggufmeta import GGUFError, read
from specops.knobs import knob
from specops.paths import build_backend, cache_dir, llama_prefix
from specops.tune import mix, progress, record, rule
from specops.tune.state import Setup, TuneError


def lengths(text: str) -> list[int]:
    """``--lengths``: the draft lengths, sorted, each at least 1."""
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise TuneError(f"--lengths must be a comma list of numbers, got {text!r}") from None
    if not out or out[0] < 1:
        raise TuneError(f"--lengths must be draft lengths of at least 1, got {text!r}")
    return out


def _check_build(prefix: Path) -> None:
    server, bench, caps_file = prefix / "bin" / "llama-server", prefix / "bin" / "llama-bench", \
        prefix / "capabilities.json"
    if not server.exists() or not caps_file.exists():
        raise TuneError(f"no llama.cpp build at {prefix} (bin/llama-server and capabilities.json); pass "
                        "--llama-prefix; nothing was changed")
    if not bench.exists():
        raise TuneError(f"{bench} is missing: the tune prices candidates with llama-bench (build its target); "
                        "nothing was changed")


def _check_settings(args: argparse.Namespace) -> None:
    for label, path in (("target", args.target), ("draft", args.draft)):
        if path is not None and not Path(path).is_file():
            raise TuneError(f"{label} model {path} not found; nothing was changed")
    if not 0.1 <= args.probe_share <= 1:
        raise TuneError("--probe-share must be between 0.1 and 1")
    if args.budget <= 0 or (args.top is not None and args.top < 1) or args.probe_tasks < 1 \
            or args.probe_tokens < 8 or args.max_tokens < 8:
        raise TuneError("--budget must be > 0, --top and --probe-tasks >= 1, --probe-tokens and --max-tokens >= 8")
    if args.synth_rates and args.rule != "fastest":
        raise TuneError("--synth-rates imposes acceptance, so the output is not the target's: the identity rule "
                        "would refuse every candidate; add --rule fastest")


def files(args: argparse.Namespace, caps: Capabilities, draft_lengths: list[int]) -> kinds.Files:
    """What the candidates follow from (:class:`specops.kinds.Files`): the lengths, the draft model's architecture,
    whether the target carries MTP layers, the build's types, and what --ngram, --no-default and --kinds ask."""
    ngram = None if args.ngram == "auto" else tuple(t for t in args.ngram.split(",") if t.strip())
    missing = [t for t in ngram or () if t not in caps.spec_types]
    if missing:
        raise TuneError(f"this build has no speculative type {', '.join(missing)} (it lists: "
                        f"{', '.join(caps.spec_types) or 'none'}); nothing was changed")
    try:
        only = kinds.parse_only(getattr(args, "kinds", "") or "")
    except kinds.KindError as exc:
        raise TuneError(f"{exc}; nothing was changed") from None
    has_default = bool(caps.has(str(knob("spec_type").for_value("default")))) and not args.no_default
    return kinds.Files(tuple(draft_lengths), _arch(args.draft), int(_header(args.target, "nextn_predict_layers")) > 0,
                       tuple(caps.spec_types), ngram, has_default, caps.commit, only)


def _arch(path: Path | None) -> str | None:
    """The draft model's architecture ('' where its header cannot be read: the memory fit refuses it in one line)."""
    if path is None:
        return None
    try:
        return read(path, check_data=False).arch
    except (GGUFError, OSError):
        return ""


def _header(path: Path, suffix: str) -> int:
    """An architecture key of the target's header (0 where it cannot be read: the memory fit refuses it)."""
    try:
        return int(read(path, check_data=False).arch_get(suffix, 0) or 0)
    except (GGUFError, OSError, ValueError, TypeError):
        return 0


def _candidates(found: kinds.Files) -> list[str]:
    """The candidates the build and the settings allow (:func:`specops.kinds.candidates`)."""
    names = kinds.candidates(found)
    if not names:
        raise TuneError("no candidate: give --draft (or a target with MTP layers), or leave --ngram at auto on a "
                        "build with n-gram types")
    return names


def _check_fit(backend: str, args: argparse.Namespace, names: list[str]) -> None:
    """The probes load the target with each kind's extra (the draft model at its longest length, the MTP context,
    the n-gram pool; :func:`specops.kinds.fit_spec_types`): refused in one line where the most any kind needs does
    not fit the build's memory (host RAM, or the GPU's for a CUDA/ROCm build; a GPU that vanished is said here)."""
    try:
        memory = measure_memory(backend)
        reps = [(spec, draft, estimate(args.target, args.draft if draft else None,
                                       FitParams(ctx_size=args.ctx_size, draft_n_max=n_max, spec_type=spec), memory))
                for spec, draft, n_max in kinds.fit_spec_types(names)]
    except (FitError, GGUFError) as exc:
        raise TuneError(f"memory fit: {str(exc).splitlines()[0]}; nothing was changed") from None
    if not reps:
        return
    spec, draft, rep = max(reps, key=lambda r: r[2].needed)
    if not rep.fits:
        what = "the target and the draft model" if draft else "the target"
        raise TuneError(f"{what} do not fit in {memory.kind} here for {spec}: one server needs "
                        f"{rep.needed / MIB:,.0f} MiB + {rep.margin / MIB:,.0f} MiB margin, "
                        f"{memory.available / MIB:,.0f} MiB available ({memory.source}; specops fit shows the "
                        "breakdown); nothing was changed")


def prepare(args: argparse.Namespace, meter: progress.ProgressFile | None = None) -> Setup:
    """Everything checked, the tasks loaded and the mix normalised (``Setup.mix``; ``args`` stays as given); the
    clock starts here."""
    prefix = llama_prefix(args.llama_prefix)
    _check_build(prefix)
    _check_settings(args)
    draft_lengths = lengths(args.lengths)
    caps = Capabilities.load(prefix / "capabilities.json")
    names = _candidates(files(args, caps, draft_lengths))
    try:
        tasks = load_tasks(args.tasks, [w for w in args.workloads.split(",") if w.strip()] or None,
                           max(args.limit_per_workload, args.probe_tasks))
    except TaskError as exc:
        raise TuneError(str(exc)) from exc
    try:  # the shares, normalised (zero shares left out): what the record's key and the decision use
        mixed = mix.parse(args.mix, workloads_of(tasks))
    except mix.MixError as exc:
        raise TuneError(f"{exc}; nothing was changed") from None
    # what the measurement plans by and the choice weighs by: the mix, else the task set's own shares (a team's
    # files by their counts before any per-workload cap; the standard set's workloads the same)
    uncapped = tasks if args.limit_per_workload is None else load_tasks(
        args.tasks, [w for w in args.workloads.split(",") if w.strip()] or None, None)
    shares, shares_how = rule.planned(mixed, {w: sum(1 for t in uncapped if t.workload == w)
                                                   for w in workloads_of(tasks)}, standard=not args.tasks)
    probe_tasks = [t for w in workloads_of(tasks) for t in [x for x in tasks if x.workload == w][:args.probe_tasks]]
    backend = build_backend(prefix)
    _check_fit(backend, args, names)
    work = args.work_dir or cache_dir() / "tune" / time.strftime("%Y%m%dT%H%M%S")
    cfg = BenchConfig(target=Path(args.target), draft=args.draft, server_binary=prefix / "bin" / "llama-server",
                      caps=caps, tasks=tasks, max_tokens=args.probe_tokens, threads=args.threads,
                      draft_threads=args.threads, ctx_size=args.ctx_size, interleave="requests",
                      backend=backend, synth_rates=tuple(args.synth_rates))
    now = time.monotonic()
    keyed = argparse.Namespace(**{**vars(args), "mix": mixed})  # the key holds the mix normalised
    return Setup(prefix, caps, cfg, ResultStore(work), work, draft_lengths, names, probe_tasks,
                 now + args.budget * 60, now, Progress(quiet=args.quiet), record.facts(prefix, backend, keyed, names),
                 now + args.probe_share * args.budget * 60, top=args.top or (3 if cfg.gpu else 1),
                 ngram_probes=args.ngram_probes == "yes" or (args.ngram_probes == "auto" and cfg.gpu),
                 shares=shares, shares_how=shares_how, mix=mixed, meter=meter or progress.ProgressFile())
