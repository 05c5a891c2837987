"""The deploy's speed gate: does the speculative service beat plain decoding of the same build on this host?

The host runs ``specops.host.speed_probe``: the same prompts sent once to the speculative
service and once to the baseline unit (side by side, alternating which goes first), or to each in turn when
memory holds only one copy of the target. This module judges the raw answers on the controller: decode
speed ratio per prompt (speculative ÷ plain, server-side ``predicted_per_second``), their geometric mean
with a 95% interval, and the decision the role acts on:

* ``pays``: the ratio reaches ``min_ratio`` (default 1.0): keep speculation;
* ``loses``: it does not: ``fallback`` (serve plain decoding), ``warn`` or ``fail``, as the operator chose;
* ``unproven``: the measurement cannot carry a verdict: fewer than two prompts measured without other requests
  on the servers (the probe discards a pair during which a client's request ran and gives up at its idle
  deadline), or a 95% interval wider than ``max_spread`` (its high ÷ its low). The role then keeps the
  configuration already proven on the host (or plain decoding where none is) and says so with the figures.

From the same answers it derives the acceptance at which speculation would break even on this host (for
draft-model types, where every round drafts ``n_max`` tokens): one round costs ``C`` plain decode steps
(measured), yields ``1 + accepted`` tokens, so it breaks even when accepted per drafted token reaches
``(C - 1) / drafted per round``. Above 1 means no acceptance can make it pay here.

The probe sends one request at a time by default (``STREAMS``); given the service's ``--parallel`` N
(``--streams``) each pair is N requests at once per server, timed as aggregate tokens/s, so the verdict is for the
service's concurrency. Every verdict line says which (:func:`measured_at`, from the probe's own ``streams``). At N
streams the verdict follows the tune's rule at N (issue 62 item 2, :func:`specops.bench.design.deployable`): it
pays only when its interval is wholly above 1 and not wholly under 1 + MARGIN_AT_N; wholly under 1 + MARGIN_AT_N it
loses (no gain worth serving at N); an interval that reaches both sides is unproven. (Output identity at N is the
tune's to judge, against plain decoding's own run-to-run rate: :mod:`specops.tune.streams`.)

The role's speed-gate task files (roles/llama_server_speed_gate/tasks/*.yml) only run things and call this module:
before the install, :func:`before_install` (measure this unit, or did it lose before: serve plain or refuse);
after the probes, :func:`gate` then :func:`after_verdict` (the record, what the service serves, fall back or fail);
at the end of a proven deploy, :func:`running_record` (the record for the unit that runs now).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specops.bench.design import deployable
from specops.bench.stats import Interval, geomean_ratio_ci, mean
from specops.exporter.speedgate import VERDICTS as EXPORTED_VERDICTS
from specops.knobs import knob
from specops.saturation_verdict import at_concurrency

DECISIONS = ("fallback", "warn", "fail", "off")
VERDICTS = ("pays", "loses", "unproven")
MIN_PROMPTS = 2
MARGIN_AT_N = 0.05  # the tune's margin (specops tune --margin): at N streams the gate holds a service to its rule
STREAMS = 1  # requests the speed probe (specops.host.speed_probe: --streams) has in flight at once by default


class SpeedGateError(ValueError):
    """The probe's answers cannot be judged (missing servers, no rates)."""


