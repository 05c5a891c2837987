#!/usr/bin/env python3
"""Lab equipment (not shipped): the GPU tune's tables from what ``scripts/gpu/run-tune.sh`` brought back.

    python3 scripts/gpu/tune_report.py --run qwen2.5-14b=DIR --run qwen2.5-32b=DIR > tables.md

DIR is a tune's work dir (``tune.json``, ``measure-assets/results.json``). Per target: every candidate's prediction
and side-by-side measurement (requests, mean accepted length, |measured / predicted - 1|, whether the overhead fit
saw that draft length), the A/A check, the tune's choice against the best measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def _named(value: str) -> tuple[str, Path]:
    name, _, path = value.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"{value!r}: want NAME=DIR")
    return name, Path(path)


def _fmt_iv(sp: dict[str, Any] | None) -> str:
    if not sp:
        return "—"
    if sp.get("low") is None:
        return f"{sp['estimate']:.3f}× (n={sp.get('n')})"
    return f"{sp['estimate']:.3f}× [{sp['low']:.3f}, {sp['high']:.3f}]"


def _load(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tune's work dir, or its ``tune.json`` alone (then the measured intervals come from it, no A/A)."""
    tune = json.loads((run if run.is_file() else run / "tune.json").read_text())
    res_path = run / "measure-assets" / "results.json"
    results = json.loads(res_path.read_text()) if res_path.exists() else {}
    return tune, results


def _fitted(tune: dict[str, Any]) -> set[str]:
    """The draft lengths whose probes fed the overhead fit (the longest and the shortest)."""
    return {n for n in tune.get("probes", {}) if n.startswith("exact-n") and n[len("exact-n"):].isdigit()}


def target_section(name: str, run: Path) -> tuple[str, list[float], dict[str, Any]]:
    tune, results = _load(run)
    summary = results.get("summary", {})
    fitted = _fitted(tune)
    lines = [f"### {name}", "",
             "| candidate | predicted | measured vs plain (95% CI) | requests | mean acceptance length | "
             "measured ÷ predicted − 1 | fit saw it | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | :---: | --- |"]
    errors: list[float] = []
    held: list[float] = []
    for c in tune["candidates"]:
        aw = (summary.get(c["name"]) or {}).get("all") or {}
        if not aw and c.get("measured_interval"):  # no bench results: the tune's own record
            aw = {"speedup": c["measured_interval"], "requests": c["measured_interval"].get("n")}
        sp = aw.get("speedup")
        err = None
        if sp and c.get("predicted"):
            err = sp["estimate"] / c["predicted"] - 1
            errors.append(err)
            if c["name"] not in fitted:
                held.append(err)
        mal = aw.get("mean_accept_len")
        lines.append(
            f"| {c['name']} | {c['predicted']:.3f}× | {_fmt_iv(sp)} | {aw.get('requests', '—')} | "
            f"{'—' if mal is None else f'{mal:.2f}'} | {'—' if err is None else f'{err:+.1%}'} | "
            f"{'yes' if c['name'] in fitted else 'no'} | {c['verdict']} |"
            if c.get("predicted") is not None
            else f"| {c['name']} | — | {_fmt_iv(sp)} | — | — | — | — | {c['verdict']} |")
    aa = (summary.get("baseline-again") or {}).get("all") or {}
    plain = (summary.get("exact-baseline") or {}).get("all") or {}
    best = tune.get("best_measured") or {}
    chosen = tune["chosen"]
    chosen_sp = ((summary.get(chosen) or {}).get("all") or {}).get("speedup") or next(
        (c.get("measured_interval") for c in tune["candidates"] if c["name"] == chosen), None)
    lines += ["",
              f"- Plain decoding (exact-baseline): {plain.get('decode_tps', 0):.1f} tok/s over "
              f"{plain.get('requests', 0)} requests; A/A (baseline-again vs baseline): {_fmt_iv(aa.get('speedup'))} "
              f"over {aa.get('requests', 0)} requests.",
              f"- **Chosen: {chosen}** ({_fmt_iv(chosen_sp) if chosen_sp else 'plain decoding, 1.000×'}); "
              f"best measured: {best.get('name', '—')} ({best.get('measured', '—')}). {tune['reason']}"]
    if best and chosen_sp:
        lines.append(f"- Chosen ÷ best measured: {chosen_sp['estimate'] / best['speedup']['estimate']:.3f}.")
    elif best:
        lines.append(f"- Plain chosen; the best measured candidate read {best['speedup']['estimate']:.3f}×.")
    if held:
        lines.append(f"- Prediction on draft lengths the overhead fit did not see: median |error| "
                     f"{statistics.median(abs(e) for e in held):.1%}, worst {max(held, key=abs):+.1%} "
                     f"({len(held)} arms).")
    lines.append(f"- Phases (s): {json.dumps(tune.get('phases_s'))}; elapsed {tune.get('elapsed_s')} s of "
                 f"{tune.get('budget_s')} s; plain drift between probes "
                 f"{'—' if tune.get('plain_drift') is None else format(tune['plain_drift'], '+.1%')}; "
                 f"overheads {json.dumps(tune.get('overheads'))}.")
    for o in tune.get("open", []):
        lines.append(f"- Still open: {o}")
    return "\n".join(lines) + "\n", errors, tune


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=_named, action="append", required=True, help="NAME=tune work dir")
    a = p.parse_args()
    every: list[float] = []
    for name, run in a.run:
        text, errors, _tune = target_section(name, run)
        every += errors
        print(text)
    if every:
        med = statistics.median(abs(e) for e in every)
        worst = max(every, key=abs)
        print(f"All measured candidates: median |measured ÷ predicted − 1| {med:.1%}, worst {worst:+.1%} "
              f"({len(every)} arms).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
