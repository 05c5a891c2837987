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

Runs with or without Ansible, on any machine with a llama.cpp build (no systemd needed). The steps are a library
(:mod:`specops.tune.pipeline`, one module per step); this module is their command line: the options, what is
printed, the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specops import kinds
from specops.bench.identity import RULES
from specops.commands.bench import rates_arg
from specops.paths import INSTALL_PREFIX, write_whole
from specops.tune import leash, pipeline, prepare, progress, record
from specops.tune.settings import cli_defaults
from specops.tune.state import Setup, TuneError

NAME = "tune"
HELP = "find the speculation profile that pays on this host (or plain decoding), with every candidate's figures"
UNPROVEN = 3  # exit status: the live service was busy (before or during the tune); nothing was chosen or written
# the defaults of the options that are the role's settings too: the tune settings table's (specops.tune.settings)
D = cli_defaults()


def add_arguments(p: argparse.ArgumentParser) -> None:
    _candidate_args(p)
    _rest_args(p)


def _candidate_args(p: argparse.ArgumentParser) -> None:
    """Which candidates: the models, the build, the lengths and types, the shortlist and what stays open."""
    p.add_argument("--target", type=Path, required=True, help="target GGUF")
    p.add_argument("--draft", type=Path, help="draft GGUF (draft-length candidates need one)")
    p.add_argument("--llama-prefix", type=Path,
                   help=f"llama.cpp install (bin/llama-server, bin/llama-bench, capabilities.json); default "
                        f"$SPECOPS_LLAMA_PREFIX, else {INSTALL_PREFIX}")
    p.add_argument("--lengths", default=D["lengths"],
                   help="draft lengths to consider (comma list; default %(default)s)")
    p.add_argument("--ngram", default="auto",
                   help="n-gram types to consider: auto (every type the build lists), a comma list, or '' (none)")
    p.add_argument("--kinds", default="auto", metavar="KIND,...",
                   help="only these kinds of candidate (specops.kinds: " + ", ".join(
                       k.key for k in kinds.KINDS if k.key != kinds.PLAIN) + "); default auto: every kind the "
                   "models and the build allow (a draft model's lengths, EAGLE-3 for an eagle3 draft, the target's MTP "
                   "head where it has MTP layers, the n-gram types, llama.cpp's default)")
    p.add_argument("--no-default", action="store_true",
                   help="leave out llama.cpp's own default speculative config (spec_type default)")
    p.add_argument("--budget", type=float, default=D["budget"], metavar="MINUTES",
                   help="the whole tune's time at most (it ends once its tasks are measured); what is still open "
                        f"when it runs out is reported, with the tasks that would settle it (default {D['budget']:g})")
    p.add_argument("--top", type=int, default=None,
                   help="candidates measured against plain decoding besides llama.cpp's own default (default: 3 "
                        "on a GPU build; 1 on a CPU build, where every candidate's request costs seconds in every "
                        "block: the engine's default alone when nothing is predicted to pay, the others stay open)")
    p.add_argument("--reserve", type=int, default=2, metavar="N",
                   help="of the candidates that stay open (the other n-gram types on a CPU build, draft lengths within "
                        "the predictions' error), measure up to N, one at a time, beside a candidate that is on "
                        "course to clear the margin: ngram-simple, then map-k, then by prediction (default 2)")