def _rates(requests: list[Mapping[str, Any]], url: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in requests:
        v = r.get("predicted_per_second")
        if r.get("url") == url and isinstance(v, (int, float)) and v > 0 and math.isfinite(v):
            out[int(r["prompt"])] = float(v)
    return out


def _contention(*probes: Mapping[str, Any]) -> tuple[int, str, bool]:
    """Pairs the probes discarded for other requests, why they stopped early (or ""), /slots unreadable."""
    seen: list[int] = []
    gave_up, blind = "", False
    for probe in {id(p): p for p in probes}.values():
        seen.append(len(probe.get("contended") or []))
        gave_up = gave_up or str(probe.get("gave_up") or "")
        blind = blind or bool(probe.get("slots_unavailable"))
    return sum(seen), gave_up, blind


def judge(spec: Mapping[str, Any], plain: Mapping[str, Any], spec_url: str, plain_url: str,
          min_ratio: float = 1.0, draft_n_max: int | None = None, mode: str = "side by side",
          max_spread: float = 1.5) -> dict[str, Any]:
    """Judge probe output (``spec`` and ``plain`` may be the same side-by-side run, or two sequential runs)."""
    s = _rates(list(spec.get("requests", [])), spec_url)
    p = _rates(list(plain.get("requests", [])), plain_url)
    common = sorted(set(s) & set(p))
    contended, gave_up, blind = _contention(spec, plain)
    if not common and not gave_up:
        raise SpeedGateError(f"the speed probe has no prompt answered by both {spec_url} and {plain_url}")
    streams = int(spec.get("streams") or STREAMS)  # the probe says how many it had in flight
    out: dict[str, Any] = {"mode": mode, "prompts": len(common), "contended": contended, "min_ratio": min_ratio,
                           "max_spread": max_spread, "streams": streams, "concurrency": measured_at(streams),
                           "reference": REFERENCE}
    if common:
        iv = geomean_ratio_ci([s[i] / p[i] for i in common])
        spec_reqs = [r for r in spec.get("requests", []) if r.get("url") == spec_url and int(r["prompt"]) in common]
        drafted = sum(int(r.get("draft_n") or 0) for r in spec_reqs)
        accepted = sum(int(r.get("draft_n_accepted") or 0) for r in spec_reqs)
        n_tokens = sum(int(r.get("predicted_n") or 0) for r in spec_reqs)
        # at N streams the probe's rates are the service's aggregate: the record keeps them per stream (what the
        # exporter's decode tokens/s, per slot, is compared with) and the totals beside them
        spec_total, plain_total = mean([s[i] for i in common]), mean([p[i] for i in common])
        out.update({
            "speculative_tps": round(spec_total / streams, 3),
            "plain_tps": round(plain_total / streams, 3),
            "ratio": round(iv.estimate, 4),
            "ratio_low": round(iv.low, 4) if iv.low is not None else None,
            "ratio_high": round(iv.high, 4) if iv.high is not None else None,
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": round(accepted / drafted, 4) if drafted else None,
            # one stream's arithmetic (a round costs C plain steps); with N streams batched together it is not, and
            # no number beats a wrong one
            "break_even_acceptance": break_even(n_tokens, drafted, accepted, iv.estimate, draft_n_max)
            if streams <= 1 else None,
        })
        if streams > 1:
            out["speculative_total_tps"], out["plain_total_tps"] = round(spec_total, 3), round(plain_total, 3)
    out["verdict"], out["unproven_because"] = _verdict(out, min_ratio, max_spread, gave_up, blind)
    return out


def _verdict(out: Mapping[str, Any], min_ratio: float, max_spread: float, gave_up: str,
             blind: bool) -> tuple[str, str]:
    if blind:
        return "unproven", "the servers' /slots did not answer, so other requests could not be ruled out"
    if out["prompts"] < MIN_PROMPTS:
        why = f"{out['prompts']} prompt(s) measured without other requests on the servers, {MIN_PROMPTS} needed"
        return "unproven", f"{why} ({gave_up})" if gave_up else why
    lo, hi = out.get("ratio_low"), out.get("ratio_high")
    if lo is None or hi is None or lo <= 0 or hi / lo > max_spread:
        spread = f"{hi / lo:.2f}" if lo and hi else "unbounded"
        return "unproven", (f"the 95% interval is too wide for a verdict (high ÷ low = {spread}, at most "
                            f"{max_spread:g} allowed: llama_server_speed_gate_max_spread)")
    if int(out.get("streams") or STREAMS) > 1:
        return _verdict_at_n(Interval(out["ratio"], lo, hi, out["prompts"]), min_ratio)
    return ("pays" if out["ratio"] >= min_ratio else "loses"), ""


def _verdict_at_n(iv: Interval, min_ratio: float) -> tuple[str, str]:
    """At N streams: the tune's rule at N (confidently faster, not confidently under 1 + MARGIN_AT_N), and the
    operator's ``min_ratio`` on the estimate beside it."""
    if iv.estimate < min_ratio or iv.significantly_below(1.0 + MARGIN_AT_N):
        return "loses", ""
    if deployable(iv, MARGIN_AT_N):
        return "pays", ""
    return "unproven", (f"at N streams a speculative service must be confidently faster than plain decoding and not "
                        f"confidently under 1 + {MARGIN_AT_N:.0%} (the tune's rule at N): its 95% interval "
                        f"[{iv.low:.2f}, {iv.high:.2f}] reaches both sides of plain decoding")


def break_even(n_tokens: int, drafted: int, accepted: int, ratio: float, n_max: int | None) -> float | None:
    """Acceptance (accepted ÷ drafted) at which a draft-model service would match plain decoding here."""
    if not n_max or n_max < 1 or not drafted or n_tokens <= accepted or ratio <= 0:
        return None
    rounds = n_tokens - accepted  # every token is a round's last one or an accepted draft
    round_cost = (n_tokens / rounds) / ratio  # plain steps per round
    per_round = drafted / rounds
    return round(max(0.0, (round_cost - 1.0) / per_round), 4)


# what every speed-gate ratio is against (roles/llama_server/tasks/argv.yml renders it from the unit's own profile)
REFERENCE = ("the unit's own plain decoding: the baseline unit, rendered from the same profile with spec_type none and "
             "no draft model (the same build, numerics, threads, context and slots)")


def measured_at(streams: int = STREAMS) -> str:
    """The concurrency a measurement ran at, as every verdict line says it (pays, loses, unproven, fallback)."""
    if streams <= 1:
        return "at 1 stream (one request at a time)"
    return f"at {streams} streams ({streams} requests at a time)"


def concurrency_note(parallel: int | None, saturation: Mapping[str, Any] | None = None) -> str:
    """What a one-request-at-a-time measurement does not say for a service with several slots, and what this
    host's saturation run (``llama_server_saturation_report``) says at its N where there is one."""
    if not parallel or int(parallel) <= 1:
        return ""
    head = f" This service runs {knob('parallel').flag} {int(parallel)}"
    if saturation:
        return f"{head}: {at_concurrency(dict(saturation), int(parallel))}"
    return (f"{head}, where several slots share the machine and speculation's gain shrinks: run `specops saturate` "
            "on this host (reports/saturation-*.md) and deploy with llama_server_saturation_report set to its "
            "JSON before relying on it.")


def gate(spec_probe: Mapping[str, Any], plain_probe: Mapping[str, Any], spec_url: str, plain_url: str,
         min_ratio: float = 1.0, action: str = "fallback", service: str = "the service", draft_n_max: int | None = None,
         mode: str = "side by side", parallel: int | None = None, max_spread: float = 1.5,
         saturation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The deploy's verdict on the speed probes (roles/llama_server_speed_gate/tasks/verdict.yml): :func:`judge`'s
    ratio, interval, verdict and break-even, and the line to print (``message``: :func:`message`)."""
    out = judge(spec_probe, plain_probe, spec_url, plain_url, min_ratio, draft_n_max, mode, max_spread)
    out["message"] = message(out, action, service, parallel, saturation or None)
    return out


def message(result: Mapping[str, Any], action: str, service: str, parallel: int | None = None,
            saturation: Mapping[str, Any] | None = None) -> str:
    """The line the deploy prints: the figures, the concurrency they were measured at (:func:`measured_at`), the
    verdict and what the deploy does with it."""
    lo, hi = result.get("ratio_low"), result.get("ratio_high")
    ci = f" [{lo:.2f}–{hi:.2f}]" if lo is not None and hi is not None else ""
    dropped = f", {result['contended']} discarded: other requests ran" if result.get("contended") else ""
    streams = int(result.get("streams") or STREAMS)
    counted = f"{result['prompts']} prompts" if streams <= 1 else f"{result['prompts']} pairs of {streams} requests"
    if result.get("ratio") is not None:
        each = "" if streams <= 1 else " per stream"
        head = (f"speculative {result['speculative_tps']:.1f} tok/s{each} vs plain {result['plain_tps']:.1f} "
                f"tok/s{each} ({result['ratio']:.2f}×{ci}, {counted}, {result['mode']}{dropped})")
    else:
        head = f"no prompt measured without other requests on the servers ({result['mode']}{dropped})"
    head = f"{head} {measured_at(streams)}"
    if streams >= int(parallel or 1):  # measured at the service's own concurrency: nothing left unsaid about it
        parallel = None
    if result["verdict"] == "unproven":
        return f"{head}: UNPROVEN — {result['unproven_because']}; {unproven_action(action, service)}"
    if result["verdict"] == "pays":
        return f"{head}: speculation pays on this host; {service} keeps it.{concurrency_note(parallel, saturation)}"
    todo = ("run `specops bench` on this host to find a setting that pays (reports/speculative_benchmark.md), "
            "or set llama_server_spec_type: none")
    if action == "fallback":
        return (f"{head}: SPECULATION LOSES on this host — {service} now serves plain decoding "
                f"(llama_server_speed_gate=fallback). To try another setting, {todo}.")
    if action == "warn":
        return f"{head}: SPECULATION LOSES on this host — kept as configured (llama_server_speed_gate=warn); {todo}."
    return f"{head}: SPECULATION LOSES on this host (llama_server_speed_gate=fail); {todo}."


def unproven_action(action: str, service: str) -> str:
    """What the role does with an unproven verdict (:func:`after_verdict`; the fallback roles/llama_server's
    reinstall.yml carries out)."""
    again = ("measure again when the host is quiet (llama_server_speed_gate_refresh=true), or run `specops bench` "
             "in a maintenance window")
    if action == "fallback":
        return (f"{service} keeps the configuration already proven on this host (plain decoding where none "
                f"is); {again}.")
    if action == "warn":
        return f"{service} kept as configured (llama_server_speed_gate=warn); {again}."
    return f"the deploy fails (llama_server_speed_gate=fail); {again}."


SIDE_BY_SIDE, ONE_AFTER_THE_OTHER = "side by side", "one after the other"


def mode_from_fit(fit: Mapping[str, Any] | None) -> str:
    """Side by side when the memory fit leaves room for a plain server (the target's share of the estimate)
    beside the speculative one, after the fit's own margin; else one after the other. Always one after the other
    on llama.cpp's RPC devices (``RPC0``): a ggml-rpc-server serves one client at a time (0c1e57098), so a second
    llama-server waits at its ``--rpc`` until the first lets go."""
    if not fit or "breakdown" not in fit:
        return ONE_AFTER_THE_OTHER
    placement = fit.get("placement") or {}
    if any(str(d).startswith("RPC") for d in [*placement.get("devices", ()), *placement.get("draft_devices", ())]):
        return ONE_AFTER_THE_OTHER
    plain = sum(float(i["mib"]) for i in fit["breakdown"]
                if str(i["component"]).startswith("target") or i["component"] in ("runtime overhead", "prompt cache"))
    need = float(fit["needed_mib"]) + float(fit.get("margin_mib", 0)) + plain
    return SIDE_BY_SIDE if need <= float(fit["available_mib"]) else ONE_AFTER_THE_OTHER


# the record's verdicts, as the exporter reads them (one list: the deploy's reader and the exporter's agree)
RECORD_VERDICTS = EXPORTED_VERDICTS


def read_record(text: str | None, path: str) -> tuple[dict[str, Any], str]:
    """The record a deploy kept at ``path`` ({} when there is none) and, when the file is not a record, why
    (one line naming the file: the deploy then measures again and replaces it, saying so)."""
    if text is None:
        return {}, ""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(data, dict):
        return {}, f"{path} holds a JSON {type(data).__name__}, not a speed-gate record"
    if data.get("verdict") not in RECORD_VERDICTS:
        return {}, f"{path} has verdict {data.get('verdict')!r}, none of {', '.join(RECORD_VERDICTS)}"
    return data, ""


def gate_record(slurped: Any, path: str) -> dict[str, Any]:
    """:func:`read_record` of the record as the deploy reads it back: ``slurped``, an ansible.builtin.slurp result
    (a missing file: no content). -> {record, problem}."""
    content = slurped.get("content") if isinstance(slurped, Mapping) else None
    text = base64.b64decode(content).decode("utf-8", errors="replace") if content is not None else None
    record, problem = read_record(text, path)
    return {"record": record, "problem": problem}


# ---- the deploy's decisions (roles/llama_server_speed_gate: decide.yml, verdict.yml, record.yml)


def prompts_traffic(prompts: Sequence[str]) -> str:
    """The gate's own prompts as a record names its traffic: the sha256 prefix of their JSON (the role computed it as
    ``prompts | to_json | hash('sha256')``; records written then compare equal)."""
    return "prompts sha256 " + hashlib.sha256(json.dumps(list(prompts)).encode("utf-8")).hexdigest()[:16]


def traffic(prompts: Sequence[str], tune_tasks: Sequence[str] = ()) -> str:
    """What the gate times, as its record names it: the team's task files when the tune measured on them (each
    file's name and sha256 prefix, as the tune's record names them), else the gate's prompts."""
    if tune_tasks:
        from specops.tune.record import task_source  # its bench imports: only when asked

        return f"tasks {task_source([Path(str(p)) for p in tune_tasks])}"
    return prompts_traffic(prompts)


def _lost_message(prev: Mapping[str, Any]) -> str:
    """Why llama_server_speed_gate=fail refuses a unit its record says lost (one line, the record's figures)."""
    def got(key: str) -> Any:
        return prev.get(key, "?")

    measured = f", measured {prev['concurrency']}" if "concurrency" in prev else ""
    return (f"speed gate ({got('measured_at')}): this unit LOST on this host (speculative {got('speculative_tps')} "
            f"tok/s vs plain {got('plain_tps')} tok/s, {got('ratio')}×{measured}); not deployed "
            "(llama_server_speed_gate=fail), nothing was changed. Set llama_server_speed_gate_refresh=true to measure "
            "again, or llama_server_speed_gate=fallback to serve plain decoding.")


def before_install(read: Mapping[str, Any], unit_sha256: str, action: str, spec_type: str, refresh: bool,
                   prompts: Sequence[str], tune_tasks: Sequence[str] = (), tuned: bool = False) -> dict[str, Any]:
    """Before the staged unit is installed: what the gate will time and whether this unit needs measuring. ``read``:
    :func:`gate_record`'s answer for the host's record; ``unit_sha256``: the staged speculative unit's checksum (the
    record's key); ``tuned``: the tune ran on this deploy (then the gate times the team's task files, when there are
    any). The gate measures each speculative unit once (again when refreshed, when its verdict was unproven, or when
    what it times changed). A unit whose record says it lost, on the same traffic, is not measured again:
    ``plain_only`` (fallback serves plain decoding instead, ``plain_note`` says so), ``refusal`` (fail refuses it
    before anything changes), warn and off serve it.

    -> {prev, traffic, on_tasks, measure, lost_before, plain_only, plain_note, refusal}"""
    prev = dict(read.get("record") or {})
    on_tasks = bool(tune_tasks) and bool(tuned)
    now = traffic(prompts, tune_tasks if on_tasks else ())
    was = prev.get("traffic", prompts_traffic(prompts))  # a record from before traffic was kept: the prompts
    same_unit = prev.get("unit_sha256", "") == unit_sha256
    verdict = prev.get("verdict", "")
    speculates = spec_type != "none"
    measure = action != "off" and speculates and (refresh or not same_unit or verdict == "unproven" or was != now)
    lost = speculates and not refresh and same_unit and verdict == "loses" and was == now
    plain_only = action == "fallback" and lost
    return {
        "prev": prev, "traffic": now, "on_tasks": on_tasks, "measure": measure, "lost_before": lost,
        "plain_only": plain_only,
        "plain_note": (f"speed gate ({prev.get('measured_at', '?')}): {prev.get('message', '')} Set "
                       "llama_server_speed_gate_refresh=true to measure again.") if plain_only else "",
        "refusal": _lost_message(prev) if action == "fail" and lost else "",
    }


def after_verdict(result: Mapping[str, Any], action: str, plan: Mapping[str, Any], known_good_sha256: str | None,
                  unit_sha256: str, spec_type: str, build_id: str, measured_at: str | None = None) -> dict[str, Any]:
    """What the deploy does with :func:`gate`'s verdict (``plan``: :func:`before_install`'s answer;
    ``known_good_sha256``: the checksum of the host's known-good unit, None when there is none):

    * ``keep_known_good``: unproven, and the known-good unit is the one the gate's last verdict said pays for;
    * ``to_known_good`` (fallback): put that unit back; ``to_plain`` (fallback): serve plain decoding (loses, or
      unproven with no proven unit); ``fail`` (fail): loses or unproven fails the deploy (rolled back);
    * ``serving``: what the service serves now, and ``record``: the result kept for this unit (read by the exporter).
    """
    verdict = result["verdict"]
    prev = plan.get("prev") or {}
    keep = (verdict == "unproven" and known_good_sha256 is not None and prev.get("verdict", "") == "pays"
            and prev.get("unit_sha256", "") == known_good_sha256)
    if verdict == "pays" or action == "warn":
        serving = "speculative"
    elif action == "fail":
        serving = "not deployed"
    else:
        serving = "known-good" if verdict == "unproven" and keep else "plain"
    when = measured_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "keep_known_good": keep,
        "to_known_good": keep and action == "fallback",
        "to_plain": action == "fallback" and (verdict == "loses" or (verdict == "unproven" and not keep)),
        "fail": verdict in ("loses", "unproven") and action == "fail",
        "serving": serving,
        "record": {**result, "unit_sha256": unit_sha256, "measured_at": when, "action": action,
                   "spec_type": spec_type, "build_id": build_id, "traffic": plan.get("traffic"), "serving": serving},
    }


