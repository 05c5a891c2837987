"""Bounded HTTP GETs against llama-server: timeouts, a total deadline and a body-size cap.

Every failure is turned into a :class:`FetchError` with a short ``kind`` used as a metric label.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

# Error kinds for HTTP endpoints (metric label values; keep the set small and stable).
HTTP_ERROR_KINDS = (
    "connect",
    "timeout",
    "protocol",
    "auth",  # HTTP 401 or 403: the server refused the exporter's API key (or wants one)
    "http_4xx",
    "http_5xx",
    "too_large",
    "invalid_json",
    "parse",
    "shape",
    "invalid_value",
    "invalid",  # a /metrics body cut short or with duplicated series
)


AUTH_STATUSES = (401, 403)


class FetchError(Exception):
    """A failed fetch or payload; ``kind`` is one of :data:`HTTP_ERROR_KINDS` (or ``other``)."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


def http_error(path: str, status: int, api_key: bool | None = None) -> FetchError:
    """The error for an HTTP error status: ``auth`` for 401/403 (saying whether the exporter sent a key, when
    ``api_key`` tells), else ``http_5xx`` or ``http_4xx``."""
    if status in AUTH_STATUSES:
        if api_key is None:
            why = "the server refused the exporter's credentials"
        elif api_key:
            why = "the server refused the exporter's API key: check --api-key-file"
        else:
            why = "the server wants an API key and the exporter has none: give it --api-key-file"
        return FetchError("auth", f"GET {path}: HTTP {status}: {why}", status)
    return FetchError("http_5xx" if status >= 500 else "http_4xx", f"GET {path}: HTTP {status}", status)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as exc:
            raise FetchError("invalid_json", f"invalid JSON: {self.body[:80]!r}") from exc


class BoundedFetcher:
    """GET with per-operation timeouts, an overall deadline and a cap on the body size."""

    def __init__(self, base_url: str, timeout: float = 2.0, max_bytes: int = 4 << 20,
                 api_key: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.has_api_key = bool(api_key)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout), headers=headers,
                                  follow_redirects=False, trust_env=False)

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, accept_status: tuple[int, ...] = ()) -> Response:
        """Return the response; raise :class:`FetchError` for transport errors, caps and HTTP errors.

        ``accept_status`` lists error statuses that are returned instead of raised (``/health`` → 503).
        """
        deadline = time.monotonic() + self.timeout
        try:
            with self._http.stream("GET", path) as resp:
                declared = resp.headers.get("content-length", "")
                if declared.isascii() and declared.isdigit() and int(declared) > self.max_bytes:
                    raise FetchError("too_large", f"GET {path}: Content-Length {declared} > {self.max_bytes}",
                                     resp.status_code)
                buf = bytearray()
                for chunk in resp.iter_bytes():
                    buf += chunk
                    if len(buf) > self.max_bytes:
                        raise FetchError("too_large", f"GET {path}: body exceeds {self.max_bytes} bytes",
                                         resp.status_code)
                    if time.monotonic() > deadline:
                        raise FetchError("timeout", f"GET {path}: body not complete within {self.timeout}s",
                                         resp.status_code)
                status = resp.status_code
        except FetchError:
            raise
        except httpx.TimeoutException as exc:
            raise FetchError("timeout", f"GET {path}: timed out after {self.timeout}s") from exc
        except httpx.ConnectError as exc:
            raise FetchError("connect", f"GET {path}: {exc}") from exc
        except httpx.HTTPError as exc:  # RemoteProtocolError, ReadError, DecodingError, ...
            raise FetchError("protocol", f"GET {path}: {type(exc).__name__}: {exc}") from exc
        if status >= 400 and status not in accept_status:
            raise http_error(path, status, self.has_api_key)
        return Response(status, bytes(buf))
