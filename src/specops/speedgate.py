"""The deploy's speed gate: does the speculative service beat plain decoding of the same build on this host?

The host runs ``roles/llama_server/files/speed_probe.py``: the same prompts sent once to the speculative
service and once to the baseline unit (side by side, alternating which goes first), or to each in turn when
memory holds only one copy of the target. This module judges the raw answers on the controller: decode
speed ratio per prompt (speculative ÷ plain, server-side ``predicted_per_second``), their geometric mean
with a 95% interval, and the decision the role acts on:

* ``pays``: the ratio reaches ``min_ratio`` (default 1.0): keep speculation;
* ``loses``: it does not: ``fallback`` (serve plain decoding), ``warn`` or ``fail``, as the operator chose.

From the same answers it derives the acceptance at which speculation would break even on this host (for
draft-model types, where every round drafts ``n_max`` tokens): one round costs ``C`` plain decode steps
(measured), yields ``1 + accepted`` tokens, so it breaks even when accepted per drafted token reaches
``(C - 1) / drafted per round``. Above 1 means no acceptance can make it pay here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specops.bench.stats import geomean_ratio_ci, mean
from specops.knobs import knob

DECISIONS = ("fallback", "warn", "fail", "off")


class SpeedGateError(ValueError):
    """The probe's answers cannot be judged (missing servers, no rates)."""


def _rates(requests: list[Mapping[str, Any]], url: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in requests:
        v = r.get("predicted_per_second")
        if r.get("url") == url and isinstance(v, (int, float)) and v > 0 and math.isfinite(v):
            out[int(r["prompt"])] = float(v)
    return out


def judge(spec: Mapping[str, Any], plain: Mapping[str, Any], spec_url: str, plain_url: str,
          min_ratio: float = 1.0, draft_n_max: int | None = None, mode: str = "side by side") -> dict[str, Any]:
    """Judge probe output (``spec`` and ``plain`` may be the same side-by-side run, or two sequential runs)."""
    s = _rates(list(spec.get("requests", [])), spec_url)
    p = _rates(list(plain.get("requests", [])), plain_url)
    common = sorted(set(s) & set(p))
    if not common:
        raise SpeedGateError(f"the speed probe has no prompt answered by both {spec_url} and {plain_url}")
    iv = geomean_ratio_ci([s[i] / p[i] for i in common])
    spec_tps, plain_tps = mean([s[i] for i in common]), mean([p[i] for i in common])
    drafted = sum(int(r.get("draft_n") or 0) for r in spec.get("requests", []) if r.get("url") == spec_url)
    accepted = sum(int(r.get("draft_n_accepted") or 0) for r in spec.get("requests", []) if r.get("url") == spec_url)
    n_tokens = sum(int(r.get("predicted_n") or 0) for r in spec.get("requests", []) if r.get("url") == spec_url)
    out: dict[str, Any] = {
        "mode": mode,
        "prompts": len(common),
        "speculative_tps": round(spec_tps, 3),
        "plain_tps": round(plain_tps, 3),
        "ratio": round(iv.estimate, 4),
        "ratio_low": round(iv.low, 4) if iv.low is not None else None,
        "ratio_high": round(iv.high, 4) if iv.high is not None else None,
        "min_ratio": min_ratio,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": round(accepted / drafted, 4) if drafted else None,
        "break_even_acceptance": break_even(n_tokens, drafted, accepted, iv.estimate, draft_n_max),
    }
    out["verdict"] = "pays" if iv.estimate >= min_ratio else "loses"
    return out


def break_even(n_tokens: int, drafted: int, accepted: int, ratio: float, n_max: int | None) -> float | None:
    """Acceptance (accepted ÷ drafted) at which a draft-model service would match plain decoding here."""
    if not n_max or n_max < 1 or not drafted or n_tokens <= accepted or ratio <= 0:
        return None
    rounds = n_tokens - accepted  # every token is a round's last one or an accepted draft
    round_cost = (n_tokens / rounds) / ratio  # plain steps per round
    per_round = drafted / rounds
    return round(max(0.0, (round_cost - 1.0) / per_round), 4)


def concurrency_note(parallel: int | None) -> str:
    """What a one-request-at-a-time measurement does not say for a service with several slots."""
    if not parallel or int(parallel) <= 1:
        return ""
    return (f" Measured one request at a time; this service runs {knob('parallel').flag} {int(parallel)}, where "
            "several slots "
            "share the machine and speculation's gain shrinks: run `specops saturate` on this host "
            "(reports/saturation-*.md) before relying on it.")


def message(result: Mapping[str, Any], action: str, service: str, parallel: int | None = None) -> str:
    """The line the deploy prints."""
    lo, hi = result.get("ratio_low"), result.get("ratio_high")
    ci = f" [{lo:.2f}–{hi:.2f}]" if lo is not None and hi is not None else ""
    head = (f"speculative {result['speculative_tps']:.1f} tok/s vs plain {result['plain_tps']:.1f} tok/s "
            f"({result['ratio']:.2f}×{ci}, {result['prompts']} prompts, {result['mode']})")
    if result["verdict"] == "pays":
        return f"{head}: speculation pays on this host; {service} keeps it.{concurrency_note(parallel)}"
    todo = ("run `specops bench` on this host to find a setting that pays (reports/speculative_benchmark.md), "
            "or set llama_server_spec_type: none")
    if action == "fallback":
        return (f"{head}: SPECULATION LOSES on this host — {service} now serves plain decoding "
                f"(llama_server_speed_gate=fallback). To try another setting, {todo}.")
    if action == "warn":
        return f"{head}: SPECULATION LOSES on this host — kept as configured (llama_server_speed_gate=warn); {todo}."
    return f"{head}: SPECULATION LOSES on this host (llama_server_speed_gate=fail); {todo}."


SIDE_BY_SIDE, ONE_AFTER_THE_OTHER = "side by side", "one after the other"


def mode_from_fit(fit: Mapping[str, Any] | None) -> str:
    """Side by side when the memory fit leaves room for a plain server (the target's share of the estimate)
    beside the speculative one, after the fit's own margin; else one after the other."""
    if not fit or "breakdown" not in fit:
        return ONE_AFTER_THE_OTHER
    plain = sum(float(i["mib"]) for i in fit["breakdown"]
                if str(i["component"]).startswith("target") or i["component"] in ("runtime overhead", "prompt cache"))
    need = float(fit["needed_mib"]) + float(fit.get("margin_mib", 0)) + plain
    return SIDE_BY_SIDE if need <= float(fit["available_mib"]) else ONE_AFTER_THE_OTHER
