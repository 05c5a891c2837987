"""The deploy's auto-tune (``llama_server_tune: auto``): what the tune may choose on a host, what of its choice the
deploy applies, and the summary the speed gate's record keeps; and the one mapping of a chosen profile to the
service role's variables that ``specops bench`` writes down (:func:`role_vars`).

Explicit settings win: the tune chooses only what the inventory left to it, ``llama_server_spec_type: auto`` (the
kind: the draft model or an n-gram type or llama.cpp's ``default``) and ``llama_server_draft_n_max: null`` (the
draft length). With both set the tune does not run; with one set it chooses the other around it. Plain decoding as
its answer, with the kind left open, is what the unit serves (``llama_server_spec_type: none``): the deploy restarts
once into it, and the speed gate judges only a speculative profile (the tune's choice, or a kind the inventory set).

A record tuned on another host of this host's kind (``llama_server_tune_share: kind``, :func:`specops.tune.record.kind`)
is applied like the host's own, and this host's speed gate still judges its choice: where the gate finds a shared
speculative choice loses or cannot prove it (:func:`disputed`), the host tunes for itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops import kinds
from specops.kinds import PLAIN
from specops.knobs import bench_knobs, spec_type_members, uses_draft_model
from specops.tune import mix

SPEC_TYPE = "llama_server_spec_type"
DRAFT_N_MAX = "llama_server_draft_n_max"
TUNABLE = (SPEC_TYPE, DRAFT_N_MAX)


@dataclass(frozen=True)
class Scope:
    """Whether the deploy tunes, why (one line either way), and the ``specops tune`` arguments that keep the
    candidates inside what the inventory left open."""

    run: bool
    why: str
    args: tuple[str, ...] = ()
    draft: bool = False  # the candidates use the draft model (pass --draft)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "why": self.why, "args": list(self.args), "draft": self.draft}


def scope(mode: str, spec_type: object, draft_n_max: object, has_draft: bool,
          lengths: Sequence[int]) -> Scope:
    """What ``specops tune`` may choose on this host, from the role's settings."""
    if mode != "auto":
        return Scope(False, "llama_server_tune is off: the configured profile is deployed as it is")
    free_type, free_len = spec_type == "auto", draft_n_max is None
    if not free_type and not free_len:
        return Scope(False, f"explicit settings win: {SPEC_TYPE}={spec_type} and {DRAFT_N_MAX}={draft_n_max} are set "
                            f"in the inventory, so the tune does not run (set {SPEC_TYPE}: auto or {DRAFT_N_MAX}: "
                            "null to let it choose)")
    by_type = {k.spec_type: k for k in kinds.KINDS if k.probe == kinds.LENGTHS}  # kinds with a length to choose
    listed = ",".join(spec_type_members(spec_type))  # a type list as llama-server takes it ("draft-mtp,ngram-mod")
    if not free_type and listed not in by_type:
        return Scope(False, f"explicit settings win: {SPEC_TYPE}={spec_type} is set; the tune chooses the length of "
                            f"a kind that has one ({', '.join(map(str, by_type))}) and between kinds (with "
                            f"{SPEC_TYPE}: auto), so it does not run")
    draft = has_draft and (free_type or uses_draft_model(spec_type))
    if not free_type and uses_draft_model(spec_type) and not draft:
        return Scope(False, f"{SPEC_TYPE}={spec_type} needs a draft model and none is configured: nothing to tune")
    ks = [int(k) for k in lengths] if free_len else [int(str(draft_n_max))]
    among = "among " + ",".join(map(str, ks)) if free_len else str(ks[0]) + " (set)"
    args: list[str] = ["--lengths", ",".join(map(str, ks))]
    what = []
    if free_type:
        if draft:
            what.append(f"draft length {among}")
        what.append("the n-gram types this build has and llama.cpp's default (and the target's MTP head where it "
                    f"has one, at n-max {among})")
    else:
        kind = by_type[listed]
        what.append(f"{kind.length_name} {among}")
        args += ["--kinds", kind.key]
    return Scope(True, "the tune chooses " + " and ".join(what) + " against plain decoding", tuple(args), draft)


@dataclass(frozen=True)
class Applied:
    """What of the tune's choice the deploy sets (role variables), what the inventory's explicit values kept, and
    the one line the deploy prints."""

    vars: dict[str, Any]
    kept: dict[str, Any] = field(default_factory=dict)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"vars": self.vars, "kept": self.kept, "message": self.message}


