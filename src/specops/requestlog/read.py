"""A request log: JSONL, one OpenAI-style chat completion body a line, as proxies and gateways write it, bare or
wrapped (``{"request": {...}}``, ``{"body": {...}}``, a body given as a JSON string too).

Each body becomes the bench's messages (roles system / user / assistant, text content), the way the standard set
writes tool calls: the body's ``tools`` go into the system message (``Tools: [...]``), a tool result becomes a user
turn (``Tool result: ...``) and an assistant's tool calls its text (``{"name": ..., "arguments": {...}}``). Content
given as parts keeps its text parts. Anything else (a line that is not UTF-8 or not JSON, a body without messages,
an image, a conversation that ends with the assistant) is a bad line, named by the file and the line, never by the
prompt's text.

A log is read the way gateways write it: a log rotated or copied while the gateway was writing starts and ends with a
cut line. So a bad line is skipped and counted (the first :data:`REASONS_KEPT` kept, as ``file:line: why``) and the
rest is read; blank lines are ignored, not counted. The log is refused (:class:`LogError`, naming the count and the
first bad lines) only when more lines are skipped than a share allows, or when no request is left. The share
(``specops tasks --max-skipped``, default :data:`DEFAULT_MAX_SKIPPED`) allows ``max(2, floor(share × lines))``
skipped lines of a log of ``lines`` non-blank lines: a log of any size may lose its first and last line, a large log
5% of its lines; a share of 0 allows none (the first bad line refuses the log).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Messages = tuple[tuple[str, str], ...]

DEFAULT_MAX_SKIPPED = 0.05  # the share of a log's lines that may be skipped, never fewer than 2 (allowed_skips)
ALWAYS_SKIPPABLE = 2  # a log's first and last line, cut by rotation or by a copy taken while the gateway wrote
REASONS_KEPT = 3  # the first bad lines named


class LogError(ValueError):
    """A request log line that cannot be used (``file:line: what``), or a log refused (the count and the first bad
    lines); never the prompt's text."""


@dataclass(frozen=True)
class Request:
    """One request of the log, as the bench would send it."""

    line: int
    messages: Messages
    last_user: str  # the text of the last message the user wrote (the labelling rules read it)
    has_tools: bool  # tools offered, or tool calls / results in the conversation
    wants_json: bool  # a JSON response format asked for

    @property
    def chars(self) -> int:
        return sum(len(content) for _, content in self.messages)


def _body(raw: Any) -> Mapping[str, Any] | None:
    """The chat body of a log line: the line itself, or what it wraps under ``request`` / ``body``."""
    for _ in range(3):
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError:
                return None
        if not isinstance(raw, dict):
            return None
        if "messages" in raw:
            return raw
        raw = raw.get("request", raw.get("body"))
    return None


def _text(content: Any, where: str, n: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind != "text" or not isinstance(part.get("text"), str):
                raise LogError(f"{where}: message {n} has a {str(kind)[:20]!r} part: the bench sends text only")
            texts.append(part["text"])
        return "\n".join(texts)
    raise LogError(f"{where}: message {n} has no text content")


def _call_text(calls: Any) -> str:
    """An assistant's tool calls, as the standard set writes a call: ``{"name": ..., "arguments": {...}}``."""
    out = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str):
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args)
        out.append(json.dumps({"name": fn.get("name") if isinstance(fn, dict) else None, "arguments": args},
                              ensure_ascii=False))
    return "\n".join(out)


def _message(m: Any, where: str, n: int) -> tuple[str, str]:
    if not isinstance(m, dict):
        raise LogError(f"{where}: message {n} is not an object")
    role = m.get("role")
    if role in ("tool", "function"):
        return "user", "Tool result:\n" + _text(m.get("content"), where, n)
    if role == "assistant" and m.get("tool_calls"):
        said = _text(m["content"], where, n) if m.get("content") else ""
        return "assistant", "\n".join(t for t in (said, _call_text(m["tool_calls"])) if t)
    if role not in ("system", "developer", "user", "assistant"):
        raise LogError(f"{where}: message {n} has role {str(role)[:20]!r} (system, user, assistant or tool)")
    return ("system" if role == "developer" else str(role)), _text(m.get("content"), where, n)


def _tools_text(tools: Any) -> str:
    specs = [t.get("function", t) if isinstance(t, dict) else t for t in tools]
    return "Tools: " + json.dumps(specs, ensure_ascii=False, separators=(",", ":"))


