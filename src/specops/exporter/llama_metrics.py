"""Parse llama-server's ``/metrics`` text into the series the exporter re-exposes.

Uses :func:`specops.client.parse_metrics` (prometheus-client's parser). A body that fails to parse as a
whole (truncated, garbage lines) is parsed line by line so one bad line does not lose the rest. Values
that are NaN, infinite or negative are dropped and counted (and named, for the derived series).

Two faults the lax parser lets through are reported separately, because the body as a whole cannot be
trusted: a body **cut short** (no final newline, as the text format requires, or ending in a ``# HELP`` /
``# TYPE`` line whose sample never came) and **duplicated series** (one name and label set twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specops.client import (
    SPEC_ACCEPTED_PER_POS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    Sample,
    parse_metrics,
)

# server name -> (exported name, help). Exported names drop the colon (reserved for recording rules).
COUNTERS: dict[str, tuple[str, str]] = {
    "llamacpp:prompt_tokens_total": ("llamacpp_prompt_tokens_total",
                                     "Prompt tokens processed, excluding cached tokens (server counter)."),
    "llamacpp:prompt_tokens_cached_total": ("llamacpp_prompt_tokens_cached_total",
                                            "Prompt tokens reused from the cache (server counter)."),
    "llamacpp:prompt_seconds_total": ("llamacpp_prompt_seconds_total",
                                      "Time spent processing prompts (server counter)."),
    "llamacpp:tokens_predicted_total": ("llamacpp_tokens_predicted_total",
                                        "Generated tokens (server counter)."),
    "llamacpp:tokens_predicted_seconds_total": ("llamacpp_tokens_predicted_seconds_total",
                                                "Time spent generating tokens (server counter)."),
    "llamacpp:n_decode_total": ("llamacpp_decode_calls_total",
                                "llama_decode() calls, excluding speculative and multimodal decoding."),
    SPEC_DRAFT_TOKENS: ("llamacpp_spec_draft_tokens_total", "Speculative: draft tokens generated."),
    SPEC_ACCEPTED_TOKENS: ("llamacpp_spec_accepted_tokens_total",
                           "Speculative: draft tokens accepted by the target model."),
    SPEC_DRAFTS: ("llamacpp_spec_drafts_total", "Speculative: verification steps (drafts checked)."),
}
GAUGES: dict[str, tuple[str, str]] = {
    "llamacpp:requests_processing": ("llamacpp_requests_processing", "Requests being processed."),
    "llamacpp:requests_deferred": ("llamacpp_requests_deferred", "Requests deferred (waiting for a slot)."),
    "llamacpp:n_busy_slots_per_decode": ("llamacpp_busy_slots_per_decode",
                                         "Average busy slots per llama_decode() call."),
    # The server types this one as a counter, but it is a high-water mark.
    "llamacpp:n_tokens_max": ("llamacpp_tokens_max", "Largest sequence length seen (prompt + generation)."),
}
# prometheus-client's parser renames samples of a counter-typed family that lack ``_total``.
GAUGES["llamacpp:n_tokens_max_total"] = GAUGES["llamacpp:n_tokens_max"]
PER_POS_NAME = "llamacpp_spec_accepted_tokens_by_position_total"
PER_POS_HELP = "Speculative: accepted draft tokens per draft position (server counter)."
SPEC_KEYS = ("llamacpp_spec_draft_tokens_total", "llamacpp_spec_accepted_tokens_total",
             "llamacpp_spec_drafts_total")
# The server's *_tokens_seconds gauges are reset by every GET and are deliberately not re-exposed.
IGNORED = frozenset({"llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds"})
MAX_POSITIONS = 64


@dataclass
class ServerMetrics:
    counters: dict[str, float] = field(default_factory=dict)  # exported name -> value
    gauges: dict[str, float] = field(default_factory=dict)
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    bad_lines: int = 0
    invalid_values: int = 0
    invalid_names: set[str] = field(default_factory=set)  # exported names whose value was dropped
    truncated: bool = False
    duplicates: int = 0  # samples whose name and labels were already seen

    @property
    def has_spec_counters(self) -> bool:
        return all(k in self.counters for k in SPEC_KEYS)

    @property
    def spec_counters_partial(self) -> bool:
        """Some speculative counters present and some missing or invalid: not a usable set."""
        present = sum(k in self.counters for k in SPEC_KEYS)
        return (0 < present < len(SPEC_KEYS)) or (present > 0 and bool(self.invalid_names & set(SPEC_KEYS)))

    @property
    def empty(self) -> bool:
        return not (self.counters or self.gauges or self.accepted_per_pos)


def _samples(text: str) -> tuple[list[Sample], int]:
    try:
        return parse_metrics(text), 0
    except Exception:  # the parser raises assorted exception types on garbage
        pass
    samples: list[Sample] = []
    bad = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            samples.extend(parse_metrics(stripped + "\n"))
        except Exception:
            bad += 1
    return samples, bad


def is_truncated(text: str) -> bool:
    """Cut short: no final newline, or the last line announces a series that never came."""
    if not text.endswith("\n"):
        return True
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
    return last.startswith(("# HELP ", "# TYPE "))


def _duplicates(samples: list[Sample]) -> int:
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    dups = 0
    for s in samples:
        key = (s.name, frozenset(s.labels.items()))
        dups += key in seen
        seen.add(key)
    return dups


def _exported_name(server_name: str) -> str:
    if server_name in COUNTERS:
        return COUNTERS[server_name][0]
    if server_name in GAUGES:
        return GAUGES[server_name][0]
    return PER_POS_NAME


def parse_server_metrics(text: str) -> ServerMetrics:
    samples, bad = _samples(text)
    out = ServerMetrics(bad_lines=bad, truncated=bool(text) and is_truncated(text),
                        duplicates=_duplicates(samples))
    for s in samples:
        if s.name in IGNORED:
            continue
        value = s.value
        valid = isinstance(value, float) and math.isfinite(value) and value >= 0
        known = s.name in COUNTERS or s.name in GAUGES or s.name == SPEC_ACCEPTED_PER_POS
        if known and not valid:
            out.invalid_values += 1
            out.invalid_names.add(_exported_name(s.name))
            continue
        if s.name in COUNTERS:
            out.counters[COUNTERS[s.name][0]] = value
        elif s.name in GAUGES:
            out.gauges[GAUGES[s.name][0]] = value
        elif s.name == SPEC_ACCEPTED_PER_POS:
            pos = s.labels.get("position", "")
            if pos.isascii() and pos.isdigit() and int(pos) < MAX_POSITIONS:
                out.accepted_per_pos[int(pos)] = value
            else:
                out.invalid_values += 1
                out.invalid_names.add(PER_POS_NAME)
    return out
