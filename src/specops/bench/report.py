"""The bench report: markdown for people, JSON for machines, PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import math
import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specops.bench import ceiling as ceil
from specops.bench.analysis import ALL, ArmWorkload
from specops.bench.arms import BASELINE
from specops.bench.recommend import Pick


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    os_name = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_bytes": mem,
        "os": os_name or platform.platform(),
        "kernel": platform.release(),
        "gpu": "none",
    }


def _f(v: float | None, fmt: str = ".1f", none: str = "–") -> str:
    return none if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _sp(aw: ArmWorkload | None, attr: str = "speedup") -> str:
    iv = getattr(aw, attr, None) if aw else None
    if iv is None:
        return "–"
    if not iv.has_ci:
        return f"{iv.estimate:.2f}×"
    mark = " ▲" if iv.low > 1.0 else (" ▼" if iv.high < 1.0 else "")
    return f"{iv.estimate:.2f}× [{iv.low:.2f}–{iv.high:.2f}]{mark}"


def _ident(aw: ArmWorkload) -> str:
    if not aw.compared:
        return "–"
    return f"{aw.identical}/{aw.compared}"


# ---- plots -----------------------------------------------------------------------------------
def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workloads: list[str],
    ceiling: Mapping[str, Any] | None,
    out_dir: Path,
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []

    # 1. speedup vs draft length, per workload, for the draft-length families
    fams = {
        "draft model": lambda d: (
            d.get("family") == "draft" and not d["profile"].get("draft_p_min") and not d["profile"].get("draft_n_min")
        ),
        "exact profile": lambda d: d.get("family") == "exact" and d["profile"].get("spec_type") != "none",
        "re-quantised draft": lambda d: d.get("family") == "quant",
    }
    fig, axes = plt.subplots(1, len(workloads) + 1, figsize=(4.2 * (len(workloads) + 1), 3.8), sharey=True)
    for ax, wl in zip(list(getattr(axes, "flat", [axes])), [*workloads, ALL], strict=False):
        for label, sel in fams.items():
            pts = []
            for name, d in arm_defs.items():
                n = d.get("profile", {}).get("draft_n_max")
                aw = results.get(name, {}).get(wl)
                if n is not None and sel(d) and aw and aw.speedup:
                    pts.append((int(n), aw.speedup.estimate, aw.speedup.low, aw.speedup.high, name))
            pts.sort()
            if pts:
                xs = [p[0] for p in pts]
                ys = [p[1] for p in pts]
                lo = [p[1] - (p[2] if p[2] is not None else p[1]) for p in pts]
                hi = [(p[3] if p[3] is not None else p[1]) - p[1] for p in pts]
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
        for name, d in arm_defs.items():
            aw = results.get(name, {}).get(wl)
            if d.get("family") == "ngram" and aw and aw.speedup:
                ax.axhline(aw.speedup.estimate, ls=":", lw=1, color="grey")
                ax.annotate(name, (0.5, aw.speedup.estimate), fontsize=6, color="grey")
        ax.axhline(1.0, color="black", lw=1)
        ax.set_title(wl)
        ax.set_xlabel("draft n-max")
        ax.set_xscale("log", base=2)
    first = next(iter(getattr(axes, "flat", [axes])))
    first.set_ylabel("speedup vs baseline (decode tok/s)")
    if first.get_legend_handles_labels()[0]:
        first.legend(fontsize=7)
    fig.suptitle("Speedup vs draft length (95% CI; dotted: n-gram arms)")
    made.append(_save(fig, out_dir / "speedup_vs_draft_length.png"))

    # 2. per-position acceptance (unconditional: accepted at position i / drafts)
    fig, ax = plt.subplots(figsize=(7, 4))
    any_line = False
    for name in arm_defs:
        aw = results.get(name, {}).get(ALL)
        if not aw or not aw.drafts or not aw.per_pos:
            continue
        pos = sorted(aw.per_pos, key=int)
        ax.plot([int(x) + 1 for x in pos], [aw.per_pos[x] / aw.drafts for x in pos], marker=".", label=name)
        any_line = True
    ax.set_xlabel("draft position")
    ax.set_ylabel("share of drafts accepted up to here")
    ax.set_ylim(0, 1.05)
    ax.set_title("Per-position acceptance (all tasks)")
    if any_line:
        ax.legend(fontsize=6, ncol=2)
    made.append(_save(fig, out_dir / "acceptance_per_position.png"))

    # 3. the hardware ceiling
    if ceiling and ceiling.get("target"):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for num, t in ceiling["target"].items():
            rel = {int(k): float(v) for k, v in t["relative"].items()}
            ks = sorted(rel)
            a1.plot(ks, [rel[k] for k in ks], marker=".", label=num)
            kk = [k for k in range(1, max(ks))]
            a2.plot(kk, [ceil.perfect_ceiling(rel, k) for k in kk], marker=".", label=f"{num}, free draft")
            r = ceil.draft_cost_ratio(ceiling, "draft", num)
            if math.isfinite(r) and num == "default":
                a2.plot(
                    kk,
                    [ceil.perfect_ceiling(rel, k, r) for k in kk],
                    ls="--",
                    label=f"{num}, draft cost r={r:.2f}",
                )
        a1.plot(ks, ks, color="grey", ls=":", label="linear (no batching gain)")
        a1.axhline(1, color="black", lw=1)
        a1.set_xlabel("tokens verified in one batch (k)")
        a1.set_ylabel("cost in decode steps c(k)")
        a1.legend(fontsize=6)
        a2.axhline(1, color="black", lw=1)
        a2.set_xlabel("draft length, all accepted")
        a2.set_ylabel("speedup ceiling")
        a2.legend(fontsize=6)
        fig.suptitle("Hardware ceiling (llama-bench, target model)")
        made.append(_save(fig, out_dir / "hardware_ceiling.png"))
    return made


# ---- markdown --------------------------------------------------------------------------------
def findings(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    ceiling: Mapping[str, Any] | None,
) -> list[str]:
    """Plain statements computed from the numbers (no hand-written conclusions)."""
    out: list[str] = []
    row = lambda arm: results.get(arm, {}).get(ALL)  # noqa: E731
    again = row("baseline-again")
    base = row(BASELINE)
    if again and again.compared:
        out.append(
            f"Baseline is {'deterministic' if again.all_identical else 'NOT deterministic'}: "
            f"a second baseline server reproduced {again.identical}/{again.compared} outputs byte for byte"
            + (
                f" (and repetitions of the baseline {base.identical}/{base.compared})."
                if base and base.compared
                else "."
            )
        )
    fastest = max(
        ((a, r) for a, r in ((a, row(a)) for a in arm_defs if a != BASELINE) if r and r.speedup),
        key=lambda ar: ar[1].speedup.estimate,  # type: ignore[union-attr]
        default=None,
    )
    if fastest:
        a, r = fastest
        out.append(
            f"Fastest arm on all tasks regardless of output: `{a}` at {r.speedup.fmt()}; "  # type: ignore[union-attr]
            f"identical output on {r.identical}/{r.compared}."
        )
    fam: dict[str, list[ArmWorkload]] = {}
    for a, d in arm_defs.items():
        r = row(a)
        if r and r.compared and d.get("profile", {}).get("spec_type") != "none" and d.get("kind") == "server":
            fam.setdefault(d.get("family", "?"), []).append(r)
    for f, rows in fam.items():
        ident = sum(r.identical for r in rows)
        comp = sum(r.compared for r in rows)
        out.append(
            f"Identity, {f} arms: {ident}/{comp} outputs identical to their reference "
            f"({', '.join(f'{r.arm} {r.identical}/{r.compared}' for r in rows)})."
        )
    for ref in ("exact-baseline", "exact-nr-baseline"):
        r = row(ref)
        if r and r.speedup:
            out.append(f"Cost of the `{ref}` numerics without speculation: {r.speedup.fmt()} of baseline speed.")
    if ceiling and ceiling.get("target"):
        rel = ceil.relative_for(ceiling, "default")
        r_cost = ceil.draft_cost_ratio(ceiling, "draft")
        if rel:
            best = max(range(1, max(rel)), key=lambda k: ceil.perfect_ceiling(rel, k))
            out.append(
                f"Hardware ceiling: verifying k tokens costs c(2)={rel.get(2, float('nan')):.2f}, "
                f"c(4)={ceil.cost_at(rel, 4):.2f}, c(8)={ceil.cost_at(rel, 8):.2f} decode steps; with every "
                f"drafted token accepted and a free draft the best is {ceil.perfect_ceiling(rel, best):.2f}× "
                f"(draft length {best})"
                + (
                    f"; with the Q4_K_M draft at {r_cost:.2f} of a target step, "
                    f"{max(ceil.perfect_ceiling(rel, k, r_cost) for k in range(1, max(rel))):.2f}× at best."
                    if math.isfinite(r_cost)
                    else "."
                )
            )
    cli, srv = row("cli-draft-n8"), row("draft-n8")
    if cli and srv:
        out.append(
            f"Cross-check with llama-speculative (draft n-max 8): {_f(cli.decode_tps)} tok/s, acceptance "
            f"{_f(cli.acceptance, '.2f')}, vs llama-server draft-n8 {_f(srv.decode_tps)} tok/s, acceptance "
            f"{_f(srv.acceptance, '.2f')}."
        )
    return out


def markdown(
    plan: Mapping[str, Any],
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workloads: list[str],
    picks: Mapping[str, Pick],
    ceiling: Mapping[str, Any] | None,
    goals: list[tuple[str, str]],
    images: list[str],
    rule: str,
    vars_text: str | None,
    raw_json: str,
) -> str:
    m = plan.get("machine", {})
    L: list[str] = []
    w = L.append
    deploy = picks.get(ALL)
    w("# Speculative decoding benchmark\n")
    w(
        f"Machine **{m.get('hostname')}** — {m.get('cpu')}, {m.get('cores')} cores, "
        f"{(m.get('mem_bytes') or 0) / 2**30:.0f} GiB RAM, {m.get('os')}, no GPU. "
        f"Run {plan.get('started_at', '?')}{' (limited smoke run)' if plan.get('limited') else ''}.\n"
    )
    if plan.get("sample_every"):
        counts = plan.get("workload_counts", {})
        w(
            f"Tasks: a systematic 1-in-{plan['sample_every']} sample of the task set (tasks 1, "
            f"{1 + plan['sample_every']}, {1 + 2 * plan['sample_every']}, ... of each workload: "
            + ", ".join(f"{n} {wl}" for wl, n in counts.items())
            + "), chosen by position, not by result, to fit the run into the time this machine allows.\n"
        )
    w("## Verdict\n")
    if deploy is not None:
        if deploy.arm == BASELINE:
            w(
                f"**Run the baseline (no speculative decoding) in production.** {deploy.reason}. "
                "Speculation only pays when verifying a batch of drafted tokens costs little more than one "
                "decode step and the draft is cheap and usually right; the ceiling and acceptance tables "
                "below show which of these fails on this host.\n"
            )
        else:
            d = arm_defs.get(deploy.arm, {})
            w(f"**Run `{deploy.arm}` in production** ({d.get('description', '')}). {deploy.reason}.\n")
    w("| workload | recommended | speedup [95% CI] | why |")
    w("| --- | --- | --- | --- |")
    for wl in [*workloads, ALL]:
        pk = picks.get(wl)
        if pk:
            w(f"| {wl} | `{pk.arm}` | {_sp(pk.speedup)} | {pk.reason} |")
    w("")
    if goals:
        w("Goals of the ticket, checked on this run:\n")
        for g, verdict in goals:
            w(f"- {g}: {verdict}")
        w("")
    if vars_text:
        w(f"Inventory variables written for the service role (rule `{rule}`):\n")
        w("```yaml\n" + vars_text.strip() + "\n```\n")

    ld = plan.get("load_summary")
    if ld:
        w(
            f"Machine load (1-min load average when each arm-repetition started; {m.get('cores')} cores): "
            f"min {ld['min']:.1f}, median {ld['median']:.1f}, max {ld['max']:.1f}. A load well above the core "
            "count means other work shared the CPU during the run: absolute tok/s are then low and noisy; "
            "the interleaved ratios and their intervals are what to read.\n"
        )
    fs = findings(results, arm_defs, ceiling)
    if fs:
        w("## Findings\n")
        for f in fs:
            w(f"- {f}")
        w("")
    w("## Setup\n")
    w(
        f"- llama.cpp build: commit `{plan.get('build_commit')}`, {plan.get('compiler') or ''}; "
        f"binaries from `{plan.get('llama_prefix')}`."
    )
    w(
        f"- Target: `{Path(str(plan.get('target'))).name}` ({plan.get('target_size', 0) / 1e6:.0f} MB); "
        f"draft: `{Path(str(plan.get('draft'))).name}` ({plan.get('draft_size', 0) / 1e6:.0f} MB)."
    )
    for q, info in (plan.get("derived_drafts") or {}).items():
        w(
            f"- Derived draft {q}: `{Path(info['path']).name}` ({info['size'] / 1e6:.0f} MB), made with "
            "the built `llama-quantize --allow-requantize` from the Q4_K_M draft."
        )
    counts = plan.get("workload_counts", {})
    w(
        f"- Tasks: {plan.get('task_set')} (sha256 `{str(plan.get('task_set_digest'))[:16]}…`): "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + "."
    )
    w(
        f"- Every request: chat endpoint, streamed, temperature 0, seed {plan.get('seed')}, max tokens "
        f"{plan.get('max_tokens')}, `cache_prompt: false`; threads {plan.get('threads') or 'default'}, "
        f"context {plan.get('ctx_size')}."
    )
    w(
        f"- Every arm-repetition is a fresh llama-server (argv from `specops.argv.build_argv`), one warm-up "
        f"request, then all tasks once; {plan.get('reps')} repetitions, arm order rotated each repetition "
        "(interleaved) so drift of this shared machine spreads over all arms."
    )
    w(
        "- Speedup = geometric mean over tasks of (arm decode tok/s ÷ baseline decode tok/s, each averaged "
        "over repetitions); 95% CI = Student-t interval on the log ratios over tasks. "
        "▲/▼: the whole interval is above/below 1. Decode tok/s is llama-server's "
        "`timings.predicted_per_second`; wall tok/s is "
        "measured by the client after the first streamed token. Acceptance = accepted/drafted tokens; "
        "mean acceptance length = 1 + accepted/drafts (tokens per target step while drafting), from the "
        "`/metrics` counters read around every request."
    )
    w(
        "- Identity: every task's text compared byte for byte with the arm's reference (baseline, or the "
        "non-speculative run with the same numerics for the exact arms), every repetition; first divergent "
        "byte listed below.\n"
    )

    if ceiling and ceiling.get("target"):
        w("## Hardware ceiling\n")
        w(
            f"`llama-bench -p k -n 0 -d {ceiling.get('depth')} -r {ceiling.get('reps')}`: "
            "time of one batch of k tokens on a context of that depth, relative to one decode step (k=1). "
            "c(k) near 1 would make "
            "long drafts free; c(k) near k means no batching gain at all.\n"
        )
        nums = list(ceiling["target"])
        rels = {n: {int(k): float(v) for k, v in ceiling["target"][n]["relative"].items()} for n in nums}
        r = ceil.draft_cost_ratio(ceiling, "draft")
        w(
            "| k | " + " | ".join(f"c(k) {n}" for n in nums) + " | ceiling k-1 drafted, free draft | "
            f"… with draft cost r={_f(r, '.2f')} |"
        )
        w("| --- " * (len(nums) + 3) + "|")
        base_rel = rels.get("default") or rels[nums[0]]
        for k in sorted(base_rel):
            cols = [_f(rels[n].get(k), ".2f") for n in nums]
            free = ceil.perfect_ceiling(base_rel, k - 1) if k > 1 else 1.0
            cost = ceil.perfect_ceiling(base_rel, k - 1, r) if k > 1 and math.isfinite(r) else None
            w(f"| {k} | " + " | ".join(cols) + f" | {free:.2f}× | {_f(cost, '.2f')}{'×' if cost else ''} |")
        w("")
        steps = ceiling.get("draft_step_s", {})
        tstep = base_rel and ceiling["target"].get("default", ceiling["target"][nums[0]])["batch_s"]
        t1 = float(tstep.get("1", tstep.get(1))) if tstep else None
        if steps and t1:
            w(
                "Draft cost per step relative to one target step: "
                + ", ".join(
                    f"{name} {s / t1:.2f} ({s * 1000:.1f} ms vs {t1 * 1000:.1f} ms)" for name, s in steps.items()
                )
                + ".\n"
            )

    for wl in [*workloads, ALL]:
        w(f"## Results: {wl}\n")
        w(
            "| arm | decode tok/s | wall tok/s | speedup [95% CI] | wall speedup | TTFT s | e2e s "
            "| acceptance | mean acc. len | predicted | ceiling (own acc.) | identical | peak RSS MB |"
        )
        w("| --- " * 13 + "|")
        for name in arm_defs:
            aw = results.get(name, {}).get(wl)
            if not aw:
                continue
            w(
                f"| `{name}` | {_f(aw.decode_tps)} | {_f(aw.wall_decode_tps)} | {_sp(aw)} | "
                f"{_sp(aw, 'wall_speedup')} | {_f(aw.ttft_s, '.2f')} | {_f(aw.e2e_s, '.1f')} | "
                f"{_f(aw.acceptance, '.2f')} | {_f(aw.mean_accept_len, '.2f')} | "
                f"{_f(aw.predicted, '.2f')} | {_f(aw.ceiling, '.2f')} | {_ident(aw)} | "
                f"{aw.rss_peak / 2**20:.0f} |"
            )
        w("")

    w("## Output identity\n")
    w("| arm | reference | " + " | ".join(workloads) + " | first divergent byte (task@rep: offset) |")
    w("| --- " * (len(workloads) + 3) + "|")
    for name, d in arm_defs.items():
        row = results.get(name, {})
        if ALL not in row:
            continue
        divs = row[ALL].divergences
        where = ", ".join(
            f"{dv['task_id']}@{dv['rep']}: {dv['byte_pos']}{' (prefix)' if dv.get('kind') == 'length' else ''}"
            for dv in divs[:8]
        )
        if len(divs) > 8:
            where += f", … ({len(divs)} in all)"
        w(
            f"| `{name}` | {d.get('reference')} | "
            + " | ".join(_ident(row[wl]) if wl in row else "–" for wl in workloads)
            + f" | {where or '—'} |"
        )
    w("")

    w("(prefix) = one text is a prefix of the other: same tokens, different stopping point.\n")
    w("## Arms\n")
    w("| arm | what | server argv (differences from the base profile) |")
    w("| --- | --- | --- |")
    for name, d in arm_defs.items():
        prof = ", ".join(f"{k}={v}" for k, v in d.get("profile", {}).items())
        env = " ".join(f"{k}={v}" for k, v in (d.get("env") or {}).items())
        w(f"| `{name}` | {d.get('description')} | {prof}{' env ' + env if env else ''} |")
    w("")
    w("Exact server command lines are in the raw JSON (`argv` of every arm-repetition).\n")
    if images:
        w("## Plots\n")
        for img in images:
            w(f"![{Path(img).stem}]({img})\n")
    w(f"Raw data: [{raw_json}]({raw_json}).\n")
    return "\n".join(L) + "\n"
