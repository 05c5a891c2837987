"""``specops tune``: find the speculation profile that pays on this host, or say that none does.

1. **Ceiling**: llama-bench on this host's device prices a verification batch and a draft step.
2. **Probes**: a plain server and one server per kind of candidate, each alone on the machine for a few prompts
   (the draft model at the longest and the shortest length, every n-gram type the build has, llama.cpp's
   ``default`` speculative config): the server's own overheads and the acceptance per draft position.
3. **Predict** every candidate (:mod:`specops.bench.costmodel`), drop what cannot clear plain decoding.
4. **Measure** the best few side by side against plain decoding (the bench's paired design, its A/A check and
   identity rule, within what is left of ``--budget``).
5. **Choose**: the fastest candidate confidently faster than plain decoding (and identical in output under the
   identity rule), else plain decoding; per workload, what each would prefer. Written to ``tune.json`` with every
   candidate's figures.

Runs with or without Ansible, on any machine with a llama.cpp build (no systemd needed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench import ceiling as ceil
from specops.bench.arms import BASELINE, EXACT_CACHE, PLAIN_UNIT, on_unit, parse_arm, plain_description
from specops.bench.costmodel import Overheads, Run, StepCosts, fit_overheads
from specops.bench.runner import BenchConfig, Progress
from specops.bench.store import ResultStore
from specops.bench.tasks import Task, TaskError, load_tasks, workloads_of
from specops.capabilities import Capabilities
from specops.client import LlamaServerClient
from specops.commands import bench as bench_command
from specops.fit import MIB, FitError, FitParams, Memory, estimate, measure_memory
from specops.ggufmeta import GGUFError
from specops.knobs import knob
from specops.paths import INSTALL_PREFIX, build_backend, cache_dir, llama_prefix
from specops.tune import decide, evidence, leash, live, mix, probes, progress, quiet, record, streams

NAME = "tune"
HELP = "find the speculation profile that pays on this host (or plain decoding), with every candidate's figures"

CEILING_KS = (1, 2, 3, 5, 9, 13, 17)
MAX_DRIFT = 0.15  # the plain server's speed may move this much between the first and the last probe
# llama-bench repetitions per batch size (the median is used). Two on a CPU, where each costs seconds; five on a GPU,
# where each costs milliseconds and the first of a new batch shape can be several times slower: an H200 run with two
# read a 14B step of 14.1 ms and a 0.5B draft step of 4.9 ms against 7.2 ms per token of the whole plain server
# (reports/gpu-h200-tune.md)
CPU_CEILING_REPS = 2
GPU_CEILING_REPS = 5
REQUEST_SLACK = 1.5  # a measured request against the plain probe's time per token (slower arms, prompt, slicing)
REPORT_RESERVE_S = 20  # seconds of --budget kept for the measurement's report and the result (a 6 min tune ran 6:11)
STEP_SLACK = 1.1  # llama-bench's step may exceed the plain server's per-token time by this much (noise)


class TuneError(RuntimeError):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=Path, required=True, help="target GGUF")
    p.add_argument("--draft", type=Path, help="draft GGUF (draft-length candidates need one)")
    p.add_argument("--llama-prefix", type=Path,
                   help=f"llama.cpp install (bin/llama-server, bin/llama-bench, capabilities.json); default "
                        f"$SPECOPS_LLAMA_PREFIX, else {INSTALL_PREFIX}")
    p.add_argument("--lengths", default=",".join(map(str, decide.DRAFT_LENGTHS)),
                   help="draft lengths to consider (comma list; default %(default)s)")
    p.add_argument("--ngram", default="auto",
                   help="n-gram types to consider: auto (every type the build lists), a comma list, or '' (none)")
    p.add_argument("--no-default", action="store_true",
                   help="leave out llama.cpp's own default speculative config (spec_type default)")
    p.add_argument("--budget", type=float, default=6.0, metavar="MINUTES",
                   help="the whole tune's time; what is still open when it runs out is reported (default 6)")
    p.add_argument("--top", type=int, default=None,
                   help="candidates measured against plain decoding (default: 3 on a GPU build, 2 on a CPU build, "
                        "where every candidate's request costs seconds in every block)")
    p.add_argument("--ngram-probes", choices=("auto", "yes", "no"), default="auto",
                   help="probe each n-gram type before the measurement (auto: on a GPU build only; on a CPU build a "
                        "probe costs a server start and ~30 s, and its one-prompt prediction was 14-21%% off: the "
                        "n-gram types are measured side by side instead, llama.cpp's default type first)")
    p.add_argument("--margin", type=float, default=0.05,
                   help="a candidate is measured only if predicted at least 1 + this (default 0.05)")
    p.add_argument("--probe-tasks", type=int, default=1, help="probe prompts per workload (default 1)")
    p.add_argument("--probe-tokens", type=int, default=48, help="tokens per probe prompt (default 48)")
    p.add_argument("--probe-share", type=float, default=0.6,
                   help="share of --budget the ceiling and the probes may use before the measurement; a probe "
                        "that would start later is left open (default 0.6)")
    p.add_argument("--tasks", action="append", type=Path,
                   help="task JSONL file (repeatable); default: the bench's standard set")
    p.add_argument("--workloads", default="", help="only these workloads (comma list)")
    p.add_argument("--mix", metavar="WORKLOAD=SHARE,...",
                   help="each workload's share of the traffic (e.g. code=0.5,edit=0.3,prose=0.2,tool_calls=0): the "
                        "choice is made on the mix's speedup weighted by time; default: every measured task weighs "
                        "the same (equal shares where each workload has as many tasks)")
    p.add_argument("--limit-per-workload", type=int, default=3,
                   help="tasks per workload in the side-by-side measurement (default 3)")
    p.add_argument("--max-tokens", type=int, default=96, help="tokens per measured request (default 96)")
    p.add_argument("--threads", type=int, help="server threads (default: llama.cpp's)")
    p.add_argument("--ctx-size", type=int, default=4096)
    p.add_argument("--rule", choices=("identical", "fastest"), default="identical",
                   help="identical (default): only a candidate whose output matched plain decoding may win")
    p.add_argument("--ceiling-depth", type=int, default=256,
                   help="context depth of llama-bench's batches (default 256; the probes' own depth is ~100: see "
                        "docs/measurements.md, 2026-11-27, for what either does to the fitted overheads)")
    p.add_argument("--predict-only", action="store_true", help="stop after the predictions (no measurement)")
    p.add_argument("--measure-all", action="store_true",
                   help="also measure every candidate the shortlist left out (for comparison: the choice is still "
                   "made from the shortlist, and the result names the best measured)")
    p.add_argument("--probe-all", action="store_true",
                   help="probe the draft model even where the ceiling rules it out (at most 1 + --margin with every "
                        "drafted token accepted): for comparison; by default those probes are skipped")
    p.add_argument("--synth-rates", type=bench_command.rates_arg, default=(), metavar="P0,P1,...|FILE",
                   help="benchmarking only: llama.cpp's synthetic acceptance on every speculative server (see "
                   "specops bench --synth-rates); needs --rule fastest")
    p.add_argument("--work-dir", type=Path, help="where servers' logs and results go (default: the cache)")
    p.add_argument("--out", type=Path, help="write the result JSON here too")
    p.add_argument("--service-url", metavar="URL",
                   help="a live llama-server on this host (the deploy's service): the tune waits up to "
                        "--idle-timeout for its slots to be idle, watches its /slots throughout, and calls the result "
                        "unproven (exit 3, --out untouched) when it served a request meanwhile")
    p.add_argument("--api-key-file", type=Path, help="the service's API key file (its first line), for /slots")
    p.add_argument("--idle-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="how long to wait for the service of --service-url to be idle (default 120)")
    p.add_argument("--reuse", type=Path, metavar="FILE",
                   help="an earlier result: when the build, the models, the device and the settings that matter are "
                        "the same as its own, print it and measure nothing (the deploy's auto-tune); else tune and "
                        "say what changed")
    p.add_argument("--parallel", type=record.parallel_arg, default=1, metavar="N",
                   help="the service's slots (llama_server_parallel): part of what --reuse compares, so another N "
                        "tunes again; with N > 1 the one-stream choice (or the best measured) is measured again with "
                        "N streams in flight against plain decoding at N, and the choice is made for N (default 1)")
    p.add_argument("--quiet", action="store_true")
    progress.add_argument(p)
    leash.add_arguments(p)


def _err(msg: str) -> None:
    print(f"specops tune: {msg}", file=sys.stderr, flush=True)


def _ints(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise TuneError(f"--lengths must be a comma list of numbers, got {text!r}") from None
    if not out or out[0] < 1:
        raise TuneError(f"--lengths must be draft lengths of at least 1, got {text!r}")
    return out


@dataclass
class Setup:
    prefix: Path
    caps: Capabilities
    cfg: BenchConfig
    store: ResultStore
    work: Path
    lengths: list[int]
    names: list[str]
    probe_tasks: list[Task]
    deadline: float
    started: float
    progress: Progress
    facts: dict[str, Any]
    probe_until: float = 0.0
    drift: float | None = None  # the plain server's second probe against its first (per-token time, -1..)
    open: list[str] = field(default_factory=list)
    retuned: list[str] = field(default_factory=list)  # what moved since the --reuse result (tuned again)
    phases: dict[str, float] = field(default_factory=dict)
    meter: progress.ProgressFile = field(default_factory=progress.ProgressFile)  # --progress-file
    top: int = 3  # candidates measured (--top, else per build: 3 on a GPU, 2 on a CPU)
    ngram_probes: bool = True  # each n-gram type probed before the measurement (--ngram-probes)
    n_reserve: float = 0.0  # seconds kept for the measurement at the service's N streams (--parallel > 1)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def phase(self, name: str, since: float) -> float:
        """Record a phase's seconds; returns now (the next phase's start)."""
        now = time.monotonic()
        self.phases[name] = round(now - since, 1)
        return now


def _setup(args: argparse.Namespace) -> Setup:
    prefix = llama_prefix(args.llama_prefix)
    server, bench, caps_file = prefix / "bin" / "llama-server", prefix / "bin" / "llama-bench", \
        prefix / "capabilities.json"
    if not server.exists() or not caps_file.exists():
        raise TuneError(f"no llama.cpp build at {prefix} (bin/llama-server and capabilities.json); pass "
                        "--llama-prefix; nothing was changed")
    if not bench.exists():
        raise TuneError(f"{bench} is missing: the tune prices candidates with llama-bench (build its target); "
                        "nothing was changed")
    for label, path in (("target", args.target), ("draft", args.draft)):
        if path is not None and not Path(path).is_file():
            raise TuneError(f"{label} model {path} not found; nothing was changed")
    if not 0.1 <= args.probe_share <= 1:
        raise TuneError("--probe-share must be between 0.1 and 1")
    if args.budget <= 0 or (args.top is not None and args.top < 1) or args.probe_tasks < 1 \
            or args.probe_tokens < 8 or args.max_tokens < 8:
        raise TuneError("--budget must be > 0, --top and --probe-tasks >= 1, --probe-tokens and --max-tokens >= 8")
    if args.synth_rates and args.rule == "identical":
        raise TuneError("--synth-rates imposes acceptance, so the output is not the target's: the identity rule "
                        "would refuse every candidate; add --rule fastest")
    lengths = _ints(args.lengths)
    caps = Capabilities.load(caps_file)
    ngram = None if args.ngram == "auto" else [t for t in args.ngram.split(",") if t.strip()]
    missing = [t for t in ngram or [] if t not in caps.spec_types]
    if missing:
        raise TuneError(f"this build has no speculative type {', '.join(missing)} (it lists: "
                        f"{', '.join(caps.spec_types) or 'none'}); nothing was changed")
    has_default = bool(caps.has(str(knob("spec_type").for_value("default")))) and not args.no_default
    names = probes.candidates(lengths, args.draft is not None, caps.spec_types, ngram, has_default, caps.commit)
    if not names:
        raise TuneError("no candidate: give --draft, or leave --ngram at auto on a build with n-gram types")
    try:
        tasks = load_tasks(args.tasks, [w for w in args.workloads.split(",") if w.strip()] or None,
                           max(args.limit_per_workload, args.probe_tasks))
    except TaskError as exc:
        raise TuneError(str(exc)) from exc
    try:  # the shares, normalised (zero shares left out): what the record's key and the decision use
        args.mix = mix.parse(args.mix, workloads_of(tasks))
    except mix.MixError as exc:
        raise TuneError(f"{exc}; nothing was changed") from None
    probe_tasks = [t for w in workloads_of(tasks) for t in [x for x in tasks if x.workload == w][:args.probe_tasks]]
    backend = build_backend(prefix)
    _check_fit(backend, args, max(lengths))
    work = args.work_dir or cache_dir() / "tune" / time.strftime("%Y%m%dT%H%M%S")
    store = ResultStore(work)
    cfg = BenchConfig(target=Path(args.target), draft=args.draft, server_binary=server, caps=caps,
                      tasks=tasks, max_tokens=args.probe_tokens, threads=args.threads,
                      draft_threads=args.threads, ctx_size=args.ctx_size, interleave="requests",
                      backend=backend, synth_rates=tuple(args.synth_rates))
    now = time.monotonic()
    s = Setup(prefix, caps, cfg, store, work, lengths, names, probe_tasks, now + args.budget * 60, now,
              Progress(quiet=args.quiet), record.facts(prefix, backend, args),
              now + args.probe_share * args.budget * 60)
    s.top = args.top or (3 if cfg.gpu else 2)
    s.ngram_probes = args.ngram_probes == "yes" or (args.ngram_probes == "auto" and cfg.gpu)
    s.n_reserve = streams.reserve_s(args.budget * 60) if args.parallel > 1 and not args.predict_only else 0.0
    return s


def _check_fit(backend: str, args: argparse.Namespace, n_max: int) -> None:
    """The probes load the target with the draft model (at the longest length): refused in one line where that does
    not fit the build's memory (host RAM, or the GPU's for a CUDA/ROCm build; a GPU that vanished is said here)."""
    try:
        memory = measure_memory(backend)
        rep = estimate(args.target, args.draft, FitParams(ctx_size=args.ctx_size, draft_n_max=n_max), memory)
    except (FitError, GGUFError) as exc:
        raise TuneError(f"memory fit: {str(exc).splitlines()[0]}; nothing was changed") from None
    if not rep.fits:
        what = "the target and the draft model" if args.draft else "the target"
        raise TuneError(f"{what} do not fit in {memory.kind} here: one server needs {rep.needed / MIB:,.0f} MiB "
                        f"+ {rep.margin / MIB:,.0f} MiB margin, {memory.available / MIB:,.0f} MiB available "
                        f"({memory.source}; specops fit shows the breakdown); nothing was changed")


def _ceiling(s: Setup, args: argparse.Namespace) -> tuple[StepCosts, dict[str, Any]]:
    num = ceil.Numerics.of_profile(EXACT_CACHE, {})
    kmax = max(s.lengths) + 1 if args.draft else 2
    ks = sorted({k for k in CEILING_KS if k <= kmax} | {kmax})
    drafts = {"draft": Path(args.draft)} if args.draft else {}
    try:
        data = ceil.measure(s.prefix / "bin" / "llama-bench", Path(args.target), [num], drafts,
                            depth=args.ceiling_depth, reps=GPU_CEILING_REPS if s.cfg.gpu else CPU_CEILING_REPS,
                            threads=args.threads, progress=s.progress.note, ks=ks, draft_k_max=kmax)
    except ceil.CeilingError as exc:
        raise TuneError(f"llama-bench failed: {str(exc).splitlines()[0]}; nothing was changed") from exc
    return StepCosts.from_ceiling(data, num.name, "draft" if args.draft else None), data


def _probe_names(s: Setup, has_draft: bool) -> list[str]:
    """The plain server, the longest and the shortest draft length, each candidate without a draft model."""
    out = [probes.PLAIN_ARM]
    if has_draft:
        out += [probes.draft_candidate(max(s.lengths))]
        if min(s.lengths) != max(s.lengths):
            out.append(probes.draft_candidate(min(s.lengths)))
    out += [n for n in s.names if parse_arm(n).draft is None and s.ngram_probes]
    return out


def _run_probes(s: Setup, has_draft: bool) -> dict[str, probes.ProbeResult]:
    """The plain server and the longest draft always (nothing can be predicted without them); the others while
    the probes' share of the budget lasts."""
    out: dict[str, probes.ProbeResult] = {}
    essential = {probes.PLAIN_ARM, probes.draft_candidate(max(s.lengths))}
    names = _probe_names(s, has_draft)
    for i, name in enumerate(names, 1):
        if name not in essential and time.monotonic() >= s.probe_until:
            s.open.append(f"{name}: not probed (the probes' share of the budget was spent)")
            continue
        s.meter.update("probes", f"{name} ({i}/{len(names)})", s.left())
        out[name] = probes.probe(name, s.cfg, s.store, s.probe_tasks, s.progress.note)
    plain = out.get(probes.PLAIN_ARM)
    if plain is None or plain.error or plain.run.n_tokens <= 0:
        why = plain.error if plain else "not run"
        raise TuneError(f"the plain server could not be measured ({why}); nothing was changed")
    _bracket(s, out, plain)
    return out


