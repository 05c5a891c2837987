"""The bench report: markdown for people (its verdict is the tune's rule's choice, :mod:`specops.bench.recommend`),
JSON for machines, PNG plots (:mod:`specops.bench.plots`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.bench import identity
from specops.bench.analysis import ALL, ArmWorkload
from specops.bench.arms import AA, BASELINE
from specops.bench.plots import plots as plots  # the report's plots, where summary and the tune's tests find them
from specops.bench.progress import fmt_s
from specops.bench.recommend import Pick
from specops.knobs import knob


def _f(v: float | None, fmt: str = ".1f", none: str = "–") -> str:
    return none if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def _new_task(aw: ArmWorkload) -> str:
    iv = aw.new_task
    if iv is None or not iv.has_ci:
        return "–"
    return f"[{iv.low:.2f}–{iv.high:.2f}]"


def _sp(aw: ArmWorkload | None) -> str:
    iv = aw.speedup if aw else None
    if iv is None:
        return "–"
    if not iv.has_ci:
        return f"{iv.estimate:.2f}× (n={iv.n})"
    assert iv.low is not None and iv.high is not None
    mark = " ▲" if iv.low > 1.0 else (" ▼" if iv.high < 1.0 else "")
    return f"{iv.estimate:.2f}× [{iv.low:.2f}–{iv.high:.2f}]{mark}"


def _ident(aw: ArmWorkload) -> str:
    return f"{aw.identical}/{aw.compared}" if aw.compared else "–"


# ---- markdown --------------------------------------------------------------------------------
def model_gap(aw: ArmWorkload, base: ArmWorkload | None) -> str:
    """Where the ceiling model is off for an arm: the measured cost per verification step beyond the model,
    in baseline decode steps."""
    if aw.predicted is None or aw.speedup is None or not aw.drafts or base is None or not base.tokens:
        return "–"
    measured = 1.0 / aw.speedup.estimate
    predicted = 1.0 / aw.predicted
    tokens = max(1, aw.tokens - aw.requests)
    extra_steps = (measured - predicted) * tokens / aw.drafts
    return f"{extra_steps:+.2f} steps per verification"


def _plain_verdict(deploy: Pick, arm_defs: Mapping[str, Mapping[str, Any]], tune: bool = False) -> str:
    who = "The tune's choice" if tune else "Chosen by the tune's rule"
    if deploy.arm == BASELINE:
        head = (f"**Run the baseline (no speculative decoding) on this host.** {who}: {deploy.reason}. Speculation "
                "pays only when verifying a batch of drafted tokens costs little more than one decode step and the "
                "draft is cheap and usually right; the ceiling and the tables below show which fails here."
                if deploy.confident else
                f"**Undecided: run the baseline until a longer run settles it.** {who}: {deploy.reason}.")
    else:
        d = arm_defs.get(deploy.arm, {})
        head = f"**Run `{deploy.arm}` on this host** ({d.get('description', '')}). {who}: {deploy.reason}."
    if not deploy.valid:
        head += (f"\n\n**Not applied: the A/A check is unsound here.** {deploy.gate.reason}. No inventory variables "
                 "are written and `--apply` refuses; keep the current setting.")
    return head


@dataclass(frozen=True)
class _Doc:
    """What the report's sections read: ``markdown``'s arguments, and what they derive from them."""

    plan: Mapping[str, Any]
    outcome: Mapping[str, Any]
    results: Mapping[str, Mapping[str, ArmWorkload]]
    arm_defs: Mapping[str, Mapping[str, Any]]
    workloads: list[str]
    picks: Mapping[str, Pick]
    ceiling: Mapping[str, Any] | None
    arm_ceilings: Mapping[str, Mapping[str, Any]]
    pruned: Mapping[str, Mapping[str, Any]]
    images: list[str]
    rule: str
    vars_text: str | None
    raw_json: str
    reference: Mapping[str, Any] | None
    m: Mapping[str, Any]  # the machine
    dz: Mapping[str, Any]  # the design
    deploy: Pick  # the pick for the whole mix
    arms: list[str]  # the speculative arms that ran
    tune: bool = False  # the report of specops tune's measurement: its choice, given


def _md_header(d: _Doc) -> list[str]:
    m, dz, plan, outcome = d.m, d.dz, d.plan, d.outcome
    L: list[str] = []
    w = L.append
    w("# Speculative decoding benchmark\n")
    w(f"Machine **{m.get('hostname')}** — {m.get('cpu')}, {m.get('cores')} cores, "
      f"{(m.get('mem_bytes') or 0) / 2**30:.0f} GiB RAM, {m.get('os')}, no GPU. Run {plan.get('started_at', '?')}.\n")
    w(f"**Wall time: {fmt_s(float(outcome.get('elapsed_s', 0)))}** for the arms"
      + (f" + {fmt_s(float(plan['ceiling_s']))} for the hardware ceiling" if plan.get("ceiling_s") else "")
      + (f" (budget {fmt_s(float(plan['budget_s']))})" if plan.get("budget_s") else "")
      + f"; {outcome.get('blocks', 0)} blocks; the run ended: {outcome.get('ended', '?')}."
      + (" Exhaustive mode: every arm, every task, no early stopping, no pruning." if dz.get("exhaustive") else "")
      + "\n")
    w(f"**Every ratio is against {plan.get('plain_reference') or 'the baseline server (spec_type none)'}** (the "
      "`baseline` row). Intervals are 95% "
      + ("for this fixed task set (finite-population correction)" if dz.get("fpc") else
         "confidence intervals for the workload's mean speedup: the tasks' own spread and the A/A noise both count")
      + ".\n")
    return L


def _md_verdict(d: _Doc) -> list[str]:
    L: list[str] = []
    w = L.append
    w("## Verdict\n")
    w(_plain_verdict(d.deploy, d.arm_defs, d.tune) + "\n")
    w("The choice is the tune's rule (`specops tune` chooses by the same function): the cheapest arm the paired ratios "
      "cannot tell slower than the fastest that is confidently faster than the baseline at the run's error budget "
      f"and not confidently under 1 + the margin, its output passing rule `{d.rule}`; else the baseline. Each "
      "workload is read by the same rule on its own blocks. The A/A check decides only whether the choice may be "
      "applied.\n")
    w("| workload | chosen | figure [95% CI] against the baseline | A/A check | settled? | why |")
    w("| --- | --- | --- | --- | --- | --- |")
    for wl in [*d.workloads, ALL]:
        pk = d.picks.get(wl)
        if pk:
            arm = f"`{pk.arm}`" + ("" if pk.valid else " (not applied)")
            w(f"| {wl} | {arm} | {pk.figure} | {pk.gate.reason} | {'yes' if pk.confident else 'no: undecided'} | "
              f"{pk.reason} |")
    w("")
    if d.dz.get("fpc"):
        w("The speedups here and every conclusion are for **this task set** (`--fixed-set`: its tasks drawn without "
          "replacement, with all of them in only measurement noise is left). Where one *new* task of a workload may "
          "land is wider: the 'a new task' column of the results tables.\n")
    else:
        w("The intervals here and every conclusion speak for **the workload's traffic**, not only these tasks: the "
          "tasks' own spread and the measurement noise both count in full (no finite-population correction). Where "
          "one single *new* task may land is wider still: the 'a new task' column of the results tables.\n")
    return L


def _md_reference(d: _Doc) -> list[str]:
    reference, picks, outcome = d.reference, d.picks, d.outcome
    L: list[str] = []
    w = L.append
    if reference:
        w("## Agreement with the reference run\n")
        w(f"Reference: {reference.get('report')} — {reference.get('what')}; wall time "
          f"**{fmt_s(float(reference.get('elapsed_s', 0)))}** against **{fmt_s(float(outcome.get('elapsed_s', 0)))}** "
          "for this run.\n")
        w("| workload | this run | reference run | same? |")
        w("| --- | --- | --- | --- |")
        for wl in [*d.workloads, ALL]:
            mine = picks[wl].arm if picks[wl].valid else "nothing"
            theirs = reference.get("picks", {}).get(wl, "–")
            w(f"| {wl} | `{mine}` | `{theirs}` | {'yes' if mine == theirs else '**NO**'} |")
        w("")
    return L


def _md_vars(d: _Doc) -> list[str]:
    L: list[str] = []
    w = L.append
    if d.vars_text:
        w(f"Inventory variables written for the service role (rule `{d.rule}`):\n")
        w("```yaml\n" + d.vars_text.strip() + "\n```\n")
    elif not d.deploy.valid:
        w("No inventory variables were written: a choice the A/A check cannot back changes nothing.\n")
    return L


def _md_ceiling(d: _Doc) -> list[str]:
    plan, ceiling = d.plan, d.ceiling
    L: list[str] = []
    w = L.append
    w("## Ceiling first: what can pay on this host\n")
    if not ceiling or not ceiling.get("target"):
        w(f"Not measured ({plan.get('ceiling_note') or 'no llama-bench'}): every arm ran.\n")
    else:
        margin = float(plan.get("ceiling_margin", 0.05))
        w(f"`llama-bench -p k -n 0 -d {ceiling.get('depth')} -r {ceiling.get('reps')}` times one batch of k tokens on "
          "a context of that depth: c(k) is its cost in decode steps (k = 1). The same on the draft model gives its "
          "step cost r (in target steps) and its own curve c_d(k). A round that drafts k tokens costs c(k+1) "
          "target steps to verify, and with a draft model r·(c_d(k+1) + k) more: the pinned llama-server "
          "re-evaluates every verified batch on the draft (`TAG_SPEC_AVOID_DRAFT_REEVAL`) and then drafts k tokens "
          "one step at a time. With every drafted token accepted the round yields k+1 tokens: an arm's "
          "**ceiling** is the best of (k+1) ÷ cost over the draft lengths it may use. The model leaves out the "
          "server's per-position work, so it is optimistic: an arm whose ceiling is below "
          f"{1 + margin:.2f}× (1.0 + the {margin:.0%} margin) cannot pay here whatever its acceptance, and is "
          "not run.\n")
        L += _md_ceiling_tables(d, ceiling)
    return L


def _md_ceiling_tables(d: _Doc, ceiling: Mapping[str, Any]) -> list[str]:
    """The measured c(k) per numerics setting, the draft step costs, and each arm's ceiling."""
    pruned, dz = d.pruned, d.dz
    L: list[str] = []
    w = L.append
    nums = list(ceiling["target"])
    rels = {n: {int(k): float(v) for k, v in ceiling["target"][n]["relative"].items()} for n in nums}
    base_rel = rels.get("default") or rels[nums[0]]
    w("| k | " + " | ".join(f"c(k) {n}" for n in nums) + " |")
    w("| --- " * (len(nums) + 1) + "|")
    for k in sorted(base_rel):
        w(f"| {k} | " + " | ".join(_f(rels[n].get(k), ".2f") for n in nums) + " |")
    w("")
    steps = ceiling.get("draft_step_s", {})
    tb = ceiling["target"].get("default", ceiling["target"][nums[0]])["batch_s"]
    t1 = float(tb.get("1", tb.get(1)))
    if steps:
        w("Draft step cost r: " + ", ".join(f"{n} {s / t1:.2f} ({s * 1000:.1f} ms vs {t1 * 1000:.1f} ms)"
                                           for n, s in steps.items()) + ".\n")
    w("| arm | draft cost r | longest draft | best ceiling (at draft length) | runs? |")
    w("| --- | --- | --- | --- | --- |")
    for name, c in d.arm_ceilings.items():
        runs = "**cannot pay on this host** (not run)" if name in pruned and not dz.get("run_anyway") else (
            "cannot pay, run anyway" if name in pruned else "yes")
        w(f"| `{name}` | {float(c['draft_cost']):.2f} | {c['n_max']} | {float(c['best']):.2f}× (k={c['at_k']}) "
          f"| {runs} |")
    w("")
    return L


