"""What a saturation report concludes, per concurrency level and in one sentence: read by the soak's report
(specops.soak.saturation_report), the deploy's speed gate (specops.speedgate) and the bench's inventory writer,
none of which imports another's code for it."""

from __future__ import annotations

from typing import Any

from specops.knobs import knob


def level_verdicts(data: dict[str, Any]) -> list[tuple[int, str, float | None]]:
    """(N, pays | loses | unsettled, speculative ÷ plain total tokens/s) per level. An N counts as paying only when
    every block's paired ratio is above 1 (the blocks alternate the arms, so drift cancels); losing, when every
    block's ratio is below 1; anything else is unsettled."""
    verdicts: list[tuple[int, str, float | None]] = []
    for lv in data.get("levels") or []:
        br = lv.get("block_ratios") or []
        v = "pays" if br and min(br) > 1 else "loses" if br and max(br) < 1 else "unsettled"
        verdicts.append((int(lv["level"]), v, lv.get("ratio_geomean")))
    return verdicts


def at_concurrency(data: dict[str, Any], parallel: int) -> str:
    """What a saturation run says for a service with ``parallel`` slots, in one sentence."""
    run = f"saturation run {data.get('run_id', '?')}"
    levels = {n: (v, r) for n, v, r in level_verdicts(data)}
    if parallel in levels:
        v, r = levels[parallel]
        figure = f" ({r:.2f}× plain decoding's total tokens/s)" if r is not None else ""
        said = {"pays": "speculation pays", "loses": "speculation LOSES",
                "unsettled": "speculation neither pays nor loses in every block"}[v]
        return f"{run}: at N={parallel} {said}{figure}."
    measured = ", ".join(f"N={n}" for n in sorted(levels)) or "no level"
    return f"{run} did not measure N={parallel} ({measured}): run `specops saturate` at that N."


def meaning(data: dict[str, Any]) -> str:
    """One sentence for a user: at which N speculation stops paying on this host, and what the deploy should do."""
    verdicts = level_verdicts(data)
    if not verdicts:
        return "No level ran: nothing to conclude."
    figures = ", ".join(f"N={n} {r:.2f}×" if r is not None else f"N={n} –" for n, _v, r in verdicts)
    paying = [n for n, v, _r in verdicts if v == "pays"]
    losing = [n for n, v, _r in verdicts if v == "loses"]
    par = knob("parallel").role_var
    if len(losing) == len(verdicts):
        return (f"Speculation loses at every concurrency measured ({figures} of plain decoding's tokens/s): on this "
                f"host deploy plain decoding (`llama_server_spec_type: none`) whatever `{par}` is.")
    if len(paying) == len(verdicts):
        return (f"Speculation pays at every concurrency measured ({figures}): keep it for `{par}` up to "
                f"{max(paying)}; measure again before going higher.")
    if paying and losing and max(paying) < min(losing):
        return (f"Speculation pays up to N={max(paying)} and stops paying from N={min(losing)} ({figures}): deploy "
                f"it only with `{par}` ≤ {max(paying)}, or plain decoding for more slots.")
    return (f"Mixed or unsettled ({figures}): no concurrency where speculation pays in every block; deploy plain "
            "decoding until a longer run settles it.")
