"""Parse the server's ``/metrics`` text (llama-server's, or TabbyAPI's: :mod:`~specops.exporter.engine`) into
the series the exporter re-exposes.

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

from specops.client import Sample, parse_metrics
from specops.exporter.engine import HELP, LLAMA_CPP, SPEC_KEYS, Engine, engine_named

LLAMA = engine_named(LLAMA_CPP)
# llama-server name -> (exported name, help). Exported names drop the colon (reserved for recording rules).
COUNTERS: dict[str, tuple[str, str]] = {k: (v, HELP[v]) for k, v in LLAMA.counters.items()}
GAUGES: dict[str, tuple[str, str]] = {k: (v, HELP[v]) for k, v in LLAMA.gauges.items()}
PER_POS_NAME = "llamacpp_spec_accepted_tokens_by_position_total"
PER_POS_HELP = "Speculative: accepted draft tokens per draft position (server counter)."
__all__ = ["COUNTERS", "GAUGES", "PER_POS_HELP", "PER_POS_NAME", "SPEC_KEYS", "ServerMetrics",
           "parse_server_metrics"]
# The servers' *_tokens_seconds gauges are not re-exposed (llama-server resets them on every GET; TabbyAPI's
# is a lifetime average): rates come from the counters. Names not mapped by the engine are ignored.
MAX_POSITIONS = 64
MAX_EXAMPLES = 3


@dataclass
class ServerMetrics:
    counters: dict[str, float] = field(default_factory=dict)  # exported name -> value
    gauges: dict[str, float] = field(default_factory=dict)
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    bad_lines: int = 0
    invalid_values: int = 0
    invalid_names: set[str] = field(default_factory=set)  # exported names whose value was dropped
    invalid_examples: list[str] = field(default_factory=list)  # the first few dropped samples, for the log
    truncated: bool = False
    duplicates: int = 0  # samples whose name and labels were already seen
    spec_keys: tuple[str, ...] = SPEC_KEYS  # the speculative counters the engine gives (all or none count)

    @property
    def has_spec_counters(self) -> bool:
        return all(k in self.counters for k in self.spec_keys)

    @property
    def spec_counters_partial(self) -> bool:
        """Some speculative counters present and some missing or invalid: not a usable set."""
        present = sum(k in self.counters for k in self.spec_keys)
        return (0 < present < len(self.spec_keys)) or (present > 0 and bool(self.invalid_names & set(self.spec_keys)))

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


def _exported_name(engine: Engine, server_name: str) -> str:
    return engine.counters.get(server_name) or engine.gauges.get(server_name) or PER_POS_NAME


def parse_server_metrics(text: str, engine: Engine = LLAMA) -> ServerMetrics:
    samples, bad = _samples(text)
    out = ServerMetrics(bad_lines=bad, truncated=bool(text) and is_truncated(text),
                        duplicates=_duplicates(samples), spec_keys=engine.spec_keys)
    for s in samples:
        value = s.value
        valid = isinstance(value, float) and math.isfinite(value) and value >= 0
        known = s.name in engine.counters or s.name in engine.gauges or s.name == engine.per_position
        if not known:
            continue
        if not valid:
            out.invalid_values += 1
            out.invalid_names.add(_exported_name(engine, s.name))
            _example(out, s)
            continue
        if s.name in engine.counters:
            out.counters[engine.counters[s.name]] = value
        elif s.name in engine.gauges:
            out.gauges[engine.gauges[s.name]] = value
        else:
            pos = s.labels.get("position", "")
            if pos.isascii() and pos.isdigit() and int(pos) < MAX_POSITIONS:
                out.accepted_per_pos[int(pos)] = value
            else:
                out.invalid_values += 1
                out.invalid_names.add(PER_POS_NAME)
                _example(out, s)
    return out


def _example(out: ServerMetrics, s: Sample) -> None:
    if len(out.invalid_examples) < MAX_EXAMPLES:
        labels = ",".join(f'{k}="{v[:20]}"' for k, v in sorted(s.labels.items()))
        out.invalid_examples.append(f"{s.name}{{{labels}}} {s.value}" if labels else f"{s.name} {s.value}")