def _md_aa(d: _Doc) -> list[str]:
    L: list[str] = []
    w = L.append
    w("## The A/A check: can this run tell the baseline from itself?\n")
    w("A second baseline server, loaded beside the first, answers every block too. Its ratio to the baseline "
      "should be 1.0; the choice for a workload may be applied when the A/A interval contains 1.0 and is narrower "
      "than the effect chosen there.\n")
    w("| workload | A/A speedup [95% CI] | half-width | tasks | outputs identical |")
    w("| --- | --- | --- | --- | --- |")
    for wl in [*d.workloads, ALL]:
        aw = d.results.get(AA, {}).get(wl)
        if aw:
            w(f"| {wl} | {_sp(aw)} | {_f(aw.half_width and aw.half_width * 100, '.1f')}% | {aw.tasks} | "
              f"{_ident(aw)} |")
    w("")
    return L


def _md_results(d: _Doc) -> list[str]:
    L: list[str] = []
    w = L.append
    for wl in [*d.workloads, ALL]:
        w(f"## Results: {wl}\n")
        w("| arm | tasks | decode tok/s | speedup [95% CI] (these tasks) | ± | a new task [95%] | conclusion | "
          "stopped | acceptance | mean acc. len | predicted | measured ÷ predicted | identical |")
        w("| --- " * 13 + "|")
        for name in [BASELINE, AA, *d.arms]:
            aw = d.results.get(name, {}).get(wl)
            if not aw:
                continue
            ratio = (aw.speedup.estimate / aw.predicted) if aw.speedup and aw.predicted else None
            w(f"| `{name}` | {aw.tasks} | {_f(aw.decode_tps)} | {_sp(aw) if name != BASELINE else '1.00×'} | "
              f"{_f(aw.half_width and aw.half_width * 100, '.1f')}{'%' if aw.half_width else ''} | "
              f"{_new_task(aw) if name != BASELINE else '–'} | "
              f"{aw.conclusion if name not in (BASELINE, AA) else '–'} | {aw.stopped or '–'} | "
              f"{_f(aw.acceptance, '.2f')} | {_f(aw.mean_accept_len, '.2f')} | {_f(aw.predicted, '.2f')} | "
              f"{_f(ratio, '.2f')} | {_ident(aw)} |")
        w("")
    return L


