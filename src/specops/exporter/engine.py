"""Which inference server the exporter watches: ``llama.cpp`` (llama-server) or ``tabbyapi`` (TabbyAPI).

Chosen by ``--engine`` (default ``llama.cpp``), not guessed from the ``/metrics`` prefix: the endpoints to read
(``/slots``, ``/props``), what ``/health`` says when healthy and whether the command line is llama-server's all
follow from the engine, before the first answer arrives and through a server that is down; a guess would make
series appear and vanish with the server. A body with the other engine's prefix is named in the error.

Both engines feed the **same exported series** (``llamacpp_*``), so the rules and the dashboard work for both.
A TabbyAPI series is mapped only where it means the same as llama-server's; what TabbyAPI cannot give is
absent (never 0) and listed in :attr:`Engine.unsupported`, which the exporter exports as
``llamacpp_exporter_unsupported_series{engine,series,reason} 1`` and logs at startup.

TabbyAPI's ``/metrics`` (opt-in, ``network.enable_metrics: true``) exists only in theroyallab/tabbyAPI pull
request #443 (head ``5b7389492575``, 2026-08-01, not in ``main`` as of ``e632af4``); its series are read from
that code's ``common/metrics.py`` (fixture: tests/fixtures/exporter/tabbyapi-5b73894.txt).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specops.client import SPEC_ACCEPTED_PER_POS, SPEC_ACCEPTED_TOKENS, SPEC_DRAFT_TOKENS, SPEC_DRAFTS

LLAMA_CPP, TABBYAPI = "llama.cpp", "tabbyapi"
ENGINES = (LLAMA_CPP, TABBYAPI)

SPEC_DRAFT_KEY = "llamacpp_spec_draft_tokens_total"
SPEC_ACCEPTED_KEY = "llamacpp_spec_accepted_tokens_total"
SPEC_DRAFTS_KEY = "llamacpp_spec_drafts_total"
SPEC_KEYS = (SPEC_DRAFT_KEY, SPEC_ACCEPTED_KEY, SPEC_DRAFTS_KEY)

# exported name -> help, shared by both engines
HELP: dict[str, str] = {
    "llamacpp_prompt_tokens_total": "Prompt tokens processed, excluding cached tokens (server counter).",
    "llamacpp_prompt_tokens_cached_total": "Prompt tokens reused from the cache (server counter).",
    "llamacpp_prompt_seconds_total": "Time spent processing prompts (server counter).",
    "llamacpp_tokens_predicted_total": "Generated tokens (server counter).",
    "llamacpp_tokens_predicted_seconds_total": "Time spent generating tokens (server counter).",
    "llamacpp_decode_calls_total": "llama_decode() calls, excluding speculative and multimodal decoding.",
    SPEC_DRAFT_KEY: "Speculative: draft tokens generated.",
    SPEC_ACCEPTED_KEY: "Speculative: draft tokens accepted by the target model.",
    SPEC_DRAFTS_KEY: "Speculative: verification steps (drafts checked).",
    "llamacpp_requests_processing": "Requests being processed.",
    "llamacpp_requests_deferred": "Requests deferred (waiting for a slot).",
    "llamacpp_busy_slots_per_decode": "Average busy slots per llama_decode() call.",
    "llamacpp_tokens_max": "Largest sequence length seen (prompt + generation).",
}


@dataclass(frozen=True)
class Engine:
    name: str
    label: str  # how messages name the server
    counters: Mapping[str, str]  # server series -> exported counter
    gauges: Mapping[str, str]  # server series -> exported gauge
    per_position: str | None  # server series of accepted tokens per draft position
    spec_keys: tuple[str, ...]  # the exported speculative counters this engine gives
    healthy_status: str  # /health's "status" when healthy
    slots: bool  # serves /slots
    props: bool  # serves /props
    llama_argv: bool  # its command line is llama-server's (draft model, --spec-type, build-info.json)
    unsupported: tuple[tuple[str, str], ...] = field(default=())  # (exported series, why it is absent)

    def server_names(self) -> frozenset[str]:
        names = {*self.counters, *self.gauges}
        return frozenset(names | {self.per_position} if self.per_position else names)


_LLAMA_COUNTERS = {
    "llamacpp:prompt_tokens_total": "llamacpp_prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total": "llamacpp_prompt_tokens_cached_total",
    "llamacpp:prompt_seconds_total": "llamacpp_prompt_seconds_total",
    "llamacpp:tokens_predicted_total": "llamacpp_tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total": "llamacpp_tokens_predicted_seconds_total",
    "llamacpp:n_decode_total": "llamacpp_decode_calls_total",
    SPEC_DRAFT_TOKENS: SPEC_DRAFT_KEY,
    SPEC_ACCEPTED_TOKENS: SPEC_ACCEPTED_KEY,
    SPEC_DRAFTS: SPEC_DRAFTS_KEY,
}
_LLAMA_GAUGES = {
    "llamacpp:requests_processing": "llamacpp_requests_processing",
    "llamacpp:requests_deferred": "llamacpp_requests_deferred",
    "llamacpp:n_busy_slots_per_decode": "llamacpp_busy_slots_per_decode",
    # The server types this one as a counter, but it is a high-water mark; prometheus-client's parser renames
    # samples of a counter-typed family that lack ``_total``.
    "llamacpp:n_tokens_max": "llamacpp_tokens_max",
    "llamacpp:n_tokens_max_total": "llamacpp_tokens_max",
}

# TabbyAPI (PR #443 at 5b73894, common/metrics.py). Mapped where the meaning is llama-server's:
# prompt_tokens_total counts processed tokens only, cached_tokens_total those served from the prefix cache,
# spec_decode_num_draft_tokens_total is accepted + rejected drafted tokens, accepted the accepted ones.
_TABBY_COUNTERS = {
    "tabbyapi:prompt_tokens_total": "llamacpp_prompt_tokens_total",
    "tabbyapi:cached_tokens_total": "llamacpp_prompt_tokens_cached_total",
    "tabbyapi:prompt_seconds_total": "llamacpp_prompt_seconds_total",
    "tabbyapi:tokens_predicted_total": "llamacpp_tokens_predicted_total",
    "tabbyapi:tokens_predicted_seconds_total": "llamacpp_tokens_predicted_seconds_total",
    "tabbyapi:spec_decode_num_draft_tokens_total": SPEC_DRAFT_KEY,
    "tabbyapi:spec_decode_num_accepted_tokens_total": SPEC_ACCEPTED_KEY,
}
_TABBY_GAUGES = {
    "tabbyapi:requests_processing": "llamacpp_requests_processing",
    "tabbyapi:requests_deferred": "llamacpp_requests_deferred",
}
_NO_STEPS = ("TabbyAPI counts no drafts checked (its spec_decode_num_decode_steps_total is computed as generated "
             "minus accepted tokens)")
_NO_SLOTS = "TabbyAPI has no /slots"
TABBY_UNSUPPORTED: tuple[tuple[str, str], ...] = (
    (SPEC_DRAFTS_KEY, _NO_STEPS),
    ("llamacpp_spec_mean_acceptance_length", _NO_STEPS),
    ("llamacpp_spec_accepted_tokens_by_position_total", "TabbyAPI has no per-position acceptance counters"),
    ("llamacpp_spec_acceptance_by_position_ratio", "TabbyAPI has no per-position acceptance counters"),
    ("llamacpp_decode_calls_total", "TabbyAPI has no decode-call counter"),
    ("llamacpp_busy_slots_per_decode", "TabbyAPI has no slots"),
    ("llamacpp_tokens_max", "TabbyAPI's n_tokens_max is the largest prompt, not prompt + generation"),
    ("llamacpp_slots", _NO_SLOTS),
    ("llamacpp_slots_busy", _NO_SLOTS),
    ("llamacpp_slots_speculative", _NO_SLOTS),
)

ENGINE_BY_NAME: dict[str, Engine] = {
    LLAMA_CPP: Engine(LLAMA_CPP, "llama-server", _LLAMA_COUNTERS, _LLAMA_GAUGES, SPEC_ACCEPTED_PER_POS, SPEC_KEYS,
                      healthy_status="ok", slots=True, props=True, llama_argv=True),
    TABBYAPI: Engine(TABBYAPI, "TabbyAPI", _TABBY_COUNTERS, _TABBY_GAUGES, None,
                     (SPEC_DRAFT_KEY, SPEC_ACCEPTED_KEY), healthy_status="healthy", slots=False, props=False,
                     llama_argv=False, unsupported=TABBY_UNSUPPORTED),
}


def engine_named(name: str) -> Engine:
    return ENGINE_BY_NAME[name]


def other_engine(text: str, engine: Engine) -> str | None:
    """The engine whose prefix a body uses when it is not ``engine``'s (for a plain error message)."""
    for other, prefix in ((LLAMA_CPP, "llamacpp:"), (TABBYAPI, "tabbyapi:")):
        if other != engine.name and prefix in text[:65536]:
            return other
    return None