def _bracket(s: Setup, out: dict[str, probes.ProbeResult], first: probes.ProbeResult) -> None:
    """The plain server once more after the other probes: the probes ran one after another, so a host whose speed
    moved meanwhile (another process's load) would skew every prediction. Both plain runs count; a drift beyond
    MAX_DRIFT is said (the side-by-side measurement, paired, is not affected)."""
    s.meter.update("probes", "plain decoding again (did the host's speed move meanwhile?)", s.left())
    again = probes.probe(probes.PLAIN_ARM, s.cfg, s.store, s.probe_tasks, s.progress.note)
    if again.error or again.run.n_tokens <= 0 or again.run.seconds <= 0:
        s.open.append(f"the plain server's second probe failed ({again.error or 'nothing generated'}): drift unknown")
        return
    s.drift = again.run.seconds_per_token / first.run.seconds_per_token - 1
    if abs(s.drift) > MAX_DRIFT:
        s.open.append(f"the plain server's speed moved {s.drift:+.0%} between the first and the last probe (other "
                      "load on the host?): the predictions are unreliable; only the side-by-side measurement decides")
    out[probes.PLAIN_ARM] = probes.ProbeResult(
        probes.PLAIN_ARM, Run(first.run.n_tokens + again.run.n_tokens, first.run.seconds + again.run.seconds),
        texts=first.texts)


