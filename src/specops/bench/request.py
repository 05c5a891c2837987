"""One timed, streamed chat request: text, time to first token, end-to-end latency, server timings.

Streaming is used so time to first token is measured by the client as a user would see it; the
final SSE chunk carries llama-server's ``timings`` (``predicted_per_second``, ``draft_n`` …).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx


class RequestFailed(RuntimeError):
    """The server did not answer the request (closed the connection, HTTP error, bad stream)."""


@dataclass
class RequestResult:
    text: str
    ttft_s: float | None
    e2e_s: float
    finish_reason: str | None
    timings: dict[str, Any] = field(default_factory=dict)
    first_token_at: float | None = None  # time.monotonic() when the first / last content chunk arrived
    last_token_at: float | None = None

    @property
    def n_predicted(self) -> int:
        return int(self.timings.get("predicted_n", 0) or 0)

    @property
    def decode_tps(self) -> float | None:
        """Server-side decode rate (tokens after the first, from llama-server's timings)."""
        v = self.timings.get("predicted_per_second")
        return float(v) if v else None

    @property
    def wall_decode_tps(self) -> float | None:
        """Client-side decode rate: tokens after the first over the time after the first token."""
        if self.ttft_s is None or self.n_predicted < 2 or self.e2e_s <= self.ttft_s:
            return None
        return (self.n_predicted - 1) / (self.e2e_s - self.ttft_s)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(n_predicted=self.n_predicted, decode_tps=self.decode_tps, wall_decode_tps=self.wall_decode_tps)
        return d


def chat_body(messages: list[dict[str, str]], max_tokens: int, seed: int) -> dict[str, Any]:
    """The request every arm gets: greedy, fixed seed and max tokens, no prompt cache reuse."""
    return {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": seed,
        "cache_prompt": False,
        "stream": True,
    }


def stream_chat(http: httpx.Client, body: dict[str, Any], timeout: float = 900.0) -> RequestResult:
    t0 = time.perf_counter()
    ttft: float | None = None
    first: float | None = None
    last: float | None = None
    parts: list[str] = []
    finish: str | None = None
    timings: dict[str, Any] = {}
    try:
        with http.stream("POST", "/v1/chat/completions", json=body, timeout=timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise RequestFailed(f"HTTP {resp.status_code}: {resp.text[:300]}")
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except json.JSONDecodeError as exc:
                    raise RequestFailed(f"bad SSE payload: {payload[:200]!r}") from exc
                if "error" in chunk:
                    raise RequestFailed(f"server error: {chunk['error']}")
                for choice in chunk.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        last = time.monotonic()
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                            first = last
                        parts.append(content)
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                if "timings" in chunk:
                    timings = chunk["timings"]
    except httpx.HTTPError as exc:
        raise RequestFailed(f"{type(exc).__name__}: {exc}") from exc
    return RequestResult("".join(parts), ttft, time.perf_counter() - t0, finish, timings, first, last)