def _rest_args(p: argparse.ArgumentParser) -> None:
    """How it measures and decides, and where results go."""
    p.add_argument("--ngram-probes", choices=("auto", "yes", "no"), default="auto",
                   help="probe each n-gram type before the measurement (auto: on a GPU build only; on a CPU build a "
                        "probe costs a server start and ~30 s, and its one-prompt prediction was 14-21%% off: the "
                        "n-gram types are measured side by side instead, llama.cpp's default type first)")
    p.add_argument("--margin", type=float, default=0.05,
                   help="a candidate is measured only if predicted at least 1 + this (default 0.05)")
    p.add_argument("--probe-tasks", type=int, default=1, help="probe prompts per workload (default 1)")
    p.add_argument("--probe-tokens", type=int, default=D["probe_tokens"],
                   help=f"tokens per probe prompt (default {D['probe_tokens']})")
    p.add_argument("--probe-share", type=float, default=0.6,
                   help="share of --budget the ceiling and the probes may use before the measurement; a probe "
                        "that would start later is left open (default 0.6)")
    p.add_argument("--tasks", action="append", type=Path,
                   help="task JSONL file (repeatable); default: the bench's standard set")
    p.add_argument("--workloads", default="", help="only these workloads (comma list)")
    p.add_argument("--mix", metavar="WORKLOAD=SHARE,...",
                   help="each workload's share of the traffic (e.g. code=0.5,edit=0.3,prose=0.2,tool_calls=0): the "
                        "choice is made on the mix's speedup weighted by time, a workload without a share is not "
                        "measured, the blocks go where share x spread settles it soonest; default: the --tasks "
                        "files' own shares, each workload the same for the standard set")
    p.add_argument("--limit-per-workload", type=int, default=D["limit_per_workload"],
                   help=f"tasks per workload in the side-by-side measurement, at most (default "
                        f"{D['limit_per_workload']}; the standard set "
                        "holds 6 code tasks and 12-15 of the others): the budget may end it sooner, and a candidate "
                        "that cannot pay on a workload stops there after 3")
    p.add_argument("--max-tokens", type=int, default=D["max_tokens"],
                   help=f"tokens per measured request (default {D['max_tokens']})")
    p.add_argument("--threads", type=int, default=D["threads"], help="server threads (default: llama.cpp's)")
    p.add_argument("--ctx-size", type=int, default=D["ctx_size"], help="the servers' context (default %(default)s)")
    p.add_argument("--rule", choices=RULES, default=D["rule"],
                   help="equivalent (default): a candidate may win whose answers match plain decoding's except for "
                        "near-ties (plain decoding's top two choices closer than a verifying batch moves them on this "
                        "host, measured; each one quoted); identical: only one whose answers matched byte for byte; "
                        "fastest: output not judged. A change (plain decoding's choice was clear) is never served")
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
    p.add_argument("--synth-rates", type=rates_arg, default=(), metavar="P0,P1,...|FILE",
                   help="benchmarking only: llama.cpp's synthetic acceptance on every speculative server (see "
                   "specops bench --synth-rates); needs --rule fastest")
    p.add_argument("--work-dir", type=Path, help="where servers' logs and results go (default: the cache)")
    p.add_argument("--out", type=Path, help="write the result JSON here too")
    _deploy_args(p)
    p.add_argument("--quiet", action="store_true")
    progress.add_argument(p)
    leash.add_arguments(p)


