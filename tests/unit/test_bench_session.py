"""The bench as a library (issue 53 item 1): ``specops bench``'s command line is its settings, one table of
defaults; the tune asks the library for the same run its command line used to spell, and takes the results it
returns (no results file read back)."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from specops.bench import session
from specops.bench.settings import DEFAULT_DRAFT, BenchSettings, default_model
from specops.commands import bench as bench_command
from specops.commands import tune as tune_command
from specops.tune import measure

pytestmark = pytest.mark.fast


def _bench_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specops bench")
    bench_command.add_arguments(p)
    return p.parse_args(argv)


def test_the_command_lines_defaults_are_the_librarys():
    given = bench_command.settings(_bench_args([]))
    lib = BenchSettings()
    assert [f.name for f in fields(lib) if getattr(given, f.name) != getattr(lib, f.name)] == ["target", "draft"]
    assert given.draft == default_model(DEFAULT_DRAFT)


def _old_argv(s: SimpleNamespace, args: argparse.Namespace, chosen: list[str], minutes: float,
              plain_s_per_token: float) -> list[str]:
    """What specops tune spelled for specops bench before the library (commands/tune.py's _measure, 2f82a79), with
    the futility-only stopping it measures with since (``--min-tasks 3 --stop-on 'slower,no gain'``; it was
    ``--min-tasks max(4, --limit-per-workload)``, every stop)."""
    argv = ["--target", str(args.target), "--llama-prefix", str(s.prefix), "--arms", ",".join(chosen),
            "--no-ceiling", "--budget", f"{minutes:.2f}", "--limit-per-workload", str(args.limit_per_workload),
            "--min-tasks", "3", "--stop-on", "slower,no gain",
            "--max-tokens", str(args.max_tokens), "--ctx-size", str(args.ctx_size), "--work-dir",
            str(s.work / "measure"), "--fresh", "--report", str(s.work / "measure.md"), "--assets",
            str(s.work / "measure-assets"), "--no-vars", "--rule", args.rule, "--interleave", "slices",
            "--plain", "unit"]
    if plain_s_per_token > 0:
        argv += ["--request-guess", f"{1.5 * args.max_tokens * plain_s_per_token:.2f}"]
    if args.draft:
        argv += ["--draft", str(args.draft)]
    if args.workloads:
        argv += ["--workloads", args.workloads]
    if s.shares:  # the plan follows the shares (issue 61)
        argv += ["--shares", ",".join(f"{w}={v}" for w, v in s.shares.items())]
    for path in args.tasks or ():
        argv += ["--tasks", str(path)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.synth_rates:
        argv += ["--synth-rates", ",".join(map(str, args.synth_rates))]
    if args.quiet:
        argv.append("--quiet")
    return argv


@pytest.mark.parametrize("extra", [
    [],
    ["--draft", "d.gguf", "--threads", "4", "--quiet", "--rule", "fastest", "--synth-rates", "0.9,0.55"],
    ["--workloads", "code, prose", "--tasks", "a.jsonl", "--tasks", "b.jsonl", "--limit-per-workload", "7",
     "--threads", "0"],
])
@pytest.mark.parametrize("shares", [None, {"edit": 0.7, "prose": 0.3}])
@pytest.mark.parametrize(("minutes", "plain"), [(3.14159, 0.0), (0.5, 0.0123)])
def test_the_tune_asks_for_the_run_its_command_line_spelled(tmp_path: Path, extra, minutes, plain, shares):
    p = argparse.ArgumentParser()
    tune_command.add_arguments(p)
    args = p.parse_args(["--target", "t.gguf", *extra])
    s = SimpleNamespace(prefix=tmp_path / "llama", work=tmp_path / "work", shares=shares)
    old = bench_command.settings(_bench_args(_old_argv(s, args, ["exact-ngram-mod", "exact-n4"], minutes, plain)))
    assert measure.settings(s, args, ["exact-ngram-mod", "exact-n4"], minutes, plain) == old  # type: ignore[arg-type]


def test_the_tune_takes_the_results_the_library_returns(tmp_path: Path, monkeypatch):
    """No results.json is read: the measurement's results are the library's return value."""
    asked = []

    def fake(opts, progress=None, say=None, say_choice=True):
        assert say_choice is False  # the tune says its own choice, after its own checks
        asked.append(opts)
        return session.BenchOutcome(0, results={"summary": {}, "blocks": [], "outcome": {"ended": "done"}})

    monkeypatch.setattr(session, "measure", fake)
    p = argparse.ArgumentParser()
    tune_command.add_arguments(p)
    args = p.parse_args(["--target", "t.gguf"])
    leash = SimpleNamespace(measured=lambda rc: None)
    s = SimpleNamespace(prefix=tmp_path, work=tmp_path / "work", left=lambda: 600.0, shares=None,
                        meter=SimpleNamespace(update=lambda *a: None, leash=leash))
    out, said = measure.measure(s, args, ["exact-ngram-mod"])  # type: ignore[arg-type]
    assert out == {"summary": {}, "blocks": [], "outcome": {"ended": "done"}} and not (tmp_path / "work").exists()
    assert said == []
    assert asked[0].arms == "exact-ngram-mod" and asked[0].assets == tmp_path / "work" / "measure-assets"
    monkeypatch.setattr(session, "measure",
                        lambda opts, progress=None, say=None, say_choice=True: session.BenchOutcome(1, "broke"))
    assert measure.measure(s, args, ["exact-ngram-mod"]) == (  # type: ignore[arg-type]
        None, [f"the side-by-side measurement ended with exit 1: see {tmp_path / 'work' / 'measure'}"])