def _pruned(s: Setup, args: argparse.Namespace, costs: StepCosts) -> dict[str, float]:
    """Draft lengths the ceiling rules out before any probe: even with every drafted token accepted none would
    clear plain decoding by the margin (then their probes are skipped). Empty when one could, or with
    --measure-all or --probe-all (which compare every candidate)."""
    if args.draft is None or args.measure_all or args.probe_all:
        return {}
    bounds = decide.ceiling_bounds(costs, s.lengths)
    if max(bounds.values()) >= 1 + args.margin:
        return {}
    # a draft step as slow as the target's: a draft drafting for itself (nothing to win), or a ceiling measured
    # beside other load (a 0.5B step read 0.53 s against the 1.5B's 0.09 s while a test ran): only the first may
    # rule the probes out, and the ceiling cannot tell them apart from the costs alone
    if costs.draft_step_s >= costs.target_step_s and Path(args.draft).resolve() != Path(args.target).resolve():
        s.open.append(f"the ceiling read the draft's step ({costs.draft_step_s * 1e3:.0f} ms) no faster than the "
                      f"target's ({costs.target_step_s * 1e3:.0f} ms): other load on the host? The draft model was "
                      "probed anyway")
        return {}
    s.progress.note(f"tune: the ceiling rules out the draft model (at most {max(bounds.values()):.2f}× with every "
                    "drafted token accepted): its probes are skipped")
    return {probes.draft_candidate(k): b for k, b in bounds.items()}