def _md_predicted(d: _Doc) -> list[str]:
    results = d.results
    L: list[str] = []
    w = L.append
    gaps = [(a, aw) for a in d.arms if (aw := results.get(a, {}).get(ALL)) and aw.predicted and aw.speedup]
    w("## Predicted against measured\n")
    if gaps:
        base = results.get(BASELINE, {}).get(ALL)
        w("*Predicted*: the ceiling model fed with the arm's own counters (drafts D, drafted tokens T, accepted A, "
          "N tokens): N / ((N − A − D) + D·c(T/D + 1) + T·r) in baseline decode steps. What the model leaves out "
          "shows as extra cost per verification step:\n")
        w("| arm | predicted | measured | measured ÷ predicted | beyond the model |")
        w("| --- | --- | --- | --- | --- |")
        for a, aw in gaps:
            assert aw.speedup is not None and aw.predicted is not None
            w(f"| `{a}` | {aw.predicted:.2f}× | {aw.speedup.estimate:.2f}× | {aw.speedup.estimate / aw.predicted:.2f} "
              f"| {model_gap(aw, base)} |")
        w("")
        w("What the model counts: the target's verification batch c(k+1); for a draft model also the "
          "re-evaluation of that batch on the draft (the pinned llama.cpp re-evaluates every verified batch on the "
          "draft, `TAG_SPEC_AVOID_DRAFT_REEVAL` in `tools/server/server-context.cpp`) and its k one-token steps. "
          "What it leaves out: logits for all k+1 verified positions (llama-bench's batch outputs one), "
          "sampling at every position and every drafted token, streaming. Those costs come per round and per "
          "drafted token, so the model is optimistic for every speculative arm, most for long drafts with "
          "middling acceptance; the column above is that shortfall in baseline decode steps per round.\n")
    else:
        w("No arm drafted anything measurable (or no ceiling was measured).\n")
    return L


