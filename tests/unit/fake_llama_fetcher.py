"""An in-process stand-in for llama-server's HTTP surface, for exporter tests that need no sockets.

:class:`FakeFetcher` replaces :class:`~specops.exporter.fetch.BoundedFetcher`: replies are set per path by the
test (a fixed answer, a :class:`FetchError` to raise, or a callable giving either per request) and default
to the real captures in tests/fixtures/llama-server-0c1e57098. :class:`FakeClock` drives the scraper's
clocks so time-based rules (windows, staleness, log throttling) are tested without waiting.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from specops.exporter.clocks import Clocks
from specops.exporter.config import ExporterConfig
from specops.exporter.fetch import FetchError, Response
from specops.exporter.logline import LogAcceptance
from specops.exporter.state import Scraper

CAP = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server-0c1e57098"
SPEC_METRICS = (CAP / "spec_metrics_after_bench.txt").read_text()

# server-side names of the speculative counters
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
PREDICTED = "llamacpp:tokens_predicted_total"
PREDICTED_SECONDS = "llamacpp:tokens_predicted_seconds_total"
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"  # labelled {position="N"}
# the exporter's derived series (ratios of counter deltas over one window): what a refused pass must not export
DERIVED = ("llamacpp_spec_acceptance_ratio", "llamacpp_spec_mean_acceptance_length",
           "llamacpp_decode_tokens_per_second", "llamacpp_spec_acceptance_by_position_ratio")
WALL_EPOCH = 1_760_000_000.0  # the fake wall clock: this + the fake monotonic time


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""


Route = Answer | FetchError | Callable[[], "Answer | FetchError"]


def capture_routes() -> dict[str, Route]:
    return {
        "/health": Answer(body=(CAP / "spec_health.json").read_bytes()),
        "/metrics": Answer(body=SPEC_METRICS.encode()),
        "/slots": Answer(body=(CAP / "spec_slots.json").read_bytes()),
        "/props": Answer(body=(CAP / "spec_props.json").read_bytes()),
    }


def down(path: str = "") -> FetchError:
    """What the bounded fetcher raises when nothing listens."""
    return FetchError("connect", f"GET {path}: [Errno 111] Connection refused")


class FakeFetcher:
    def __init__(self, routes: Mapping[str, Route] | None = None) -> None:
        self.routes: dict[str, Route] = dict(capture_routes() if routes is None else routes)
        self.hits: Counter[str] = Counter()

    def get(self, path: str, accept_status: tuple[int, ...] = ()) -> Response:
        self.hits[path] += 1
        route = self.routes.get(path, Answer(404, b"not found"))
        answer = route() if callable(route) else route
        if isinstance(answer, FetchError):
            raise answer
        if answer.status >= 400 and answer.status not in accept_status:
            kind = "http_5xx" if answer.status >= 500 else "http_4xx"
            raise FetchError(kind, f"GET {path}: HTTP {answer.status}", answer.status)
        return Response(answer.status, answer.body)

    def close(self) -> None:
        pass


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def fake_clocks(clock: FakeClock) -> Clocks:
    """Monotonic and wall time from ``clock``; every scrape takes no time at all."""
    return Clocks(monotonic=clock, wall=lambda: WALL_EPOCH + clock.t, perf=lambda: 0.0)


def fake_scraper(fetcher: FakeFetcher, clock: FakeClock | None = None, log_acceptance: LogAcceptance | None = None,
                 **cfg: object) -> Scraper:
    """A scraper of ``fetcher`` with no PID source and no nvidia-smi; ``cfg`` overrides ExporterConfig fields."""
    config = ExporterConfig(**{"pid_from_port": False, "nvidia_smi": "off", **cfg})  # type: ignore[arg-type]
    return Scraper(config, log_acceptance=log_acceptance, fetcher=fetcher,  # type: ignore[arg-type]
                   clocks=fake_clocks(clock or FakeClock()))


def samples(text: str) -> dict[str, float]:
    """The samples of a /metrics body by name, labels included (comments and unparseable values left out)."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name and not line.startswith("#"):
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def positions_for(base: Mapping[str, float], accepted: float) -> dict[str, float]:
    """``base``'s per-position accepted counters for an accepted total of ``accepted``, in whole tokens that add up
    to it, each growing with the total one token at a time, at the next position in turn (0, 1, ..., 0, ...): from
    ``base``'s own counters above its total, from zero below it (another server, or a restarted one)."""
    keys = sorted((k for k in base if k.startswith(PER_POS)), key=lambda k: int(k.split('"')[1]))
    total = base.get(ACCEPTED)
    if not keys or total is None:
        return {}
    start, extra = ((base, accepted - total) if accepted >= total else (dict.fromkeys(keys, 0.0), accepted))
    whole = int(extra)
    out = {k: start[k] + whole // len(keys) + (i < whole % len(keys)) for i, k in enumerate(keys)}
    out[keys[0]] += extra - whole  # a fraction of a token (no server counts one): where the sum still says it
    return out


def metrics_body(values: Mapping[str, float | str | None], base: str = SPEC_METRICS) -> bytes:
    """``base`` with the samples named in ``values`` set to that value (a string is written as is) or,
    for None, removed. Keys are sample names as the server writes them, labels included.

    As a server would send it, the per-position accepted counters add up to the accepted total: when ``values``
    sets that total (a number) and no per-position sample, ``base``'s per-position samples are scaled with it
    (issue 51: the exporter withdraws per-position figures that contradict the total). A test that wants them
    frozen, or lying, names them."""
    accepted = values.get(ACCEPTED)
    if isinstance(accepted, (int, float)) and not any(k.startswith(PER_POS) for k in values):
        values = {**positions_for(samples(base), float(accepted)), **values}
    out = []
    for line in base.splitlines():
        name, _, _ = line.rpartition(" ")
        if not line.startswith("#") and name in values:
            value = values[name]
            if value is None:
                continue
            line = f"{name} {value}"
        out.append(line)
    return ("\n".join(out) + "\n").encode()