def apply(result: Mapping[str, Any], spec_type: object, draft_n_max: object) -> Applied:
    """The role variables the deploy takes from a tune result: only those the inventory left open (spec type
    ``auto``, draft length null).

    Plain decoding as the tune's answer (no candidate measured confidently faster, or none predicted to pay: the
    ceiling ruled the draft model out and nothing else cleared the margin) is served directly where the kind was
    left open: ``llama_server_spec_type: none``, so the unit loads no draft model, the deploy restarts once into it
    and the speed gate has nothing to judge (no speculative unit installed, measured, then replaced). Where the
    inventory set the kind (draft-simple with only the length open) that kind stays, with the role's draft length,
    and the speed gate judges it (``llama_server_speed_gate``)."""
    chosen = str(result.get("chosen") or "")
    if not chosen:
        raise ValueError("the tune's record names no choice")
    head = f"tune ({result.get('when', '?')}{minutes(result)}{shared_from(result)}): "
    applied = _apply(result, chosen, head, spec_type, draft_n_max)
    return dataclasses.replace(applied, message=applied.message + identity_text(result))


def identity_text(result: Mapping[str, Any]) -> str:
    """What the identity check found, for the deploy's line (issue 78): per measured candidate the answers checked
    and the bound on the rate of differences the rule allows, then every difference explained ('' for a record
    without the check)."""
    ident = result.get("identity") or {}
    cands = ident.get("candidates") or {}
    if not cands:
        return ""
    parts = [f"{name}: {c.get('bound')}" for name, c in cands.items()]
    diffs = [f"{name} on {line}" for name, c in cands.items() for line in c.get("differences") or ()]
    text = f". Output against plain decoding (rule {ident.get('rule')}): " + "; ".join(parts)
    if diffs:
        text += ". Differences: " + " | ".join(diffs)
    return text


def _apply(result: Mapping[str, Any], chosen: str, head: str, spec_type: object, draft_n_max: object) -> Applied:
    if chosen == PLAIN:
        pays = (f"no candidate pays here ({result.get('reason', '')})" if result.get("settled", True) is not False
                else f"the tune is undecided ({result.get('reason', '')}), so plain decoding until a longer tune "
                     "settles it")
        more = to_settle(result)
        if more:
            head += more
        if spec_type == "auto":
            return Applied({SPEC_TYPE: "none"}, {}, head + f"{pays}: plain decoding is served ({SPEC_TYPE}=none); "
                                                           "the speed gate has nothing to judge")
        return Applied({}, {SPEC_TYPE: spec_type},
                       head + f"{pays}; explicit settings win: {SPEC_TYPE}={spec_type} kept: the configured kind is "
                              "deployed and the speed gate judges it")
    current = {SPEC_TYPE: spec_type, DRAFT_N_MAX: draft_n_max}
    free = {SPEC_TYPE: spec_type == "auto", DRAFT_N_MAX: draft_n_max is None}
    wanted = {k: v for k, v in dict(result.get("vars") or {}).items() if k in TUNABLE}
    out = {k: v for k, v in wanted.items() if free[k]}
    kept = {k: current[k] for k, v in wanted.items() if not free[k] and current[k] != v}
    row = next((c for c in result.get("candidates") or () if c.get("name") == chosen), {})
    figures = f"measured {row.get('measured')}" if row.get("measured") else "not measured"
    text = head + f"{chosen} ({figures}): " + (", ".join(f"{k}={v}" for k, v in out.items()) or "nothing to set")
    if kept:
        text += "; explicit settings win: " + ", ".join(f"{k}={v} kept" for k, v in kept.items())
    return Applied(out, kept, text)


def shared_from(result: Mapping[str, Any]) -> str:
    """``, tuned on HOST and shared``: the record was another host's of this host's kind ('' for its own)."""
    share = result.get("shared") or {}
    return f", tuned on {share.get('from', 'another host')} and shared" if share else ""


def disputed(gate: Mapping[str, Any], summary: Mapping[str, Any] | None) -> str:
    """The one line the deploy says when this host's speed gate disagrees with a speculative choice taken from
    another host's record (``summary``: :func:`summary`'s, with ``shared``): the gate finds it loses, or cannot
    prove it here; the host then tunes for itself. '' otherwise (its own record, plain decoding, a verdict that
    pays)."""
    share = dict((summary or {}).get("shared") or {})
    chosen, verdict = str((summary or {}).get("chosen") or ""), str(gate.get("verdict") or "")
    if not share or chosen in ("", PLAIN) or verdict not in ("loses", "unproven"):
        return ""
    what = (f"loses here ({gate['ratio']:.2f}× plain decoding)" if verdict == "loses" and gate.get("ratio") is not None
            else "loses here" if verdict == "loses"
            else f"is unproven here ({gate.get('unproven_because') or 'no verdict'})")
    return (f"tune: {chosen}, tuned on {share.get('from', 'another host')} and shared with the hosts of kind "
            f"{share.get('kind', '?')}, {what}: the speed gate of this host disagrees, so it tunes for itself now (no "
            "shared record)")


def minutes(result: Mapping[str, Any]) -> str:
    """``, 6.2 of 15 min``: the minutes the tune used out of its budget ('' where the record has no figures)."""
    used, budget = result.get("elapsed_s"), result.get("budget_s")
    if used is None or not budget:
        return ""
    return f", {float(used) / 60:.1f} of {float(budget) / 60:g} min"


