"""Filters for the deploy's speed gate (specops.speedgate) and the verify probe it follows (specops.probe). Both
modules pull in the bench's statistics or an HTTP client: each adapter imports its module when it is called. The
speed gate's task files (roles/llama_server_speed_gate/tasks/*.yml) decide nothing themselves: before the install
(specops_gate_before_install), after the verdict (specops_gate_after_verdict) and for the unit that runs at the end
(specops_gate_running_record), they ask these."""

from __future__ import annotations

from typing import Any

from specops.filters import optional_int, refused, strings


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


def gate_before_install(read: dict[str, Any], unit_sha256: str, action: str, spec_type: str, refresh: Any,
                        prompts: list[str], tune_tasks: list[str] | None = None, tuned: Any = False) -> dict[str, Any]:
    """Does this unit need the speed gate, and did it lose before (serve plain decoding, or refuse it)?"""
    from specops.speedgate import before_install

    return before_install(read, str(unit_sha256), str(action), str(spec_type), bool(refresh), strings(prompts),
                          strings(tune_tasks), bool(tuned))


def gate_after_verdict(result: dict[str, Any], action: str, plan: dict[str, Any], known_good_sha256: str | None,
                       unit_sha256: str, spec_type: str, build_id: str) -> dict[str, Any]:
    """What the deploy does with the verdict: the record, what the service serves, fall back or fail."""
    from specops.speedgate import after_verdict

    return after_verdict(result, str(action), plan, known_good_sha256 or None, str(unit_sha256), str(spec_type),
                         str(build_id))


def gate_running_record(measured: Any, plan: dict[str, Any], action: str, unit_sha256: str, spec_type: str,
                        build_id: str, unit_file: str, installed_sha256: str, path: str,
                        tune_summary: dict[str, Any] | None = None, tune_plain: Any = False) -> dict[str, Any]:
    """The speed gate's record for the unit that runs now, at the end of a proven deploy."""
    from specops.speedgate import running_record

    return running_record(measured, plan, str(action), str(unit_sha256), str(spec_type), str(build_id),
                          str(unit_file), str(installed_sha256), str(path), tune_summary, bool(tune_plain))


def probe_summary(raw: dict[str, Any]) -> dict[str, Any]:
    from specops.probe import summarize_probe  # the probe's client pulls in httpx

    return summarize_probe(raw)


FILTERS = {
    "specops_speed_gate": speed_gate,
    "specops_gate_mode": gate_mode,
    "specops_gate_record": gate_record,
    "specops_gate_before_install": gate_before_install,
    "specops_gate_after_verdict": gate_after_verdict,
    "specops_gate_running_record": gate_running_record,
    "specops_probe_summary": probe_summary,
}