def parse(body: Mapping[str, Any], where: str, line: int) -> Request:
    """One chat body as the bench's request."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise LogError(f"{where}: the body has no messages")
    messages = [_message(m, where, n) for n, m in enumerate(raw, 1)]
    tools = body.get("tools") or body.get("functions")
    if isinstance(tools, list) and tools:
        if messages[0][0] == "system":
            messages[0] = ("system", f"{messages[0][1]}\n\n{_tools_text(tools)}")
        else:
            messages.insert(0, ("system", _tools_text(tools)))
    if messages[-1][0] != "user":
        raise LogError(f"{where}: the conversation ends with the {messages[-1][0]}, not a user or tool turn")
    users = [m for m in raw if isinstance(m, dict) and m.get("role") == "user"]
    last_user = _text(users[-1].get("content"), where, raw.index(users[-1]) + 1) if users else ""
    has_tools = bool(tools) or any(isinstance(m, dict) and (m.get("role") in ("tool", "function")
                                                            or m.get("tool_calls")) for m in raw)
    fmt = body.get("response_format")
    wants_json = isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")
    return Request(line, tuple(messages), last_user, has_tools, wants_json)


@dataclass(frozen=True)
class RequestLog:
    """The usable requests of a log, in order, and what was skipped: counts and ``file:line: why`` only."""

    requests: tuple[Request, ...]
    lines: int  # non-blank lines read
    skipped: int  # of them, not usable
    reasons: tuple[str, ...]  # the first REASONS_KEPT skipped lines, ``file:line: why``

    def count_text(self, of_all: bool = False) -> str:
        """``1 line skipped``, or with ``of_all`` ``5 of 60 lines skipped``."""
        plural = "" if (self.lines if of_all else self.skipped) == 1 else "s"
        return f"{self.skipped}{f' of {self.lines}' if of_all else ''} line{plural} skipped"

    def first_text(self) -> str:
        """The first bad lines: ``requests.jsonl:1: not JSON (...); ...; and 2 more``."""
        more = self.skipped - len(self.reasons)
        return "; ".join(self.reasons) + (f"; and {more} more" if more > 0 else "")

    def skipped_text(self) -> str:
        """``1 line skipped: requests.jsonl:18: not JSON (...)`` (what the command says on stderr)."""
        return f"{self.count_text()}: {self.first_text()}"


def allowed_skips(lines: int, share: float) -> int:
    """How many of a log's ``lines`` (non-blank) may be skipped: ``max(2, floor(share × lines))``, none at 0."""
    if share <= 0:
        return 0
    return max(ALWAYS_SKIPPABLE, math.floor(share * lines + 1e-9))


def _request(data: bytes, where: str, n: int) -> Request:
    """One log line as a request; LogError (``file:line: why``) when it is not one."""
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogError(f"{where}: not UTF-8 (byte {exc.start + 1})") from None
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LogError(f"{where}: not JSON ({exc.msg})") from None
    body = _body(raw)
    if body is None:
        raise LogError(f"{where}: no chat body (messages), bare or under 'request' / 'body'")
    return parse(body, where, n)


def read_log(path: Path, max_skipped: float = DEFAULT_MAX_SKIPPED) -> RequestLog:
    """Every usable request of the log, in order; a bad line is skipped and counted, blank lines ignored.

    LogError when the log cannot be read, when more lines are skipped than ``max_skipped`` (a share, see
    :func:`allowed_skips`) allows, or when no request is left."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LogError(f"cannot read request log {path}: {exc.strerror or exc}") from None
    out: list[Request] = []
    lines = skipped = 0
    reasons: list[str] = []
    # bytes split on \n, \r and \r\n only (a str would split on U+2028 and others, which JSON may hold unescaped),
    # and each line decoded alone: a line cut inside a character spoils that line only
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            out.append(_request(line, f"{path}:{n}", n))
        except LogError as exc:
            skipped += 1
            if len(reasons) < REASONS_KEPT:
                reasons.append(str(exc))
    log = RequestLog(tuple(out), lines, skipped, tuple(reasons))
    if not lines:
        raise LogError(f"request log {path} has no requests")
    if not out:
        raise LogError(f"request log {path} has no requests: {log.count_text(of_all=True)}: {log.first_text()}")
    allowed = allowed_skips(lines, max_skipped)
    if skipped > allowed:
        raise LogError(f"request log {path}: {log.count_text(of_all=True)}, more than the {allowed} that a share of "
                       f"{max_skipped:g} allows (max({ALWAYS_SKIPPABLE}, share × lines); none at 0): "
                       f"{log.first_text()}")
    return log