def _md_identity(d: _Doc) -> list[str]:
    workloads = d.workloads
    L: list[str] = []
    w = L.append
    w("## Output identity\n")
    w("| arm | reference | " + " | ".join(workloads) + " | first divergent byte (task@rep: offset) |")
    w("| --- " * (len(workloads) + 3) + "|")
    for name in [AA, *d.arms]:
        row = d.results.get(name, {})
        if ALL not in row:
            continue
        divs = row[ALL].divergences
        where = ", ".join(f"{dv['task_id']}@{dv['rep']}: {dv['byte_pos']}"
                          f"{' (prefix)' if dv.get('kind') == 'length' else ''}" for dv in divs[:8])
        if len(divs) > 8:
            where += f", … ({len(divs)} in all)"
        w(f"| `{name}` | {d.arm_defs.get(name, {}).get('reference', BASELINE)} | "
          + " | ".join(_ident(row[wl]) if wl in row else "–" for wl in workloads) + f" | {where or '—'} |")
    w("")
    # every difference from plain decoding explained, and what the rule makes of the count (issue 78)
    judged = d.rule if d.rule in identity.IDENTITY_RULES else "identical"
    lines = []
    for name in d.arms:
        aw = d.results.get(name, {}).get(ALL)
        if aw is None or not aw.compared:
            continue
        lines.append(f"- `{name}` (rule {judged}): {identity.summary_line(judged, aw.compared, aw.divergences)}")
        for dv in aw.divergences:
            ex = dv.get("explained") or {}
            lines.append(f"  - {ex.get('line') or str(dv['task_id']) + ': not explained (the rule does not judge it)'}")
    if lines:
        w("Each difference from plain decoding, with plain decoding's own log-probabilities of both tokens where "
          "the answers part: a **near-tie** when they are closer than a verifying batch moves them on this host "
          "(measured: the same positions scored as a batch and one token at a time), else a **change**, never "
          "served.\n")
        L.extend(lines)
        w("")
    return L


