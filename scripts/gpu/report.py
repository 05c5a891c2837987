#!/usr/bin/env python3
"""Lab equipment (not shipped): the raw JSON of a GPU run (scripts/gpu/run.sh, scripts/gpu/measure.py) as a report.

Reads DATA (``reports/gpu-h100``): gpu.csv, build-info.json, run.log, ceiling-*.json, serve-*.json, vram.json,
fit-check.json (when someone has written it), pair-acceptance-cpu*.json; the CPU host's c(k) from
``reports/bench/results.json``. Writes the markdown report and two plots into DATA:

    python scripts/gpu/report.py [--data reports/gpu-h100] [--out reports/gpu-h100.md]

Every number in the report comes from those files; prose goes where the report says ``<!-- NOTES -->``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shlex
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
from specops.bench import ceiling as ceil_mod  # noqa: E402

KS = tuple(range(1, 18))
PLOTS = ("ck_cpu_vs_gpu.png", "speedup_predicted_vs_measured.png")
PREFERRED_NUMERICS = "fa=on,ctv=q8_0"
DASH = "—"
KIND_MARKERS = {"A/A": "s", "self": "D", "real-pair": "o", "upper": "^", "natural": "v"}
KIND_LABELS = {"A/A": "A/A (plain vs plain)", "self": "self (draft = target)", "real-pair": "synth=real-pair",
               "upper": "synth=1 (upper bound)", "natural": "natural (random draft)"}


# ---------------------------------------------------------------- reading
def note(msg: str) -> None:
    print(f"report: {msg}", flush=True)


def load(path: Path) -> Any:
    """The file's JSON, or None (said) when it is missing or unreadable."""
    if not path.exists():
        note(f"{path}: missing")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        note(f"{path}: unreadable ({exc})")
        return None