def _predict(s: Setup, costs: StepCosts, found: dict[str, probes.ProbeResult],
             has_draft: bool, pruned: dict[str, float] | None = None) -> tuple[Overheads, list[decide.Prediction]]:
    draft_runs = [found[n].run for n in (probes.draft_candidate(max(s.lengths)), probes.draft_candidate(
        min(s.lengths))) if n in found and not found[n].error]
    plain = found[probes.PLAIN_ARM].run
    ceiling_slower = costs.target_step_s > STEP_SLACK * plain.seconds_per_token
    if ceiling_slower:
        s.open.append(f"llama-bench's single-token step ({costs.target_step_s * 1e3:.1f} ms) is slower than the plain "
                      f"server's whole time per token ({plain.seconds_per_token * 1e3:.1f} ms): the ceiling does not "
                      "price this server (too few repetitions, other load?), so the server-overhead terms are 0 and "
                      "the predictions rest on llama-bench's relative costs alone; only the side-by-side measurement "
                      "decides")
    over = fit_overheads(costs, plain, draft_runs)
    missing = (["per token"] if over.per_token <= 0 else []) + (["per round", "per drafted token"]
                                                                if not over.runs else [])
    if missing and not ceiling_slower:
        why = ("no draft-model probe ran to fit the round terms on (the ceiling ruled the draft model out, or there "
               "is none)" if not over.runs else "llama-bench's step is no faster than the plain server's per token")
        s.open.append(f"server-overhead terms missing from the predictions: {', '.join(missing)} ({why}); an n-gram "
                      "candidate's prediction then carries none of the server's own cost of a round, so it reads "
                      "high (14–21% on the 2-core CPU, 2026-11-27): only the side-by-side measurement decides")
    longest = found.get(probes.draft_candidate(max(s.lengths))) if has_draft else None
    draft_probe = (decide.Probe(longest.arm, longest.run, longest.per_pos, max(s.lengths))
                   if longest and not longest.error and longest.run.drafts > 0 else None)
    others = [decide.Probe(n, found[n].run, found[n].per_pos) for n in s.names
              if parse_arm(n).draft is None and n in found and not found[n].error]
    preds = decide.predict(costs, over, draft_probe, s.lengths if has_draft else [], others,
                           name_of=probes.draft_candidate)
    preds += [decide.Prediction(n, b, f"the ceiling: at most {b:.2f}× even with every drafted token accepted "
                                "(not probed)") for n, b in (pruned or {}).items()]
    known = {p.name for p in preds}
    for n in s.names:
        if n not in known:
            why = found[n].error if n in found and found[n].error else (
                "not probed" if s.ngram_probes or parse_arm(n).draft is not None else
                "not probed on a CPU build (--ngram-probes auto): measured side by side instead")
            preds.append(decide.Prediction(n, None, why))
    return over, preds