def _md_method(d: _Doc) -> list[str]:
    plan, dz = d.plan, d.dz
    L: list[str] = []
    w = L.append
    w("## Method\n")
    counts = plan.get("workload_counts", {})
    w(f"- llama.cpp build: commit `{plan.get('build_commit')}`, {plan.get('compiler') or ''}; binaries from "
      f"`{plan.get('llama_prefix')}`.")
    w(f"- Target: `{Path(str(plan.get('target'))).name}` ({plan.get('target_size', 0) / 1e6:.0f} MB); draft: "
      f"`{Path(str(plan.get('draft'))).name}` ({plan.get('draft_size', 0) / 1e6:.0f} MB).")
    w(f"- Tasks: {plan.get('task_set')} (sha256 `{str(plan.get('task_set_digest'))[:16]}…`): "
      + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".")
    w(f"- Every request: chat endpoint, streamed, temperature 0, seed {plan.get('seed')}, max tokens "
      f"{plan.get('max_tokens')}, `cache_prompt: false`; threads {plan.get('threads') or 'default'}, context "
      f"{plan.get('ctx_size')}; servers without a prompt cache (`{knob('cache_ram_mib').flag} 0`: saved prompt "
      "states do not change decode speed and would only fill memory).")
    sliced = plan.get("interleave", "slices") == "slices"
    w(f"- **Paired design**: every arm's server is loaded side by side ({plan.get('capacity_note', '')}); a block "
      "is one task sent to the baseline, a second baseline (A/A) and every arm still running"
      + (f", **time-sliced**: all of the block's requests are sent at once and the servers take turns on the CPU "
         f"({float(plan.get('slice_s', 0.5)):g} s each, SIGSTOP/SIGCONT of their process groups, order shuffled "
         "every cycle), so every server sees the same seconds of the machine; a server's decode rate is its "
         "tokens after the first ÷ the time it actually ran between its first and last token"
         if sliced else ", one request at a time in an order shuffled per block; decode rate = llama-server's "
         "`timings.predicted_per_second`")
      + ". An arm's ratio in a block is its decode rate ÷ the geometric mean of the baselines' in the same block "
      "(both while the A/A check runs, the baseline's after it settled), so drift of the machine cancels. Per "
      "task the ratios are averaged over repetitions; the speedup is their geometric mean over tasks with a "
      "Student-t 95% interval. "
      + ("The interval is for this task set (`--fixed-set`): its tasks are drawn without replacement in "
         "a random order, so the spread between tasks counts with the finite-population correction (1 − n/N) and "
         "the measurement noise (estimated from the A/A pairs) in full; with every task in, only measurement noise "
         "is left. That interval is the one every conclusion uses: it says how fast the arm is on this task set; "
         "the choice reads the tune's intervals, for the workload's traffic (no correction). " if dz.get("fpc") else
         "The interval speaks for the workload (the tasks are a sample of its traffic): the spread between tasks "
         "and the measurement noise count in full, with no finite-population correction; every conclusion and the "
         "choice use it. ")
      + "*A new task* is the other question: where one more task of the same workload, not in "
      "the set, may land (a Student-t prediction interval on the per-task log ratios, exp(m ± t·s·√(1 + 1/n)), "
      "no finite-population correction); it is wide when tasks differ, and a gain confident on the set can still "
      "be a loss on a task of your own. For your own traffic, run the bench with your own tasks (`--tasks`). The "
      "whole mix weighs every workload the same.")
    w(f"- **Sequential stopping**: after ≥ {dz.get('min_tasks')} tasks of a workload, an arm stops running it as "
      f"soon as its interval settles the question: {_stops(dz)}; workloads take turns; the A/A check stops once it has "
      f"{dz.get('min_tasks')} blocks in a workload and its pooled interval is within ±"
      f"{float(dz.get('aa_precision') or 0):.1%}; "
      + ("under rule 'identical' an arm whose answer differs from its reference's in any block stops on that "
         "workload at once (output differs: the rule can never pick it there, whatever its speed); "
         if dz.get("identity_stop") else "")
      + "a budget stops the run before a block that would not fit. "
      "Intervals are per-look 95% intervals (looking after every block makes them somewhat optimistic; the A/A "
      "check and the exhaustive reference run are the guard).")
    w(f"- {plan.get('reps')} repetition(s); servers restart between repetitions (fresh n-gram pools). Acceptance = "
      "accepted/drafted tokens and mean acceptance length = 1 + accepted/drafts, from the `/metrics` counters read "
      "after every request.\n")
    return L