def int_keys(d: Mapping[Any, Any] | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, v in (d or {}).items():
        try:
            out[int(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return dict(sorted(out.items()))


def size_of(tname: str) -> float:
    m = re.search(r"(\d+(?:\.\d+)?)b$", tname)
    return float(m.group(1)) if m else math.inf


def label(tname: str) -> str:
    m = re.search(r"(\d+(?:\.\d+)?)b$", tname)
    return f"{m.group(1)}B" if m else tname


def repo_rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def fnum(x: Any, digits: int = 2, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x:.{digits}f}{suffix}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str] | None = None) -> list[str]:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


@dataclass
class Arm:
    name: str
    data: dict[str, Any]

    @property
    def ok(self) -> bool:
        return "error" not in self.data

    @property
    def kind(self) -> str:
        n = self.name
        if n.startswith("A/A"):
            return "A/A"
        if n.startswith("self"):
            return "self"
        if "synth=real-pair" in n:
            return "real-pair"
        if "synth=1" in n:
            return "upper"
        if "natural" in n:
            return "natural"
        return "other"

    @property
    def n_max(self) -> int | None:
        m = re.search(r"-n(\d+)", self.name)
        return int(m.group(1)) if m else None

    @property
    def counters(self) -> dict[str, Any]:
        return self.data.get("counters") or {}

    @property
    def acceptance(self) -> float | None:
        c = self.counters
        return c["accepted"] / c["drafted"] if c.get("drafted") else None

    @property
    def mean_len(self) -> float | None:
        c = self.counters
        return 1 + c["accepted"] / c["drafts"] if c.get("drafts") else None

    @property
    def speedup(self) -> float | None:
        return self.data.get("speedup_geomean")

    @property
    def predicted(self) -> float | None:
        p = self.data.get("predicted") or {}
        return p.get("predicted")

    @property
    def ratio(self) -> float | None:
        s, p = self.speedup, self.predicted
        return s / p if s and p else None

    @property
    def identity_meaningful(self) -> bool:
        return self.kind in ("A/A", "self", "natural")


@dataclass
class Target:
    name: str
    ceiling: dict[str, Any] | None
    serve: dict[str, Any] | None
    arms: list[Arm] = field(default_factory=list)

    @property
    def label(self) -> str:
        return label(self.name)

    @property
    def numerics(self) -> str | None:
        return ((self.ceiling or {}).get("summary") or {}).get("numerics")

    @property
    def c(self) -> dict[int, float]:
        summ = (self.ceiling or {}).get("summary") or {}
        if summ.get("c"):
            return int_keys(summ["c"])
        tgt = (self.ceiling or {}).get("target") or {}
        num = PREFERRED_NUMERICS if PREFERRED_NUMERICS in tgt else "default"
        return int_keys((tgt.get(num) or {}).get("relative"))

    @property
    def r(self) -> float | None:
        return ((self.ceiling or {}).get("summary") or {}).get("r")

    def step_s(self, numerics: str) -> float | None:
        t = ((self.ceiling or {}).get("target") or {}).get(numerics) or {}
        return int_keys(t.get("batch_s")).get(1)

    def ok_arms(self) -> list[Arm]:
        return [a for a in self.arms if a.ok]

    def arm(self, kind: str, n: int | None) -> Arm | None:
        return next((a for a in self.ok_arms() if a.kind == kind and a.n_max == n), None)

    @property
    def plain_median(self) -> float | None:
        xs = [a.data["plain_tps_median"] for a in self.ok_arms() if a.data.get("plain_tps_median")]
        return statistics.median(xs) if xs else None

    def best_real_pair(self) -> Arm | None:
        arms = [a for a in self.ok_arms() if a.kind == "real-pair" and a.speedup]
        return max(arms, key=lambda a: a.speedup or 0.0) if arms else None


def load_targets(data: Path) -> list[Target]:
    names = {p.name[len("ceiling-"):-len(".json")] for p in data.glob("ceiling-*.json")}
    names |= {p.name[len("serve-"):-len(".json")] for p in data.glob("serve-*.json")}
    targets = []
    for name in sorted(names, key=size_of):
        ceil = load(data / f"ceiling-{name}.json")
        serve = load(data / f"serve-{name}.json")
        t = Target(name, ceil, serve)
        for arm, entry in ((serve or {}).get("arms") or {}).items():
            t.arms.append(Arm(arm, entry if isinstance(entry, dict) else {"error": repr(entry)}))
        bad = [a.name for a in t.arms if not a.ok]
        note(f"{name}: ceiling {'yes' if ceil else 'no'} (numerics {t.numerics}, r {fnum(t.r, 3)}), "
             f"{len(t.arms)} arms{f', failed: {bad}' if bad else ''}")
        targets.append(t)
    return targets


@dataclass
class CpuCeiling:
    source: Path
    curves: dict[str, dict[int, float]]  # numerics -> c(k)
    steps: dict[str, float]  # numerics -> one-token step (s)
    chosen: str | None
    r: float | None


def load_cpu(path: Path) -> CpuCeiling | None:
    res = load(path)
    c = (res or {}).get("ceiling")
    if not isinstance(c, dict):
        note(f"{path}: no 'ceiling' (keys {sorted((res or {}).keys())})")
        return None
    tgt = c.get("target") or {}
    curves = {num: int_keys((v or {}).get("relative")) for num, v in tgt.items()}
    steps = {num: int_keys((v or {}).get("batch_s")).get(1, math.nan) for num, v in tgt.items()}
    for num, rel in curves.items():
        note(f"CPU ceiling {num}: k = {list(rel)}")
    # the preferred numerics when it was measured past a few k (the bench prunes), else the default
    chosen = PREFERRED_NUMERICS if len(curves.get(PREFERRED_NUMERICS, {})) >= 5 else (
        "default" if "default" in curves else next(iter(curves), None))
    if chosen != PREFERRED_NUMERICS and PREFERRED_NUMERICS in curves:
        note(f"CPU ceiling: {PREFERRED_NUMERICS} has k = {list(curves[PREFERRED_NUMERICS])} only; using {chosen}")
    drafts = list((c.get("draft_step_s") or {}).keys())
    r = ceil_mod.draft_cost_ratio(c, drafts[0], chosen) if drafts and chosen else None
    note(f"CPU ceiling: draft_step_s {c.get('draft_step_s')}, r ({chosen}) = {fnum(r, 3)}")
    return CpuCeiling(path, curves, steps, chosen, r)


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        note(f"{path}: missing")
        return []
    with path.open() as f:
        rows = csv.DictReader(f, skipinitialspace=True)
        return [{k.strip(): (v or "").strip() for k, v in row.items()} for row in rows]


# ---------------------------------------------------------------- plots
def plot_ck(targets: list[Target], cpu: CpuCeiling | None, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for t in targets:
        c = {k: v for k, v in t.c.items() if k in KS}
        if c:
            ax.plot(list(c), list(c.values()), marker="o", ms=3, label=f"H100 {t.label} ({t.numerics})")
    if cpu:
        for num, rel in cpu.curves.items():
            c = {k: v for k, v in rel.items() if k in KS}
            if len(c) >= 2:
                main = num == cpu.chosen
                ax.plot(list(c), list(c.values()), marker="s", ms=4 if main else 6, color="black" if main else "grey",
                        ls="-" if main else ":", zorder=3 if main else 2, label=f"CPU 1.5B ({num})")
    ax.plot(KS, KS, color="grey", lw=0.8, ls="--", label="c(k) = k (no batching gain)")
    ax.set_xlabel("batch k (tokens verified in one target step)")
    ax.set_ylabel("c(k) = time(batch k) / time(batch 1)")
    ax.set_xticks(KS)
    top = max([v for t in targets for k, v in t.c.items() if k in KS]
              + [v for rel in (cpu.curves.values() if cpu else []) for k, v in rel.items() if k in KS] + [2.0])
    ax.set_ylim(0, top * 1.08)
    ax.set_title("Verification batch cost: H100 (synthetic Qwen2.5) vs the CPU host (real 1.5B)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_pred(targets: list[Target], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    xs: list[float] = []
    for i, t in enumerate(targets):
        for a in t.ok_arms():
            if a.speedup is None or a.predicted is None:
                continue
            ax.scatter(a.predicted, a.speedup, color=colours[i % len(colours)],
                       marker=KIND_MARKERS.get(a.kind, "x"), s=40, edgecolor="black", lw=0.4)
            xs += [a.predicted, a.speedup]
    lo, hi = (min(xs) / 1.3, max(xs) * 1.3) if xs else (0.05, 5.0)
    ax.plot([lo, hi], [lo, hi], color="grey", ls="--", lw=1)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ticks = [x for x in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if lo <= x <= hi]
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("predicted speedup (ceiling model: llama-bench c(k), r and the arm's counters)")
    ax.set_ylabel("measured speedup (geomean of paired requests)")
    ax.set_title("H100: predicted vs measured speedup per arm (log-log; dashed: y = x)")
    handles = [plt.Line2D([], [], color=colours[i % len(colours)], marker="o", ls="", label=f"target {t.label}")
               for i, t in enumerate(targets)]
    handles += [plt.Line2D([], [], color="white", markeredgecolor="black", marker=m, ls="", label=KIND_LABELS[k])
                for k, m in KIND_MARKERS.items()]
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- sections
def synth_rates(argv: str) -> list[float]:
    m = re.search(r"--spec-synth-rates\s+(\S+)", argv or "")
    return [float(x) for x in m.group(1).split(",")] if m else []


def run_log_facts(text: str) -> dict[str, str]:
    facts: dict[str, str] = {}
    if m := re.search(r"host: (\d+) cpus, (\d+) GiB", text):
        facts["host"] = f"{m.group(1)} CPUs, {m.group(2)} GiB RAM"
    if m := re.search(r"Cuda compilation tools, release ([^\n]+)", text):
        facts["cuda"] = m.group(1).strip()
    stamps = re.findall(r"^\[(\d\d):(\d\d):(\d\d)\]", text, re.M)
    if len(stamps) >= 2:
        secs = [int(h) * 3600 + int(m_) * 60 + int(s) for h, m_, s in stamps]
        span = (secs[-1] - secs[0]) % 86400
        facts["span"] = f"{span // 60} min {span % 60} s ({':'.join(stamps[0])} to {':'.join(stamps[-1])})"
    facts["done"] = "yes" if "ALL DONE" in text else "no"
    return facts


def section_title(data: Path, info: dict[str, Any] | None, log_text: str) -> list[str]:
    out = ["# CUDA on an NVIDIA H100: what speculation pays", ""]
    gpus = read_csv(data / "gpu.csv")
    facts = run_log_facts(log_text)
    for g in gpus:
        vals = list(g.values())
        out.append(f"**Machine:** {vals[0]}, {vals[1] if len(vals) > 1 else '?'} memory, driver "
                   f"{vals[2] if len(vals) > 2 else '?'}, max SM clock {vals[3] if len(vals) > 3 else '?'}"
                   + (f"; host {facts['host']}" if "host" in facts else "") + " (gpu.csv, run.log).  ")
    if info:
        opts = info.get("cmake_options") or {}
        total = (info.get("configure_s") or 0) + (info.get("compile_s") or 0)
        cuda = f"CUDA {facts['cuda']}" if "cuda" in facts else f"nvcc {info.get('nvcc', '?')}"
        out.append(f"**llama.cpp:** commit `{info.get('commit')}` (build `{info.get('build_id')}`), "
                   f"{cuda}, {info.get('compiler', '?')}.  ")
        out.append(f"**Build:** {fnum(total, 1)} s (configure {fnum(info.get('configure_s'), 1)} s + compile "
                   f"{fnum(info.get('compile_s'), 1)} s), targets {', '.join(info.get('targets') or [])}, "
                   f"CUDA archs {opts.get('CMAKE_CUDA_ARCHITECTURES', '?')}, "
                   f"GGML_CUDA_FA_QUANTS {opts.get('GGML_CUDA_FA_QUANTS', 'not set (llama.cpp default pairs)')}.  ")
    if "span" in facts:
        out.append(f"**Run:** {facts['span']} from start to {'ALL DONE' if facts['done'] == 'yes' else 'last line'}"
                   f" (run.log).  ")
    out += ["", "Targets are synthetic GGUFs (random weights, the exact Qwen2.5 shapes, Q4_K_M-like quantization, "
            "`scripts/gpu/synth_gguf.py`); the draft is the synthetic 0.5B. Speed does not depend on the weights, "
            "acceptance does: `synth=real-pair` arms impose the real Qwen2.5-Coder 1.5B+0.5B pair's measured "
            "per-position acceptance (`--spec-synth-rates`), so their speedup is the real pair's predicted speedup "
            "on this GPU; `synth=1` accepts every drafted token (upper bound, the real draft's cost); `natural` "
            "drafts with the random 0.5B and is never right (lower bound). Generated text is only meaningful for "
            "A/A, self and natural arms.", ""]
    return out


def section_headline(targets: list[Target]) -> list[str]:
    rows = []
    for t in targets:
        best = t.best_real_pair()
        up = t.arm("upper", best.n_max) if best else None
        c = t.c
        rows.append([t.label, fnum(t.plain_median, 0),
                     f"{fnum(best.speedup)}× (n{best.n_max})" if best else DASH,
                     f"{fnum(up.speedup)}×" if up else DASH, fnum(t.r, 3),
                     *(fnum(c.get(k)) for k in (2, 5, 9, 17))])
    out = ["## Headline", ""]
    out += table(["target", "plain decode tok/s", "best real-pair speedup (draft length)",
                  "upper bound (synth=1) at that length", "r", "c(2)", "c(5)", "c(9)", "c(17)"], rows)
    out += ["", "Plain tok/s: median over the arms' plain medians (the plain server, paired with each arm). "
            "Speedups: geometric mean over the arm's paired requests. r = draft step / target step (llama-bench); "
            "c(k) = batch-k / batch-1 time of the target (llama-bench, depth 256, numerics "
            f"{', '.join(sorted({t.numerics or '?' for t in targets}))}).", "", "<!-- NOTES -->", ""]
    return out


def section_ck(targets: list[Target], cpu: CpuCeiling | None, plot: str) -> list[str]:
    cpu_nums = list(cpu.curves) if cpu else []
    if cpu and cpu.chosen in cpu_nums:
        cpu_nums.remove(cpu.chosen)
        cpu_nums.insert(0, cpu.chosen)
    header = ["k", *(f"H100 {t.label}" for t in targets), *(f"CPU 1.5B ({n})" for n in cpu_nums)]
    rows = [[str(k), *(fnum(t.c.get(k)) for t in targets), *(fnum(cpu.curves[n].get(k)) for n in cpu_nums)]
            for k in KS] if cpu else [[str(k), *(fnum(t.c.get(k)) for t in targets)] for k in KS]
    steps = [f"H100 {t.label}: {fnum((t.step_s(t.numerics or 'default') or math.nan) * 1e3)} ms" for t in targets]
    steps += [f"CPU ({n}): {fnum(cpu.steps.get(n, math.nan) * 1e3, 1)} ms" for n in cpu_nums] if cpu else []
    rs = [f"H100 {t.label} {fnum(t.r, 3)}" for t in targets]
    if cpu:
        rs.append(f"CPU 1.5B {fnum(cpu.r, 3)} ({cpu.chosen})")
    out = ["## c(k): what a verification batch costs, H100 vs the CPU host", ""]
    out += table(header, rows)
    out += ["", f"One-token step (batch 1): {'; '.join(steps)}. r (draft step / target step): {'; '.join(rs)}."]
    if cpu:
        out.append(f"CPU numbers: `{repo_rel(cpu.source)}` "
                   f"(the real Qwen2.5-Coder 1.5B Q4_K_M; {DASH} = k not measured there).")
    out += ["", f"![c(k), H100 vs CPU]({plot})", ""]
    return out


def proof_line(t: Target) -> str:
    for a in t.ok_arms():
        p = a.data.get("proof")
        if isinstance(p, dict) and "error" not in p:
            return (f"Proof (the deploy's probe on `{a.name}`): draft tokens moved +{p.get('draft_tokens_delta')}, "
                    f"accepted +{p.get('accepted_tokens_delta')} in {p.get('drafts_delta')} drafts, /slots "
                    f"speculative: {'yes' if p.get('slots_speculative') else 'no'}, speculating: "
                    f"{'yes' if p.get('speculating') else 'no'}.")
        if isinstance(p, dict):
            return f"Proof on `{a.name}` failed: {str(p.get('error'))[-200:]!r}"
    return "Proof: no arm recorded one."


def section_arms(targets: list[Target]) -> list[str]:
    out = ["## Arms per target", ""]
    for t in targets:
        s = t.serve or {}
        tasks = s.get("tasks") or []
        out += [f"### {t.label}", "",
                f"{len(tasks)} tasks ({', '.join(tasks)}), {s.get('tokens', '?')} tokens each; "
                "plain and speculative servers both loaded, requests alternating.", ""]
        rows = []
        for a in t.arms:
            if not a.ok:
                rows.append([a.name, DASH, DASH, DASH, f"error: {str(a.data['error'])[-80:]!r}", *[DASH] * 5])
                continue
            d = a.data
            ident = f"{d.get('identical')}/{d.get('tasks')}" + ("" if a.identity_meaningful else " (n/a)")
            rng = f"{fnum(a.speedup)} [{fnum(d.get('speedup_min'))}–{fnum(d.get('speedup_max'))}]"
            c = a.counters
            acc = (f"{fnum(a.acceptance)} ({c.get('accepted', 0):.0f}/{c.get('drafted', 0):.0f})"
                   if a.acceptance is not None else DASH)
            rows.append([a.name, str(d.get("tasks")), fnum(d.get("plain_tps_median"), 1),
                         fnum(d.get("spec_tps_median"), 1), rng, acc, fnum(a.mean_len), fnum(a.predicted),
                         fnum(a.ratio), ident])
        out += table(["arm", "tasks", "plain tok/s", "spec tok/s", "speedup geomean [min–max]",
                      "acceptance (accepted/drafted)", "mean acc. length", "predicted", "measured ÷ predicted",
                      "identical"], rows)
        out += ["", proof_line(t), ""]
    out += ["tok/s: medians over the arm's requests. Mean acceptance length = 1 + accepted/drafts. Predicted: "
            "`specops.bench.ceiling.predict` with the arm's counters, the target's c(k), r and the draft's own "
            "c_d(k) (self arms: r = 1). Identical: speculative text equal to the plain server's; (n/a) where the "
            "synthetic acceptance makes the text invalid by design.", ""]
    return out


def section_pred(targets: list[Target], plot: str) -> list[str]:
    ratios = {t.label: [a.ratio for a in t.ok_arms() if a.ratio and a.kind != "A/A"] for t in targets}
    parts = [f"{k} median {fnum(statistics.median(v))} (range {fnum(min(v))}–{fnum(max(v))})"
             for k, v in ratios.items() if v]
    return ["## Predicted vs measured", "", f"![predicted vs measured speedup]({plot})", "",
            f"Measured ÷ predicted over the speculative arms: {'; '.join(parts)}.", "",
            "<!-- NOTES: predicted vs measured -->", ""]


def section_vram(data: Path) -> list[str]:
    out = ["## VRAM", ""]
    check = load(data / "fit-check.json")
    if isinstance(check, list) and check:
        rows = [[str(e.get("name")), fnum(e.get("measured_mib"), 0), fnum(e.get("predicted_mib"), 0),
                 fnum(e.get("error_pct"), 1, " %")] for e in check]
        out += table(["profile", "measured MiB (nvidia-smi)", "predicted MiB (specops fit)", "error"], rows)
        out += ["", "From `fit-check.json`: nvidia-smi's per-process memory of each served profile beside "
                "`specops fit`'s prediction for it.", ""]
        return out
    vram = load(data / "vram.json") or []
    rows = []
    for i, e in enumerate(vram, 1):
        if "error" in e and "measured_mib" not in e:
            rows.append([str(i), str(e.get("name")), DASH, DASH, f"error: {str(e['error'])[-60:]!r}", DASH])
            continue
        rows.append([str(i), str(e.get("name")), str(e.get("ctx_size", DASH)), "yes" if e.get("draft") else "no",
                     fnum(e.get("measured_mib"), 0), fnum(e.get("load_s"), 1)])
    out += table(["#", "profile", "ctx", "draft", "measured MiB (nvidia-smi)", "load s"], rows)
    out += ["", "**Fit check pending:** the `specops fit` predictions recorded in `vram.json` are partly broken "
            "(the draft profiles were refused), so only the measured values are shown; `fit-check.json` (measured "
            "beside predicted) will replace this table.", ""]
    return out


def section_pair(data: Path, targets: list[Target]) -> list[str]:
    main = load(data / "pair-acceptance-cpu.json")
    extra = {p.stem[len("pair-acceptance-cpu-"):]: load(p) for p in sorted(data.glob("pair-acceptance-cpu-*.json"))}
    extra = {k: v for k, v in extra.items() if isinstance(v, dict)}
    used: list[float] = []
    for t in targets:
        for a in t.ok_arms():
            rates = synth_rates(a.data.get("argv", "")) if a.kind == "real-pair" else []
            if len(rates) > len(used):
                used = rates
    out = ["## The real pair's acceptance (measured on the CPU host)", ""]
    if not isinstance(main, dict):
        return [*out, "`pair-acceptance-cpu.json` missing.", ""]
    files = {"all workloads": main, **extra}
    header = ["position"] + [f"{k}: P(accepted)" for k in files] + ["rates given to the GPU run"]
    rows = []
    for i in range(16):
        cells = [str(i + 1)]
        for d in files.values():
            rates = d.get("rates") or []
            measured = int(d.get("measured_positions") or d.get("draft_n_max") or 0)
            cells.append(fnum(rates[i], 3) + ("*" if i >= measured else "") if i < len(rates) else DASH)
        cells.append(fnum(used[i], 4) if i < len(used) else DASH)
        rows.append(cells)
    for key, title in (("acceptance", "acceptance (accepted/drafted)"), ("mean_acceptance_length",
                                                                          "mean acceptance length")):
        rows.append([f"**{title}**", *(fnum(d.get(key), 3) for d in files.values()), ""])
    rows.append(["**drafts / drafted / accepted**",
                 *(" / ".join(f"{(d.get('counters') or {}).get(k, 0):.0f}" for k in ("drafts", "drafted", "accepted"))
                   for d in files.values()), ""])
    rows.append(["**tasks**", *(", ".join(x.get("task", "?") for x in d.get("tasks") or []) for d in files.values()),
                 ""])
    out += table(header, rows)
    out += ["", f"Greedy, `--spec-draft-n-max {main.get('draft_n_max')}`; P(accepted) = the unconditional rate of "
            "position i (per-position accepted counter / drafts); * = extrapolated (past the measured length the "
            "last conditional rate is held). The acceptance of a greedy pair does not depend on the hardware.", ""]
    return out


def section_checks(targets: list[Target], cpu: CpuCeiling | None, data: Path, info: dict[str, Any] | None
                   ) -> list[str]:
    """Things in the data a reader should know before trusting a number (each computed, none hand-written)."""
    items: list[str] = []
    for t in targets:
        aa = next((a for a in t.ok_arms() if a.kind == "A/A"), None)
        if aa:
            items.append(f"{t.label} A/A (plain against plain): {fnum(aa.speedup, 3)}× "
                         f"[{fnum(aa.data.get('speedup_min'))}–{fnum(aa.data.get('speedup_max'))}]: the noise floor "
                         "of one paired comparison.")
        c = t.c
        dips = [k for k in c if k + 1 in c and c[k + 1] < c[k] - 0.02]
        jumps = [k for k in c if k - 1 in c and c[k] - c[k - 1] > 0.3]
        if dips or jumps:
            items.append(f"{t.label} c(k) is not smooth: " + ", ".join(
                [f"c({k + 1}) {fnum(c[k + 1])} < c({k}) {fnum(c[k])}" for k in dips]
                + [f"c({k}) jumps to {fnum(c[k])} from c({k - 1}) {fnum(c[k - 1])}" for k in jumps])
                + " (llama-bench's numbers as measured; the prediction uses them as they are).")
        bad_nat = [a.name.split(" (")[0] for a in t.ok_arms() if a.kind in ("natural", "self")
                   and a.data.get("identical") != a.data.get("tasks")]
        if bad_nat:
            items.append(f"{t.label}: speculative text differed from plain in arms where it should not "
                         f"({', '.join(bad_nat)}): with the random draft never accepted, or the target drafting "
                         "for itself, the text can only differ if the target's output depends on the verification "
                         "batch size.")
        same = {}
        for a in t.ok_arms():
            if a.kind in ("real-pair", "upper"):
                per = {(r.get("draft_n"), r.get("draft_n_accepted")) for r in a.data.get("rows") or []}
                same[a.name] = len(per) == 1
        if same and all(same.values()):
            items.append(f"{t.label}: every synthetic arm drafted and accepted exactly the same counts on every task "
                         "(the synthetic acceptance looks like one fixed draw sequence per request), so each arm is "
                         "one sample of the rates, not an average over tasks.")
        meas = [a for a in t.ok_arms() if a.ratio and a.kind != "A/A"]
        if meas and all((a.ratio or 0) < 0.95 for a in meas):
            items.append(f"{t.label}: every speculative arm measured below its prediction (measured ÷ predicted "
                         f"{fnum(min(a.ratio or 0 for a in meas))}–{fnum(max(a.ratio or 0 for a in meas))}); the model "
                         "prices steps with llama-bench's times only.")
        step = t.step_s(t.numerics or "default")
        if step and t.plain_median:
            items.append(f"{t.label}: plain server {fnum(1e3 / t.plain_median)} ms/token vs llama-bench batch-1 step "
                         f"{fnum(step * 1e3)} ms (depth 256) = {fnum(1 / t.plain_median / step)}×.")
    if info:
        opts = info.get("cmake_options") or {}
        served = [a.data.get("argv", "") for t in targets for a in t.ok_arms()]
        if any("--cache-type-v q8_0" in s and "--flash-attn on" in s for s in served) and \
                "f16-q8_0" not in str(opts.get("GGML_CUDA_FA_QUANTS", "")):
            diffs = [f"{t.label} {fnum((t.step_s(PREFERRED_NUMERICS) or 0) * 1e3)} ms vs "
                     f"{fnum((t.step_s('default') or 0) * 1e3)} ms"
                     for t in targets if t.step_s(PREFERRED_NUMERICS) and t.step_s("default")]
            items.append("This build compiled no FlashAttention kernel for the f16-q8_0 K-V pair (no "
                         "GGML_CUDA_FA_QUANTS in build-info.json) while every server ran `--flash-attn on "
                         "--cache-type-v q8_0`: llama.cpp then converts the KV cache to f16 at every step. Batch-1 "
                         f"step, fa=on,ctv=q8_0 vs default: {'; '.join(diffs)}.")
    vram = load(data / "vram.json") or []
    names = [e.get("name") for e in vram]
    dup = sorted({n for n in names if names.count(n) > 1 and n})
    if dup:
        items.append(f"vram.json holds the same name more than once ({', '.join(dup)}): two arms of one draft length "
                     "were recorded under its first word.")
    pair = load(data / "pair-acceptance-cpu.json") or {}
    used = next((synth_rates(a.data.get("argv", "")) for t in targets for a in t.ok_arms()
                 if a.kind == "real-pair" and a.n_max == 16), [])
    if used and pair.get("rates"):
        match = all(abs(u - r) < 6e-5 for u, r in zip(used, pair["rates"], strict=False))
        items.append(f"The GPU run's --spec-synth-rates {'match' if match else 'DO NOT match'} "
                     "`pair-acceptance-cpu.json`'s rates.")
    ptasks = {x.get("task") for x in pair.get("tasks") or []}
    gtasks = {x for t in targets for x in (t.serve or {}).get("tasks") or []}
    if ptasks and gtasks and not gtasks <= ptasks:
        wl = sorted({x.split("-")[0] for x in ptasks})
        gwl = sorted({x.split("-")[0] for x in gtasks})
        items.append(f"The rates were measured on workloads {', '.join(wl)} ({len(ptasks)} tasks); the GPU arms ran "
                     f"{', '.join(sorted(gtasks))} (workloads {', '.join(gwl)}).")
        for p in sorted(data.glob("pair-acceptance-cpu-*.json")):
            d = load(p) or {}
            dtasks = [x.get("task", "?") for x in d.get("tasks") or []]
            same = [t.label for t in targets if set((t.serve or {}).get("tasks") or []) == set(dtasks)]
            if d.get("acceptance") is not None:
                items.append(f"`{p.name}` (tasks {', '.join(dtasks)}"
                             f"{': the GPU ' + ', '.join(same) + ' arms exactly' if same else ''}): "
                             f"acceptance {fnum(d.get('acceptance'), 3)}, mean length "
                             f"{fnum(d.get('mean_acceptance_length'))} vs {fnum(pair.get('acceptance'), 3)} / "
                             f"{fnum(pair.get('mean_acceptance_length'))} for the rates used.")
    if cpu and cpu.chosen != PREFERRED_NUMERICS and PREFERRED_NUMERICS in cpu.curves:
        items.append(f"The CPU host's {PREFERRED_NUMERICS} curve was measured at k = "
                     f"{', '.join(map(str, cpu.curves[PREFERRED_NUMERICS]))} only (the bench prunes); the CPU "
                     f"comparison uses its {cpu.chosen} curve.")
    return ["## Checks (generated from the data)", "", *(f"- {x}" for x in items), ""]


def run_sh_commands(text: str) -> list[str]:
    """The commands of run.sh that produce results, with their continuation lines joined."""
    launch = [ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#") and "setsid" in ln]
    logical, buf = [], ""
    for ln in text.splitlines():
        if ln.lstrip().startswith("#"):
            continue
        buf += ln.strip() if not buf else " " + ln.strip()
        if buf.endswith("\\"):
            buf = buf[:-1].rstrip()
            continue
        logical.append(buf)
        buf = ""
    starts = ("py ", "common=", "nvidia-smi", "for s in")
    keep = [ln for ln in logical if ln.startswith(starts) or "synth_gguf.py" in ln]
    return launch + keep


def model_of(argv: str) -> str | None:
    m = re.search(r"--model\s+(\S+)", argv or "")
    return m.group(1) if m else None


def section_how(data: Path, targets: list[Target], info: dict[str, Any] | None, out_path: Path) -> list[str]:
    out = ["## How it was made", ""]
    run_sh = REPO / "scripts" / "gpu" / "run.sh"
    if run_sh.exists():
        out += ["`scripts/gpu/run.sh` (run on the GPU machine from the repo root; `$G` = /tmp/g, `$M` = $G/models, "
                "`$REPO` = the checkout); its measuring commands:", "", "```sh", *run_sh_commands(run_sh.read_text()),
                "```", ""]
    if info and info.get("configure_argv"):
        out += ["Configure (`specops build`, from build-info.json):", "", "```sh",
                shlex.join(str(x) for x in info["configure_argv"]), "```", ""]
    bench = [(t.label, k, v) for t in targets for k, v in ((t.ceiling or {}).get("argv") or {}).items()]
    if bench:
        out += ["<details><summary>llama-bench argv (ceiling-*.json)</summary>", "", "```sh"]
        out += [f"# {lab} {k}\n{shlex.join(str(x) for x in v)}" for lab, k, v in bench]
        out += ["```", "</details>", ""]
    out += ["<details><summary>llama-server argv (serve-*.json): the plain server and every arm</summary>", "",
            "```sh"]
    first = targets[0]
    out.append(f"# {first.label} plain\n{(first.serve or {}).get('plain_argv', '?')}")
    out += [f"# {first.label} {a.name}\n{a.data.get('argv', '?')}" for a in first.arms if a.ok]
    same: list[str] = []
    m0 = model_of((first.serve or {}).get("plain_argv", ""))
    ref = {a.name: a.data.get("argv", "") for a in first.arms if a.ok}
    for t in targets[1:]:
        m = model_of((t.serve or {}).get("plain_argv", ""))
        mine = [("plain", (first.serve or {}).get("plain_argv", ""), (t.serve or {}).get("plain_argv", ""))]
        mine += [(a.name, ref.get(a.name), a.data.get("argv", "")) for a in t.arms if a.ok]
        differ = [(n, b) for n, r, b in mine if not (m0 and m and r and r.replace(m0, m) == b)]
        out += [f"# {t.label} {n}\n{b}" for n, b in differ]
        if len(differ) < len(mine):
            same.append(f"{t.label}: the same with `{m0}` replaced by `{m}`"
                        + (f" (except the {len(differ)} listed)" if differ else ""))
    out += ["```", *(f"{x}.  " for x in same), "</details>", ""]
    pair = load(data / "pair-acceptance-cpu.json") or {}
    if pair.get("argv"):
        out += ["The real pair's acceptance (CPU host, `measure.py acceptance`):", "", "```sh", pair["argv"], "```",
                ""]
    rel = os.path.relpath(data, out_path.parent)
    files = sorted(p for p in data.iterdir() if p.is_file() and p.name not in PLOTS)
    out += [f"Raw files in `{rel}/`:", ""]
    out += [f"- [`{p.name}`]({rel}/{p.name}) ({p.stat().st_size:,} bytes)" for p in files]
    out += ["", f"Generated from those files by `python scripts/gpu/report.py --data {repo_rel(data)} --out "
            f"{repo_rel(out_path)}` (plots: {', '.join(f'`{rel}/{x}`' for x in PLOTS)}).", ""]
    return out


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=REPO / "reports" / "gpu-h100")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "gpu-h100.md")
    p.add_argument("--cpu", type=Path, default=REPO / "reports" / "bench" / "results.json",
                   help="the CPU host's bench results (its ceiling.target[...]['relative'])")
    a = p.parse_args(argv)
    data, out_path = a.data.resolve(), a.out.resolve()
    info = load(data / "build-info.json")
    log_text = (data / "run.log").read_text() if (data / "run.log").exists() else ""
    targets = load_targets(data)
    if not targets:
        note(f"no ceiling-*.json or serve-*.json in {data}")
        return 1
    cpu = load_cpu(a.cpu)
    ck_png, pred_png = (data / name for name in PLOTS)
    plot_ck(targets, cpu, ck_png)
    plot_pred(targets, pred_png)
    rel = os.path.relpath(data, out_path.parent)
    lines = [*section_title(data, info, log_text), *section_headline(targets),
             *section_ck(targets, cpu, f"{rel}/{ck_png.name}"), *section_arms(targets),
             *section_pred(targets, f"{rel}/{pred_png.name}"), *section_vram(data), *section_pair(data, targets),
             *section_checks(targets, cpu, data, info), *section_how(data, targets, info, out_path)]
    text = "\n".join(lines).rstrip() + "\n"
    notes_files = (("<!-- NOTES -->", "notes.md"), ("<!-- NOTES: predicted vs measured -->", "notes-predicted.md"))
    for marker, name in notes_files:
        notes = data / name  # the human part of the report, kept beside the data so a regeneration keeps it
        if notes.exists():
            text = text.replace(marker, notes.read_text().strip())
    out_path.write_text(text)
    print(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