def _deploy_args(p: argparse.ArgumentParser) -> None:
    """What a deploy hands over: its live service, an earlier or another host's result, the models' sha256, the
    service's slots."""
    p.add_argument("--service-url", metavar="URL",
                   help="a live llama-server on this host (the deploy's service): the tune waits up to "
                        "--idle-timeout for its slots to be idle, watches its /slots throughout, and calls the result "
                        "unproven (exit 3, --out untouched) when it served a request meanwhile")
    p.add_argument("--api-key-file", type=Path, help="the service's API key file (its first line), for /slots")
    p.add_argument("--idle-timeout", type=float, default=float(D["idle_timeout"]), metavar="SECONDS",
                   help=f"how long to wait for the service of --service-url to be idle (default {D['idle_timeout']})")
    p.add_argument("--reuse", type=Path, metavar="FILE",
                   help="an earlier result: when the build, the models, the device and the settings that matter are "
                        "the same as its own, print it and measure nothing (the deploy's auto-tune); else tune and "
                        "say what changed")
    p.add_argument("--shared", type=Path, metavar="FILE",
                   help="another host's result (the deploy's llama_server_tune_share: kind): where --reuse has none "
                        "that stands (or one shared earlier, and this is another tune), it is used when it is of this "
                        "host's kind (the build, the models' size and sha256, the device, --parallel and the settings "
                        "the same), kept in --out saying from which host and why; else refused in one line")
    p.add_argument("--own-only", action="store_true",
                   help="with --reuse: a result shared from another host does not stand (the deploy's "
                        "llama_server_tune_share: off): tune here")
    p.add_argument("--target-sha256", type=record.sha256_arg, metavar="HEX",
                   help="the target's sha256 (the models role's verified one), for the kind; default: hashed here")
    p.add_argument("--draft-sha256", type=record.sha256_arg, metavar="HEX",
                   help="the draft model's sha256, for the kind; default: hashed here")
    p.add_argument("--kind-only", action="store_true",
                   help="print this host's kind as JSON on the last line ({kind: key, reuse: whether --reuse's "
                        "result stands and was tuned here}; where it stands, that result's lines first, as a reusing "
                        "tune prints them) and exit: nothing is measured or written")
    p.add_argument("--parallel", type=record.parallel_arg, default=D["parallel"], metavar="N",
                   help="the service's slots (llama_server_parallel): part of what --reuse compares, so another N "
                        "tunes again; with N > 1 the one-stream choice (or the best measured) is measured again with "
                        f"N streams in flight against plain decoding at N, and the choice is made for N (default "
                        f"{D['parallel']})")


def _err(msg: str) -> None:
    print(f"specops tune: {msg}", file=sys.stderr, flush=True)


def table(result: dict[str, Any]) -> str:
    """The candidates as a markdown table: predicted, how, measured, identical, what became of each."""
    lines = ["| candidate | predicted | how | measured vs plain | identical | verdict |",
             "| --- | ---: | --- | ---: | :---: | --- |"]
    for c in result["candidates"]:
        pred = f"{c['predicted']:.2f}×" if c.get("predicted") is not None else "—"
        meas = c.get("measured") or "—"
        ident = {True: "yes", False: "no"}.get(c.get("identical"), "—")
        lines.append(f"| {c['name']} | {pred} | {c['how']} | {meas} | {ident} | {c['verdict']} |")
    return "\n".join(lines)


def _reused(s: Setup, args: argparse.Namespace) -> tuple[bool, list[str]]:
    """--reuse: the earlier result stands when nothing it depends on moved (printed, written to --out); else what
    moved is said (:func:`specops.tune.pipeline.reusable`), and --shared: another host's result of this host's kind
    stands instead (:func:`specops.tune.pipeline.shared`, kept in --out; also over a result shared earlier, where
    this one is another host's newer tune); else the tune runs (and what moved since the --reuse result)."""
    old, retuned = pipeline.reusable(s, args) if args.reuse else (None, [])
    adopted = False
    if (old is None or old.get("shared")) and getattr(args, "shared", None):
        theirs = pipeline.shared(s, args, old)
        old, adopted = (theirs, True) if theirs is not None else (old, False)
    if old is None:
        return False, retuned
    if args.out and (adopted or not args.reuse or args.out.resolve() != args.reuse.resolve()):
        write_whole(args.out, json.dumps(old, indent=1, default=str))
    _say_reused(old, adopted)
    share = old.get("shared") or {}
    from_ = f" (shared from {share.get('from')})" if share else ""
    s.meter.done(f"reused the result of {old.get('when', '?')}{from_}: {old['chosen']}")
    return True, []