def to_settle(result: Mapping[str, Any]) -> str:
    """For an undecided tune: the minutes more that would settle it and the budget to set, first when under 10% of
    the budget ('' : decided, or no projection)."""
    more, budget = result.get("to_settle_min"), result.get("budget_s")
    if result.get("settled", True) is not False or more is None or not budget:
        return ""
    need, have = [*(result.get("to_settle_tasks") or []), 0, 0][:2]
    if need and have and int(need) > int(have):  # the task set is what falls short, not the budget
        return (f"about {int(need)} tasks would settle it and the task set holds {int(have)}: give it more of your "
                "traffic (llama_server_tune_tasks, llama_server_tune_limit_per_workload), a longer budget alone "
                "cannot. ")
    budget_min = float(budget) / 60
    want = math.ceil(budget_min + float(more) + 0.5)
    line = (f"about {float(more):.0f} more minute(s) of measuring would settle it: set llama_server_tune_budget: "
            f"{want}. ")
    if float(more) < 0.1 * budget_min:
        line = "less than 10% more budget would settle it: " + line
    return line


def summary(result: Mapping[str, Any], applied: Applied, reused: bool) -> dict[str, Any]:
    """What the speed gate's record keeps of the tune (the exporter, the morning report and the dashboard read it):
    the chosen profile and its figures, the runner-up, when, and on what build, models and device."""
    rows = {c.get("name"): c for c in result.get("candidates") or ()}
    chosen = str(result.get("chosen"))
    row = rows.get(chosen) or {}
    chosen_vars = dict(result.get("vars") or {})
    runner = result.get("runner_up")
    return {
        "chosen": chosen, "reason": result.get("reason"), "settled": result.get("settled", True),
        "tie": list(result.get("tie") or []), "paired": result.get("paired"), "reference": result.get("reference"),
        "spec_type": chosen_vars.get(SPEC_TYPE), "draft_n_max": chosen_vars.get(DRAFT_N_MAX),
        "predicted": row.get("predicted"), "measured": row.get("measured"), "speedup": row.get("measured_interval"),
        "runner_up": runner, "runner_up_measured": (rows.get(runner) or {}).get("measured") if runner else None,
        "best_measured": result.get("best_measured"),
        "applied": applied.vars, "kept": applied.kept, "reused": reused,
        "shared": result.get("shared"),  # another host's record of this host's kind: from where, why (None: own)
        "when": result.get("when"), "key": result.get("key"), "build": result.get("build"),
        "models": result.get("models"), "device": (result.get("facts") or {}).get("device"),
        "open": list(result.get("open") or []), "concurrency": result.get("concurrency"),
        # what it measured on (never a prompt: the files' names and hashes) and the mix it chose for
        "streams": (result.get("streams") or {}).get("measured"),  # at the service's N (None: one stream only)
        "tasks": result.get("task_source"), "mix": mix.label(result.get("mix")) if "mix" in result else None,
        "candidates": [{"name": c.get("name"), "predicted": c.get("predicted"), "measured": c.get("measured"),
                        "verdict": c.get("verdict")} for c in result.get("candidates") or ()],
        # the cost model for the chosen profile, priced again by the exporter on the live traffic (None: plain)
        "live_model": result.get("live_model") if chosen != PLAIN else None,
        # the identity check: the rule, the host's batch spread, per candidate the answers checked and each
        # difference explained (issue 78)
        "identity": result.get("identity"),
    }


def role_vars(arm_def: Mapping[str, Any], threads: int | None, draft_threads: int | None,
              derived_draft: str | None = None) -> dict[str, Any]:
    """Every ``llama_server_*`` variable the bench's knobs set for an arm (``spec_type: none`` for the baseline): what
    ``specops bench`` writes for its choice (:mod:`specops.bench.inventory`), each knob set or cleared."""
    prof = dict(arm_def.get("profile", {}))
    spec = prof.get("spec_type", "auto")
    if spec == "auto":
        spec = kinds.of_key("draft").spec_type if arm_def.get("draft") else "none"
    out: dict[str, Any] = {}
    for k in bench_knobs():
        value = prof.get(k.name)
        if k.name == "spec_type":
            value = spec
        elif k.name == "threads":
            value = threads
        elif k.name == "draft_threads":
            value = draft_threads if arm_def.get("draft") else None
        out[k.role_var] = value
    # the service role always knows a draft model; an arm without one must clear it, or the draft
    # would be loaded and never used (and the profile check refuses that combination)
    if not arm_def.get("draft"):
        out["llama_server_draft_model"] = ""
    out["llama_server_environment"] = dict(arm_def.get("env") or {})
    if derived_draft:
        # a re-quantised draft: the file exists where the bench ran; the service role must make or
        # copy it on each server (llama-quantize --allow-requantize DRAFT OUT TYPE)
        out["llama_server_draft_requantize"] = arm_def.get("draft")
        out["llama_server_draft_model_bench_path"] = derived_draft
    return out
