"""A request log: JSONL, one OpenAI-style chat completion body a line, as proxies and gateways write it, bare or
wrapped (``{"request": {...}}``, ``{"body": {...}}``, a body given as a JSON string too).

Each body becomes the bench's messages (roles system / user / assistant, text content), the way the standard set
writes tool calls: the body's ``tools`` go into the system message (``Tools: [...]``), a tool result becomes a user
turn (``Tool result: ...``) and an assistant's tool calls its text (``{"name": ..., "arguments": {...}}``). Content
given as parts keeps its text parts. Anything else (a line that is not JSON, a body without messages, an image, a
conversation that ends with the assistant) is an error naming the file and the line, never the prompt's text.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Messages = tuple[tuple[str, str], ...]


class LogError(ValueError):
    """A request log line that cannot be used: ``file:line: what`` (never the prompt's text)."""


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


def read_log(path: Path) -> list[Request]:
    """Every request of the log, in order (blank lines skipped); LogError at the first bad line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"cannot read request log {path}: {getattr(exc, 'strerror', None) or exc}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogError(f"{where}: not JSON ({exc.msg})") from None
        body = _body(raw)
        if body is None:
            raise LogError(f"{where}: no chat body (messages), bare or under 'request' / 'body'")
        out.append(parse(body, where, n))
    if not out:
        raise LogError(f"request log {path} has no requests")
    return out
