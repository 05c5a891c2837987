"""One request with retries: errors become short reasons, retries follow the backoff, and the record
always ends with an outcome (never an exception to the caller)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from specops.client import ServerError, chat_text
from specops.soak.accounting import Attempt, RequestRecord
from specops.soak.backoff import Backoff

NON_RETRYABLE = ("http_4xx",)
_HTTP_RE = re.compile(r"HTTP (\d{3})")


@dataclass(frozen=True)
class Reply:
    text: str
    predicted_n: int
    predicted_ms: float
    draft_n: int
    draft_accepted: int
    ttft: float | None = None  # streamed requests: seconds to the first content token of this attempt


def classify(exc: BaseException) -> tuple[str, str]:
    """(kind, short message) for an exception raised while sending one request."""
    msg = str(exc).strip().replace("\n", " ")[:200] or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return "connect", msg
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", msg
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return "connection_lost", msg
    if isinstance(exc, httpx.HTTPError):
        return "http_other", msg
    if isinstance(exc, ServerError):
        m = _HTTP_RE.search(msg)
        if m:
            code = int(m.group(1))
            if code in (408, 429) or code >= 500:
                return "http_5xx" if code >= 500 else "http_busy", msg
            return "http_4xx", msg
        if "invalid JSON" in msg:
            return "garbage", msg
        return "bad_shape", msg
    if isinstance(exc, BadReply):
        return "bad_shape", msg
    return "internal", f"{type(exc).__name__}: {msg}"


class BadReply(ValueError):
    """A 200 answer that is not a chat completion we can use."""


def parse_reply(body: Any) -> Reply:
    if not isinstance(body, dict):
        raise BadReply(f"expected a JSON object, got {type(body).__name__}")
    text = chat_text(body)
    timings = body.get("timings")
    if not isinstance(timings, dict):
        raise BadReply("no 'timings' object in the answer")
    ttft = body.get("ttft_s")
    try:
        return Reply(
            ttft=None if ttft is None else float(ttft),
            text=text,
            predicted_n=int(timings.get("predicted_n", 0) or 0),
            predicted_ms=float(timings.get("predicted_ms", 0.0) or 0.0),
            draft_n=int(timings.get("draft_n", 0) or 0),
            draft_accepted=int(timings.get("draft_n_accepted", 0) or 0),
        )
    except (TypeError, ValueError) as exc:
        raise BadReply(f"non-numeric timings: {exc}") from exc


def execute(
    rec: RequestRecord,
    send: Callable[[], Any],
    backoff: Backoff,
    clock: Callable[[], float],
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    pid_of: Callable[[], int | None] = lambda: None,
    abort: Callable[[], bool] = lambda: False,
) -> RequestRecord:
    """Send until success, a non-retryable error, ``max_attempts`` or ``give_up_after`` seconds.

    ``clock`` gives seconds since the start of the soak. ``abort`` stops retrying (the record then
    fails with reason ``aborted``), e.g. when the operator interrupts the run.
    """
    first = clock()
    while True:
        t0 = clock()
        try:
            reply = parse_reply(send())
        except Exception as exc:  # classified and recorded; nothing escapes
            kind, msg = classify(exc)
            rec.attempts.append(Attempt(t0, clock(), False, kind, msg, pid_of()))
            if kind in NON_RETRYABLE:
                rec.reason = f"{kind} (not retried): {msg}"
                break
            if len(rec.attempts) >= backoff.max_attempts:
                rec.reason = f"gave up after {len(rec.attempts)} attempts; last: {kind}: {msg}"
                break
            delay = backoff.delay(len(rec.attempts), rng)
            if clock() + delay - first > backoff.give_up_after:
                rec.reason = f"gave up after {clock() - first:.0f}s; last: {kind}: {msg}"
                break
            if abort():
                rec.reason = f"aborted; last: {kind}: {msg}"
                break
            sleep(delay)
            continue
        rec.attempts.append(Attempt(t0, clock(), True, pid=pid_of()))
        rec.text = reply.text
        rec.predicted_n = reply.predicted_n
        rec.predicted_ms = reply.predicted_ms
        rec.draft_n = reply.draft_n
        rec.draft_accepted = reply.draft_accepted
        if reply.ttft is not None:  # what the client waited: earlier failed attempts and backoff included
            rec.ttft = (t0 - first) + reply.ttft
        break
    rec.finish()
    return rec