def running_record(measured: Any, plan: Mapping[str, Any], action: str, unit_sha256: str, spec_type: str,
                   build_id: str, unit_file: str, installed_sha256: str, path: str,
                   tune_summary: Mapping[str, Any] | None = None, tune_plain: bool = False) -> dict[str, Any]:
    """The record every proven deploy leaves for the unit that runs now (``unit_file``, ``installed_sha256``: the
    exporter checks it still runs, and calls the record stale when not): this run's measurement (``measured``, the
    record read back, an ansible.builtin.slurp result), or the verdict kept from an earlier run for this very unit
    (saying what it serves now and under which action), or ``not_measured`` saying why (gate off, nothing to
    measure, plain decoding as the tune's answer) -- never an earlier unit's verdict. With the tune's summary
    (``tune``) when the tune ran."""
    prev = plan.get("prev") or {}
    if plan.get("measure"):
        record = gate_record(measured, path)["record"]
    elif (action != "off" and prev.get("verdict", "") in ("pays", "loses")
          and prev.get("unit_sha256", "") == unit_sha256):
        record = {**prev, "serving": "plain" if plan.get("plain_only") else "speculative", "action": action}
    else:
        if tune_plain and spec_type == "none":
            t = tune_summary or {}
            why = (f"plain decoding is served, the tune's answer (specops tune, {t.get('when', '?')}: "
                   f"{t.get('reason') or 'no candidate pays here'})")
        elif action == "off":
            why = "llama_server_speed_gate is off"
        else:
            why = "the service does not speculate"
        record = {"verdict": "not_measured", "unit_sha256": unit_sha256, "action": action,
                  "serving": "plain" if spec_type == "none" else "speculative", "spec_type": spec_type,
                  "build_id": build_id, "message": f"not measured: {why}"}
    tune = {"tune": dict(tune_summary)} if tune_summary is not None else {}
    return {**record, "unit_file": unit_file, "installed_unit_sha256": installed_sha256, **tune}