def _measure(s: Setup, args: argparse.Namespace, chosen: list[str],
             plain_s_per_token: float = 0.0) -> dict[str, Any] | None:
    """The shortlist side by side with plain decoding: the bench's paired design, A/A check and identity rule."""
    # the bench's own report, the measurement at N streams (--parallel > 1) and the result fit inside the budget
    minutes = (s.left() - REPORT_RESERVE_S - s.n_reserve) / 60
    if minutes < 0.5:
        s.open.append(f"{', '.join(chosen)}: not measured (budget spent before the measurement)")
        return None
    argv = ["--target", str(args.target), "--llama-prefix", str(s.prefix), "--arms", ",".join(chosen),
            "--no-ceiling", "--budget", f"{minutes:.2f}", "--limit-per-workload", str(args.limit_per_workload),
            # every task of a workload before a candidate may stop on its figure (output that differs still stops it
            # at once): a sample that stops when it first looks confident overstates the confidence (the bench's
            # default, 4, let a team's 12 edits decide on 4)
            "--min-tasks", str(max(4, args.limit_per_workload)),
            "--max-tokens", str(args.max_tokens), "--ctx-size", str(args.ctx_size), "--work-dir",
            str(s.work / "measure"), "--fresh", "--report", str(s.work / "measure.md"), "--assets",
            str(s.work / "measure-assets"), "--no-vars", "--rule", args.rule, "--interleave", "slices",
            "--plain", PLAIN_UNIT]
    if plain_s_per_token > 0:  # the first block is checked against the budget too (a 2-core CPU's took 128 s)
        argv += ["--request-guess", f"{REQUEST_SLACK * args.max_tokens * plain_s_per_token:.2f}"]
    if args.draft:
        argv += ["--draft", str(args.draft)]
    if args.workloads:
        argv += ["--workloads", args.workloads]
    for path in args.tasks or ():
        argv += ["--tasks", str(path)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.synth_rates:
        argv += ["--synth-rates", ",".join(map(str, args.synth_rates))]
    if args.quiet:
        argv.append("--quiet")
    parser = argparse.ArgumentParser(prog="specops bench")
    bench_command.add_arguments(parser)
    s.meter.update("measure", f"{', '.join(chosen)} side by side with plain decoding", s.left())
    rc = bench_command.run(parser.parse_args(argv), progress.MeasureProgress(s.meter, s.left, quiet=args.quiet))
    s.meter.leash.measured(rc)  # the bench's exit 130 (SIGINT, SIGTERM) stops the tune
    raw = s.work / "measure-assets" / "results.json"
    if rc != 0 or not raw.exists():
        s.open.append(f"the side-by-side measurement ended with exit {rc}: see {s.work / 'measure'}")
        return None
    return dict(json.loads(raw.read_text()))


def _identity(results: dict[str, Any], names: list[str]) -> dict[str, bool | None]:
    """Per candidate: its output identical to plain decoding's on every compared request (None: not judged)."""
    out: dict[str, bool | None] = {}
    for n in names:
        aw = (results.get("summary", {}).get(n) or {}).get("all") or {}
        out[n] = (aw.get("identical") == aw.get("compared")) if aw.get("compared") else None
    return out


def _decide(s: Setup, args: argparse.Namespace, results: dict[str, Any] | None, shortlisted: list[str],
            names: list[str]) -> tuple[list[decide.Measured], decide.Choice, dict[str, str]]:
    """Every measured candidate against the unit's plain decoding (the bench's baseline under --plain unit), paired
    in the same blocks, with intervals for a new request (:mod:`specops.tune.evidence`); the choice from the
    shortlist, and per workload what it would prefer."""
    need = args.rule == "identical"
    blocks_file = s.work / "measure" / "blocks.jsonl"
    if results is None or not blocks_file.exists():
        return [], decide.choose([], need), {}
    blocks = evidence.Blocks.load(blocks_file)
    identical = _identity(results, names)
    try:  # over the mix, weighted by time, when --mix was given
        measured, _ = blocks.measured(names, BASELINE, identical, mix=args.mix)
        choice = blocks.decide(shortlisted, BASELINE, need, args.margin, identical, mix=args.mix)
    except mix.MixError as exc:
        raise TuneError(f"{exc}; nothing was chosen") from None
    per_wl = {}
    for wl in blocks.workloads:
        c = blocks.decide(shortlisted, BASELINE, need, args.margin, identical, workload=wl)
        per_wl[wl] = c.short()
    return measured, choice, per_wl


def profile_vars(name: str) -> dict[str, Any]:
    """The role variables that deploy candidate ``name`` (its speculative settings; plain: spec_type none)."""
    if name == decide.PLAIN:
        return {"llama_server_spec_type": "none"}
    prof = {k: v for k, v in parse_arm(name).profile.items() if k not in EXACT_CACHE}
    if knob("draft_n_max").for_spec_type(str(prof.get("spec_type"))):
        # an n-gram type that takes the draft length: llama.cpp's own for it, not the role's draft-model default
        prof.setdefault("draft_n_max", ceil.arm_n_max(prof))
    return {f"llama_server_{k}": v for k, v in prof.items()}


def table(result: dict[str, Any]) -> str:
    lines = ["| candidate | predicted | how | measured vs plain | identical | verdict |",
             "| --- | ---: | --- | ---: | :---: | --- |"]
    for c in result["candidates"]:
        pred = f"{c['predicted']:.2f}×" if c.get("predicted") is not None else "—"
        meas = c.get("measured") or "—"
        ident = {True: "yes", False: "no"}.get(c.get("identical"), "—")
        lines.append(f"| {c['name']} | {pred} | {c['how']} | {meas} | {ident} | {c['verdict']} |")
    return "\n".join(lines)


def _verdict(name: str, choice: decide.Choice, dropped: dict[str, str], measured: bool, shortlisted: bool) -> str:
    """What became of one candidate, for the table."""
    if name == choice.chosen:
        return "chosen"
    if name == choice.runner_up:
        return "runner-up" + (" (tie)" if name in choice.tie else "")
    if name in choice.tie:
        return "tie"
    if name in dropped:
        return dropped[name]
    if measured:
        return "measured"
    return "shortlisted, not measured" if shortlisted else "not measured"


def _best_measured(measured: list[decide.Measured], rule: str) -> decide.Measured | None:
    """The fastest measured candidate the rule lets win (identical output under rule identical), or None."""
    return max((m for m in measured if m.identical or rule == "fastest"), key=lambda m: m.speedup.estimate,
               default=None)


def _result(s: Setup, args: argparse.Namespace, over: Overheads | None, preds: list[decide.Prediction],
            shortlisted: list[str], dropped: dict[str, str], measured: list[decide.Measured],
            choice: decide.Choice, per_wl: dict[str, str], found: dict[str, probes.ProbeResult]) -> dict:
    by_m = {m.name: m for m in measured}
    rows = []
    for p in preds:
        m = by_m.get(p.name)
        verdict = _verdict(p.name, choice, dropped, m is not None, p.name in shortlisted)
        rows.append({"name": p.name, "predicted": p.predicted, "how": p.how,
                     "measured": m.speedup.fmt() if m else None,
                     "measured_interval": m.speedup.to_dict() if m else None,
                     "identical": m.identical if m else None, "verdict": verdict,
                     "vars": profile_vars(p.name)})
    best = _best_measured(measured, args.rule)
    return {
        "chosen": choice.chosen, "runner_up": choice.runner_up, "reason": choice.reason,
        "settled": choice.settled, "tie": list(choice.tie), "paired": choice.paired, "left_out": list(choice.left_out),
        "reference": plain_description(PLAIN_UNIT),
        "mix": args.mix, "mix_how": mix.describe(args.mix), "task_source": record.task_source(args.tasks),
        "interval": "95%, for a new request of the traffic's kind (the tasks' spread and the A/A noise count in full)",
        "best_measured": {"name": best.name, "measured": best.speedup.fmt(), "speedup": best.speedup.to_dict()}
        if best else None,
        "vars": profile_vars(choice.chosen), "per_workload": per_wl, "candidates": rows,
        "overheads": over.to_dict() if over else None, "probes": {n: r.to_dict() for n, r in found.items()},
        "open": s.open, "rule": args.rule, "budget_s": args.budget * 60, "phases_s": s.phases,
        "plain_drift": s.drift,
        "elapsed_s": round(time.monotonic() - s.started, 1), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build": {"commit": s.caps.commit, "prefix": str(s.prefix)},
        "models": {"target": str(args.target), "target_size": Path(args.target).stat().st_size,
                   "draft": str(args.draft) if args.draft else None,
                   "draft_size": Path(args.draft).stat().st_size if args.draft else None},
        "concurrency": "one stream: the figures are for one request at a time (one server slot); the service runs "
                       f"{args.parallel} slot(s)",
        "work_dir": str(s.work), "facts": s.facts, "key": record.key(s.facts),
        "retuned_because": s.retuned,
    }


def _reused(s: Setup, args: argparse.Namespace) -> bool:
    """--reuse: the earlier result stands when nothing it depends on moved (printed, written to --out); else what
    moved is said and the tune runs."""
    old = record.previous(args.reuse)
    if old is None:
        return False
    moved = record.changed(old.get("facts") or {}, s.facts)
    if old["key"] == record.key(s.facts) and not moved:
        if args.out and args.out.resolve() != args.reuse.resolve():
            args.out.write_text(json.dumps(old, indent=1, default=str))
        print(table(old))
        print(f"\nchosen: {old['chosen']} — {old.get('reason', '')}\nreused: the result of {old.get('when', '?')} "
              f"(the build, the models, the device and the settings are the same)")
        print(f"variables: {json.dumps(old.get('vars') or {})}")
        s.meter.done(f"reused the result of {old.get('when', '?')}: {old['chosen']}")
        return True
    s.progress.note(f"tune: the result of {old.get('when', '?')} is stale ({', '.join(moved) or 'its key'} changed): "
                    "tuning again")
    s.retuned = moved or ["the key"]
    return False


UNPROVEN = 3  # exit status: the live service was busy (before or during the tune); nothing was chosen or written


def _tune(s: Setup, args: argparse.Namespace) -> dict[str, Any]:
    """Ceiling, probes, predictions, the side-by-side measurement and the choice: the result (TuneError for what
    stops it before a choice can be made)."""
    s.progress.note(f"tune: {len(s.names)} candidates ({', '.join(s.names)}), budget {args.budget:g} min; "
                    f"work in {s.work}")
    s.meter.update("ceiling", f"llama-bench prices a verification batch and a draft step ({len(s.names)} "
                   "candidates)", s.left())
    costs, ceiling_data = _ceiling(s, args)
    s.store.save_json("ceiling.json", ceiling_data)
    t = s.phase("ceiling", s.started)
    pruned = _pruned(s, args, costs)
    found = _run_probes(s, args.draft is not None and not pruned)
    t = s.phase("probes", t)
    over, preds = _predict(s, costs, found, args.draft is not None and not pruned, pruned)
    shortlisted, dropped = decide.shortlist(preds, s.top, args.margin, always=(
        probes.engine_default(s.caps.commit) or probes.DEFAULT_ARM,))
    s.open += [f"{n}: {why}" for n, why in dropped.items() if why.endswith("stays open")]
    compared = [p.name for p in preds if args.measure_all and p.predicted is not None and p.name not in shortlisted]
    s.meter.update("predictions", f"{len(preds)} candidates predicted, shortlisted: {', '.join(shortlisted) or 'none'}",
                   s.left())
    bench = None
    if (shortlisted or compared) and not args.predict_only:
        bench = _measure(s, args, shortlisted + compared, found[probes.PLAIN_ARM].run.seconds_per_token)
        t = s.phase("measure", t)
    s.meter.update("choose", "from the paired blocks" if bench is not None else "nothing measured", s.left())
    measured, choice, per_wl = _decide(s, args, bench, shortlisted, shortlisted + compared)
    unmeasured = [n for n in shortlisted if n not in {m.name for m in measured}]
    if bench is not None and unmeasured:
        ended = (bench.get("outcome") or {}).get("ended", "?")
        s.open.append(f"{', '.join(unmeasured)}: shortlisted, not measured (the side-by-side measurement ended: "
                      f"{ended}; a longer --budget / llama_server_tune_budget measures them)")
    if not shortlisted:
        choice = decide.Choice(decide.PLAIN, None, "no candidate is predicted to beat plain decoding by "
                               f"{args.margin:.0%}: plain decoding, nothing measured", {})
    elif not measured:  # shortlisted, yet nothing compared with plain decoding: no answer, plain decoding meanwhile
        choice = decide.Choice(decide.PLAIN, None, f"undecided: {', '.join(shortlisted)} shortlisted, none measured "
                               "against plain decoding within the budget; plain decoding is served until a tune "
                               "with more time settles it", {}, settled=False, left_out=choice.left_out)
    elif not choice.settled:
        s.open.append(choice.reason)
    at_n = None
    if args.parallel > 1 and measured:
        at_n, choice = _at_n(s, args, choice, measured)
        s.phase("streams", t)
    result = _result(s, args, over, preds, shortlisted, dropped, measured, choice, per_wl, found)
    result["live_model"] = _live_model(s, costs, over, choice.chosen, measured)
    if args.parallel > 1:
        result["streams"] = at_n.to_dict() if at_n else None
        result["concurrency"] = (f"{args.parallel} streams: the table's figures are for one request at a time; the "
                                 f"choice was measured again with {at_n.n} streams in flight (streams)"
                                 + ("" if at_n.n == args.parallel else ", the largest N whose servers fit in memory")
                                 if at_n else result["concurrency"])
    return result


def _live_model(s: Setup, costs: StepCosts, over: Overheads | None, chosen: str,
                measured: list[decide.Measured]) -> dict[str, Any] | None:
    """What the exporter needs to price the chosen profile on the live traffic (:mod:`specops.tune.live`): the step
    costs (the draft model's only where the profile drafts with it), the overheads, and its measured and modelled
    figures on the same requests; None for plain decoding or where the model cannot speak for it (said in open)."""
    if chosen == decide.PLAIN or chosen not in {m.name for m in measured} or over is None:
        return None
    if parse_arm(chosen).draft is None:
        costs = StepCosts(costs.target_step_s, costs.target_rel)
    model, why = live.build(costs, over, ResultStore(s.work / "measure").read("blocks.jsonl"), chosen, BASELINE)
    if model is None:
        s.open.append(f"{chosen}: {why}")
        return None
    return model.to_dict()


def _streams_fit(s: Setup, args: argparse.Namespace, name: str, n: int,
                 memory: Memory | None = None) -> tuple[int, str]:
    """The largest N <= n at which ``name``'s server and plain decoding's, both at ``--parallel N`` side by side (as the
    measurement at N runs them), fit the build's memory (host RAM, or the GPU's), and the line that says so when it
    is below n (the fit cannot be read: n, and the line says that)."""
    arms = [on_unit(parse_arm(name)), on_unit(parse_arm(BASELINE))]
    margin = 0

    def need(m: int) -> int:
        nonlocal margin
        total = 0
        for arm in arms:
            prof = s.cfg.profile_for(arm)
            params = FitParams(ctx_size=args.ctx_size, parallel=m, cache_type_k=prof.cache_type_k or "f16",
                               cache_type_v=prof.cache_type_v or "f16", flash_attn=prof.flash_attn != "off",
                               draft_n_max=ceil.arm_n_max(arm.profile),
                               spec_type=str(arm.profile.get("spec_type") or "none"))
            rep = estimate(args.target, s.cfg.draft_for(arm), params, memory)
            total, margin = total + rep.needed, max(margin, rep.margin)
        return total

    try:
        memory = memory or measure_memory(s.cfg.backend)
        need(1)  # the margin, and any error, before the search
        fit = streams.fitting_n(n, need, memory.available - margin)
    except (FitError, GGUFError) as exc:
        return n, f"memory fit at {n} streams not checked ({str(exc).splitlines()[0]}): measured at {n}"
    if fit >= n:
        return n, ""
    short = (f"{name} and plain decoding, side by side at --parallel {n}, do not fit in {memory.kind} here "
             f"({memory.available / MIB:,.0f} MiB available, {need(n) / MIB:,.0f} MiB + {margin / MIB:,.0f} MiB "
             "margin needed)")
    if fit < 2:
        return fit, f"nothing measured at {n} streams: {short}: the choice is for one stream"
    return fit, f"{short}: measured at {fit} streams, the largest N that fits"


def _at_n(s: Setup, args: argparse.Namespace, choice: decide.Choice,
          measured: list[decide.Measured]) -> tuple[streams.AtN | None, decide.Choice]:
    """The service runs N slots: the one-stream choice (or, plain decoding chosen, the best measured that may win)
    against plain decoding, both with N streams in flight, and the choice for N (:mod:`specops.tune.streams`)."""
    n = args.parallel
    best = _best_measured(measured, args.rule)
    name = choice.chosen if choice.chosen != decide.PLAIN else (best.name if best else None)
    if name is None:
        s.open.append(f"nothing measured at {n} streams: no candidate measured at one stream may be chosen")
        return None, choice
    fit_n, why = _streams_fit(s, args, name, n)
    if fit_n < n:
        s.open.append(why)
        if fit_n < 2:
            return None, choice
        n = fit_n
    workloads = tuple(w for w in args.workloads.split(",") if w.strip())
    plan = streams.plan_for(n, s.left() - REPORT_RESERVE_S - streams.START_S, args.max_tokens,
                            tuple(str(p) for p in args.tasks or ()), workloads)
    if plan is None:
        s.open.append(f"{name}: not measured at {n} streams (the budget was spent): the choice is for one stream")
        return None, choice
    s.meter.update("streams", f"{name} and plain decoding, {n} streams each, {plan.blocks} blocks", s.left())
    at = streams.measure(s.cfg, name, n, plan, s.work / f"streams-n{n}")
    stands, settled, why = streams.verdict(at)
    if stands == (choice.chosen == name):  # the one-stream choice holds at N
        return at, dataclasses.replace(choice, reason=f"{choice.reason}; at {n} streams: {why}")
    if stands:
        return at, decide.Choice(name, None, f"chosen for {n} streams: {why} (at one stream: {choice.reason})",
                                 choice.figures, left_out=choice.left_out)
    return at, decide.Choice(decide.PLAIN, name, f"plain decoding for {n} streams: {why} (at one stream: "
                             f"{choice.reason})", choice.figures, settled=settled, left_out=choice.left_out)


def _print(result: dict[str, Any], s: Setup, args: argparse.Namespace) -> None:
    print(table(result))
    print(f"\nagainst: {result['reference']}; intervals {result['interval']}")
    print(f"tasks: {result['task_source']}; whole figure: {result['mix_how']}")
    print(f"chosen: {result['chosen']} — {result['reason']}")
    if result["runner_up"]:
        print(f"runner-up: {result['runner_up']}" + (f" ({result['paired']})" if result.get("paired") else ""))
    for line in result.get("left_out") or ():
        print(f"  left out: {line}")
    if args.measure_all and result["best_measured"]:
        best = result["best_measured"]
        print(f"best measured: {best['name']} {best['measured']}")
    for wl, arm in result["per_workload"].items():
        print(f"  {wl} would prefer: {arm}")
    if result.get("streams"):
        at = result["streams"]
        print(f"at {at['n']} streams: {at['candidate']} {at['measured']} against plain decoding at {at['n']} streams "
              f"(aggregate tok/s, {at['blocks']} blocks; slots processing at once: {at['streams_in_flight']})")
    for line in s.open:
        print(f"  still open: {line}")
    print(f"variables: {json.dumps(result['vars'])}\nresult: {s.work / 'tune.json'} "
          f"({result['elapsed_s']:.0f} s of {args.budget:g} min)")


def _watched(s: Setup, args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """The tune, beside the live service of --service-url when given: waits (bounded) for it to be idle and
    watches it throughout. Returns (result, why unproven: '' when the figures stand)."""
    if not args.service_url:
        return _tune(s, args), ""
    with LlamaServerClient(args.service_url, api_key=quiet.read_key(args.api_key_file) or None) as client:
        s.meter.update("waiting", f"for the service at {args.service_url} to be idle", s.left())
        idle, waited = quiet.wait_idle(client, args.idle_timeout)
        if not idle:
            return None, (f"the service at {args.service_url} stayed busy for {waited:.0f} s "
                          f"(--idle-timeout {args.idle_timeout:g}): not tuned beside its traffic")
        with quiet.Watch(client) as watch:
            result = _tune(s, args)
    if watch.blind_note():
        s.open.append(watch.blind_note())
        result["open"] = s.open
    return result, watch.contended()


def run(args: argparse.Namespace) -> int:
    """The tune on its leash (specops.tune.leash): a tune whose deploy is gone stops, says why in one line and exits
    leash.STOPPED, --out untouched."""
    meter = progress.ProgressFile(args.progress_file, leash.Leash.of(args))
    try:
        with meter.leash:
            return _run(args, meter)
    except leash.Stopped as stop:
        print(stop.line(args.out), flush=True)
        meter.stopped(stop.reason)
        return leash.STOPPED


def _run(args: argparse.Namespace, meter: progress.ProgressFile) -> int:
    meter.update("starting", "the build, the models, the memory fit", args.budget * 60)
    try:
        s = _setup(args)
        s.meter = meter
        if args.reuse and _reused(s, args):
            return 0
        result, unproven = _watched(s, args)
    except TuneError as exc:
        _err(str(exc))
        meter.stopped(str(exc))
        return 2
    s.store.root.mkdir(parents=True, exist_ok=True)
    if result is not None:
        result["unproven"] = unproven or None
        text = json.dumps(result, indent=1, default=str)
        with meter.leash.last_look():  # written only while the deploy that started this tune still holds its lock
            (s.work / "tune.json").write_text(text)
            if args.out and not unproven:  # an unproven result never replaces the host's record
                leash.write_whole(args.out, text)
        _print(result, s, args)
    if unproven:
        print(f"unproven: {unproven}; no choice was made and {args.out or 'no record'} was left as it was")
        meter.stopped(f"unproven: {unproven}")
        return UNPROVEN
    if result is not None:
        meter.done(f"chose {result['chosen']} in {result['elapsed_s']:.0f} s")
    return 0
