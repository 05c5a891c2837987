"""A small, typed client for llama-server's HTTP endpoints (httpx, explicit timeouts).

Note: every GET of ``/metrics`` resets llama-server's ``*_tokens_seconds`` gauges. Production code
should let the exporter be the only scraper and derive rates from the ``*_total`` counters.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specops.knobs import knob

SPEC_DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED_TOKENS = "llamacpp:spec_decode_num_accepted_tokens_total"
SPEC_DRAFTS = "llamacpp:spec_decode_num_drafts_total"
SPEC_ACCEPTED_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


class ServerError(RuntimeError):
    """llama-server answered with an error or an unexpected shape."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """Parse Prometheus text exposition with prometheus-client's parser.

    The parser strips ``_total`` from counter *family* names but keeps it on the samples, so most
    samples keep their exposed names. A series the server *types* as a counter without a ``_total``
    suffix (``llamacpp:n_tokens_max``) comes back as ``..._total``. No body-size cap here: long-running
    scrapers (the exporter) use their own capped fetcher.
    """
    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    return samples


def metric_value(samples: list[Sample], name: str, **labels: str) -> float | None:
    for s in samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


class LlamaServerClient:
    """Client for one llama-server instance."""

    def __init__(self, base_url: str, timeout: float = 30.0, api_key: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LlamaServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing ----------------------------------------------------------------------
    def _get_json(self, path: str, timeout: float | None = None) -> Any:
        resp = self._http.get(path, timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        if resp.status_code >= 400:
            raise ServerError(f"GET {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError as exc:
            raise ServerError(f"GET {path}: invalid JSON: {resp.text[:200]!r}") from exc

    def _post_json(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        resp = self._http.post(path, json=body, timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        if resp.status_code >= 400:
            raise ServerError(f"POST {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError as exc:
            raise ServerError(f"POST {path}: invalid JSON: {resp.text[:200]!r}") from exc

    def post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        """POST ``body`` to ``path``; the JSON answer (:class:`ServerError` for an HTTP error or no JSON)."""
        return self._post_json(path, body, timeout)

    # ---- endpoints ---------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """``{"status": "ok"}``; raises :class:`ServerError` while loading (503)."""
        return self._get_json("/health", timeout=5.0)

    def is_healthy(self) -> bool:
        try:
            return self.health().get("status") == "ok"
        except (httpx.HTTPError, ServerError):
            return False

    def wait_healthy(self, timeout: float = 120.0, interval: float = 0.25) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_healthy():
                return
            time.sleep(interval)
        raise TimeoutError(f"{self.base_url} did not become healthy within {timeout:.0f}s")

    def props(self) -> dict[str, Any]:
        return self._get_json("/props")

    def slots(self, timeout: float | None = None) -> list[dict[str, Any]]:
        data = self._get_json("/slots", timeout=timeout)
        if not isinstance(data, list):
            raise ServerError(f"/slots: expected a list, got {type(data).__name__}")
        return data

    def metrics_text(self) -> str:
        resp = self._http.get("/metrics")
        if resp.status_code == 501:
            raise ServerError(f"/metrics is disabled: start llama-server with {knob('metrics').flag}")
        if resp.status_code >= 400:
            raise ServerError(f"GET /metrics: HTTP {resp.status_code}")
        return resp.text

    def metrics(self) -> list[Sample]:
        return parse_metrics(self.metrics_text())

    def completion(self, prompt: str, n_predict: int = 32, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "seed": 42}
        body.update(params)
        return self._post_json("/completion", body)

    def chat(self, messages: list[dict[str, str]], max_tokens: int = 64, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": 42}
        body.update(params)
        return self._post_json("/v1/chat/completions", body)

    def chat_stream(self, messages: list[dict[str, str]], max_tokens: int = 64, **params: Any) -> dict[str, Any]:
        """A streamed chat completion, assembled into the non-streamed shape (``choices[0].message.content``
        and the final chunk's ``timings``) plus ``ttft_s``: seconds from sending to the first content token,
        measured here (what a client waits, queueing included)."""
        body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": 42,
                                "stream": True}
        body.update(params)
        t0 = time.monotonic()
        ttft: float | None = None
        parts: list[str] = []
        timings: Any = None
        done = False
        with self._http.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code >= 400:
                raise ServerError(f"POST /v1/chat/completions: HTTP {resp.status_code}: {resp.read()[:300]!r}")
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError as exc:
                    raise ServerError(f"POST /v1/chat/completions: invalid JSON in stream: {data[:200]!r}") from exc
                if not isinstance(chunk, dict):
                    raise ServerError(f"POST /v1/chat/completions: stream chunk is not an object: {data[:200]!r}")
                if "error" in chunk:
                    raise ServerError(f"POST /v1/chat/completions: HTTP 500: error in stream: {data[:300]}")
                for choice in chunk.get("choices") or []:
                    content = ((choice or {}).get("delta") or {}).get("content")
                    if content:
                        if ttft is None:
                            ttft = time.monotonic() - t0
                        parts.append(str(content))
                if "timings" in chunk:
                    timings = chunk["timings"]
        if not done:
            raise ServerError("POST /v1/chat/completions: the stream ended without [DONE]")
        if ttft is None:  # no content at all (e.g. an immediate end of generation): the whole answer time
            ttft = time.monotonic() - t0
        return {"choices": [{"message": {"role": "assistant", "content": "".join(parts)}}],
                "timings": timings, "ttft_s": ttft}


def chat_text(response: dict[str, Any]) -> str:
    try:
        return str(response["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError) as exc:
        raise ServerError(f"unexpected chat response shape: {str(response)[:200]}") from exc
