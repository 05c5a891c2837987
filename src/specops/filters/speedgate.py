"""Filters for the deploy's speed gate (specops.speedgate) and the verify probe it follows (specops.probe). Both
modules pull in the bench's statistics or an HTTP client: each adapter imports its module when it is called."""

from __future__ import annotations

from typing import Any

from specops.filters import optional_int, refused


def speed_gate(spec_probe: dict[str, Any], plain_probe: dict[str, Any], spec_url: str, plain_url: str,
               min_ratio: float = 1.0, action: str = "fallback", service: str = "the service",
               draft_n_max: int | None = None, mode: str = "side by side", parallel: int | None = None,
               max_spread: float = 1.5, saturation: dict[str, Any] | None = None) -> dict[str, Any]:
    """Judge the speed probes: ratio, interval, verdict (pays | loses | unproven), the line to print, the
    break-even."""
    from specops.speedgate import SpeedGateError, gate

    with refused(SpeedGateError, prefix="speed gate: "):
        return gate(spec_probe, plain_probe, spec_url, plain_url, float(min_ratio), action, service,
                    optional_int(draft_n_max), mode, optional_int(parallel), float(max_spread), saturation)


def gate_mode(fit: dict[str, Any] | None) -> str:
    from specops.speedgate import mode_from_fit

    return mode_from_fit(fit)


def gate_record(slurped: Any, path: str) -> dict[str, Any]:
    """The speed gate's record as a deploy reads it back: a file that is not a record is named in one line
    (``problem``) and replaced, never a templating traceback."""
    from specops.speedgate import gate_record

    return gate_record(slurped, path)


def probe_summary(raw: dict[str, Any]) -> dict[str, Any]:
    from specops.probe import summarize_probe  # the probe's client pulls in httpx

    return summarize_probe(raw)


FILTERS = {
    "specops_speed_gate": speed_gate,
    "specops_gate_mode": gate_mode,
    "specops_gate_record": gate_record,
    "specops_probe_summary": probe_summary,
}