def _say_reused(old: dict[str, Any], adopted: bool) -> None:
    """A reused result as the deploy prints it: its table, its choice, whose result and why it stands."""
    print(table(old))
    share = old.get("shared") or {}
    if adopted:
        how = f"tuned on {share['from']} and shared with this host: {share['why']}; the speed gate here still judges it"
    else:
        how = ("the build, the models, the device and the settings are the same"
               + (f"; tuned on {share.get('from')} and shared" if share else ""))
    print(f"\nchosen: {old['chosen']} — {old.get('reason', '')}\nreused: the result of {old.get('when', '?')} ({how})")
    print(f"variables: {json.dumps(old.get('vars') or {})}")


def _kind_only(args: argparse.Namespace) -> int:
    """--kind-only: this host's kind key and whether --reuse's result stands, tuned here, as JSON on the last line
    (the deploy sends a shared record of that kind only where it does not, and runs no tune where it does); where it
    stands, the lines a reusing tune prints come first (the deploy shows them as the tune's); a setting the tune
    would refuse: no kind, why."""
    try:
        s = prepare.prepare(args)
        own = pipeline.reusable(s, args)[0] if args.reuse else None
        # a result shared earlier stands only until its kind's record is newer: the deploy sends that one along
        out = {"kind": record.kind(s.facts, args)["key"], "reuse": own is not None and not own.get("shared")}
    except TuneError as exc:
        own, out = None, {"kind": None, "reuse": False, "why": str(exc)}
    if own is not None and out["reuse"]:
        _say_reused(own, adopted=False)
    print(json.dumps(out))
    return 0


def _print(result: dict[str, Any], s: Setup, args: argparse.Namespace) -> None:
    print(table(result))
    print(f"\nagainst: {result['reference']}; intervals {result['interval']}")
    print(f"tasks: {result['task_source']}; whole figure: {result['mix_how']}")
    print(f"chosen: {result['chosen']} — {result['reason']}")
    if result["runner_up"]:
        print(f"runner-up: {result['runner_up']}" + (f" ({result['paired']})" if result.get("paired") else ""))
    for line in result.get("left_out") or ():
        print(f"  left out: {line}")
    for line in result.get("types_paired") or ():
        print(f"  held back, then measured: {line}")
    if args.measure_all and result["best_measured"]:
        best = result["best_measured"]
        print(f"best measured: {best['name']} {best['measured']}")
    for wl, arm in result["per_workload"].items():
        print(f"  {wl} would prefer: {arm}")
    if result.get("streams"):
        at = result["streams"]
        print(f"at {at['n']} streams: {at['candidate']} {at['measured']} against plain decoding at {at['n']} streams "
              f"(aggregate tok/s, {at['blocks']} blocks; slots processing at once: {at['streams_in_flight']})")
    for line in result.get("open") or ():
        print(f"  still open: {line}")
    print(f"variables: {json.dumps(result['vars'])}\nresult: {s.work / 'tune.json'} "
          f"({result['elapsed_s']:.0f} s of {args.budget:g} min)")


def run(args: argparse.Namespace) -> int:
    """The tune on its leash (specops.tune.leash): a tune whose deploy is gone stops, says why in one line and exits
    leash.STOPPED, --out untouched."""
    if args.kind_only:
        return _kind_only(args)
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
        s = prepare.prepare(args, meter)
        reused, retuned = _reused(s, args) if args.reuse or args.shared else (False, [])
        if reused:
            return 0
        result, unproven = pipeline.watched(s, args, retuned)
    except TuneError as exc:
        _err(str(exc))
        meter.stopped(str(exc))
        return 2
    s.store.root.mkdir(parents=True, exist_ok=True)
    if result is not None:
        result["unproven"] = unproven or None
        pipeline.keep(s, args, json.dumps(result, indent=1, default=str), unproven)
        _print(result, s, args)
    if unproven:
        print(f"unproven: {unproven}; no choice was made and {args.out or 'no record'} was left as it was")
        meter.stopped(f"unproven: {unproven}")
        return UNPROVEN
    if result is not None:
        meter.done(f"chose {result['chosen']} in {result['elapsed_s']:.0f} s")
    return 0