def _stops(dz: Mapping[str, Any]) -> str:
    """The stops the design allowed (``stop_on``; a plan recorded before it: all), and what runs on regardless."""
    hw = float(dz.get("half_width", 0.05))
    text = {"slower": "wholly below 1.0 (slower)", "faster": "wholly above 1.0 (faster)",
            "no gain": f"wholly below {1 + hw:.2f} (no gain worth deploying)",
            "precise": f"a half-width within ±{hw:.0%} (precise)"}
    allowed = [s for s in text if s in dz.get("stop_on", list(text))]
    said = ", or ".join(filter(None, (", ".join(text[s] for s in allowed[:-1]), *(text[s] for s in allowed[-1:]))))
    said = said or "none (no interval stops an arm early)"
    kept = [s for s in text if s not in allowed]
    return said + (f"; an arm that is {' or '.join(kept)} keeps running until the workload's tasks are used up (a "
                   "sample that stops when it first looks settled overstates its confidence)" if kept and allowed
                   else "")


def _md_arms(d: _Doc) -> list[str]:
    L: list[str] = []
    w = L.append
    w("## Arms\n")
    w("| arm | what | profile (differences from the base) |")
    w("| --- | --- | --- |")
    for name in [BASELINE, AA, *d.arms, *d.pruned]:
        ad = d.arm_defs.get(name)
        if not ad:
            continue
        prof = ", ".join(f"{k}={v}" for k, v in ad.get("profile", {}).items())
        env = " ".join(f"{k}={v}" for k, v in (ad.get("env") or {}).items())
        w(f"| `{name}` | {ad.get('description')} | {prof}{' env ' + env if env else ''} |")
    w("")
    w("Exact server command lines are in the raw JSON (`servers`).\n")
    return L


def _md_plots(d: _Doc) -> list[str]:
    L: list[str] = []
    w = L.append
    if d.images:
        w("## Plots\n")
        for img in d.images:
            w(f"![{Path(img).stem}]({img})\n")
    w(f"Raw data: [{d.raw_json}]({d.raw_json}).\n")
    return L


_SECTIONS: tuple[Callable[[_Doc], list[str]], ...] = (
    _md_header, _md_verdict, _md_reference, _md_vars, _md_ceiling, _md_aa, _md_results, _md_predicted,
    _md_identity, _md_method, _md_arms, _md_plots,
)


def markdown(
    plan: Mapping[str, Any],
    outcome: Mapping[str, Any],
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workloads: list[str],
    picks: Mapping[str, Pick],
    ceiling: Mapping[str, Any] | None,
    arm_ceilings: Mapping[str, Mapping[str, Any]],
    pruned: Mapping[str, Mapping[str, Any]],
    images: list[str],
    rule: str,
    vars_text: str | None,
    raw_json: str,
    reference: Mapping[str, Any] | None = None,
    tune: bool = False,
) -> str:
    doc = _Doc(
        plan=plan, outcome=outcome, results=results, arm_defs=arm_defs, workloads=workloads, picks=picks,
        ceiling=ceiling, arm_ceilings=arm_ceilings, pruned=pruned, images=images, rule=rule, vars_text=vars_text,
        raw_json=raw_json, reference=reference, m=plan.get("machine", {}), dz=plan.get("design", {}),
        deploy=picks[ALL], arms=[a for a in plan.get("arms", []) if a not in (BASELINE, AA)], tune=tune,
    )
    return "\n".join(line for section in _SECTIONS for line in section(doc)) + "\n"
