"""Which workload a request belongs to: the operator's rules first, then the default rule.

The default rule, in order:

- ``tool_calls``: the body offers tools (``tools`` / ``functions``), the conversation has tool calls or results, it
  asks for a JSON response format, or the system message lists tools or the request asks for JSON output (the
  bench's workload is tool calls and structured JSON);
- ``edit``: the last user message gives code or text to change (a code block or a diff) and, outside its code, asks
  for a change (fix, rewrite, refactor, rename, change, update, edit, apply, make, sort, replace, convert, ..., or
  "output the full / updated ...");
- ``code``: a code block or a diff, or it asks for code (write / implement / generate a ... function, class, script,
  query, ..., or names a programming language);
- ``prose``: anything else.

A rule file (JSON or YAML) is an ordered list of rules ``{workload: NAME, last_user: REGEX, has_tools: BOOL}``
(``last_user`` and ``has_tools`` each optional; a rule matches when every condition it gives holds, so a rule with
neither matches everything). The first rule that matches names the workload; a request no rule matches gets the
default rule's. ``last_user`` is a Python regular expression searched in the last user message (``(?i)`` for any
case).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.requestlog.read import Request

CODE_BLOCK = re.compile(r"```|~~~|^(?:diff --git |@@ -\d|--- a/|\+\+\+ b/)", re.M)
FENCED = re.compile(r"```.*?(```|\Z)|~~~.*?(~~~|\Z)", re.S)  # a code block's text (an unclosed one to the end)
EDIT_ASK = re.compile(r"(?i)\b(fix|rewrite|refactor|rename|change|modify|update|edit|apply|patch|replace|convert|"
                      r"translate|remove|delete|add|make|sort|uppercase|lowercase|optimi[sz]e|clean\s*up|reformat|"
                      r"correct)(s|es|ed|d)?\b|\b(output|return|give|show|print)( me)? the (full|complete|whole|"
                      r"entire|updated|corrected|fixed)\b")
CODE_ASK = re.compile(
    r"(?i)\b(write|implement|generate|create|build)( (a|an|the|some|me))?( [\w+#.-]+){0,3} (functions?|class(es)?|"
    r"scripts?|programs?|quer(y|ies)|regex(es)?|methods?|modules?|unit tests?|endpoints?|components?|snippets?|"
    r"code)\b|\b(python|javascript|typescript|golang|rust|java|kotlin|swift|c\+\+|c#|ruby|php|sql|bash|"
    r"powershell|dockerfile|terraform)\b")
JSON_ASK = re.compile(r"(?i)\b(json (object|only|schema)|(output|return|respond|answer)( with| in| as)? (only )?"
                      r"(valid )?json|(in|as) json)\b|\bfunction[- ]calling\b|^tools:|\btools: \[", re.M)
WORKLOAD_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


class RuleError(ValueError):
    """A rule file that cannot be used (one line)."""


@dataclass(frozen=True)
class Rule:
    workload: str
    last_user: re.Pattern[str] | None = None
    has_tools: bool | None = None

    def matches(self, req: Request) -> bool:
        return ((self.last_user is None or self.last_user.search(req.last_user) is not None)
                and (self.has_tools is None or self.has_tools == req.has_tools))


def default_label(req: Request) -> str:
    text = req.last_user
    asks = FENCED.sub(" ", text)  # what the user asks, outside the code given
    system = " ".join(c for r, c in req.messages if r == "system")
    if req.has_tools or req.wants_json or JSON_ASK.search(asks) or JSON_ASK.search(FENCED.sub(" ", system)):
        return "tool_calls"
    given = CODE_BLOCK.search(text) is not None
    if given and EDIT_ASK.search(asks):
        return "edit"
    if given or CODE_ASK.search(asks):
        return "code"
    return "prose"


def label(req: Request, rules: Sequence[Rule] = ()) -> str:
    """The first matching rule's workload, else the default rule's."""
    return next((r.workload for r in rules if r.matches(req)), None) or default_label(req)


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise RuleError(f"{where}: a rule is a mapping {{workload, last_user, has_tools}}")
    unknown = sorted(set(raw) - {"workload", "last_user", "has_tools"})
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (workload, last_user, has_tools)")
    name = raw.get("workload")
    if not isinstance(name, str) or not WORKLOAD_NAME.match(name):
        raise RuleError(f"{where}: workload must be a name of lower-case letters, digits, '_' or '-', got {name!r}")
    pattern = raw.get("last_user")
    if pattern is not None and not isinstance(pattern, str):
        raise RuleError(f"{where}: last_user must be a regular expression (a string)")
    try:
        compiled = re.compile(pattern) if pattern is not None else None
    except re.error as exc:
        raise RuleError(f"{where}: last_user is not a regular expression ({exc})") from None
    tools = raw.get("has_tools")
    if tools is not None and not isinstance(tools, bool):
        raise RuleError(f"{where}: has_tools must be true or false")
    return Rule(name, compiled, tools)


def _parse(text: str, path: Path) -> Any:
    """JSON, or YAML for a .yml / .yaml file (the controller's dependency; a JSON rule file needs none)."""
    if Path(path).suffix not in (".yml", ".yaml"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise RuleError(f"rule file {path} is not JSON: {exc}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RuleError(f"rule file {path} is not YAML: {' '.join(str(exc).split())}") from None


def load_rules(path: Path) -> list[Rule]:
    """The rules of a JSON or YAML file: a list, or a mapping with the list under ``rules``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read rule file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    data = _parse(text, path)
    rules = data.get("rules") if isinstance(data, dict) else data
    if not isinstance(rules, list) or not rules:
        raise RuleError(f"rule file {path}: expected a non-empty list of rules (or one under 'rules')")
    return [_rule(r, f"{path}: rule {n}") for n, r in enumerate(rules, 1)]
