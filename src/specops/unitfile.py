"""Values for systemd unit files: escaped for the directive that reads them, or refused in one line.

systemd reads each directive its own way (systemd.syntax(7), systemd.exec(5)):

- ``ExecStart=``: words split on whitespace, ``"…"``/``'…'`` quoting, C escapes, ``%`` specifiers and
  ``$VAR`` expansion: a word is quoted when it needs it, ``\\`` and ``"`` escaped, ``%`` → ``%%``, ``$`` → ``$$``.
  The executable (first word) is not ``$``-expanded, and must not hold a quote or a backslash.
- ``ReadOnlyPaths=``/``ReadWritePaths=``: a list of words (quoting, backslash escapes, ``%`` specifiers, no
  ``$``): each path quoted like an ExecStart word, ``%`` doubled.
- ``Environment=``: one quoted ``"KEY=value"`` word per assignment (C escapes, ``%`` specifiers, no ``$``).
- ``Description=``, ``WorkingDirectory=``, the path of ``LoadCredential=``: the rest of the line, taken
  literally but for ``%`` specifiers: ``%`` doubled, surrounding blanks and a trailing backslash (a line
  continuation) refused.
- ``StateDirectory=`` names: letters, digits and ``_ . - @`` only (a ``:`` would make it a symlink pair)
  (:func:`plain_name`).
- ``MemoryMax=`` and other sizes: a number with an optional K/M/G/T/P/E suffix, a percentage or ``infinity``
  (:func:`memory_size`); systemd reads them without specifiers, so nothing is escaped, anything else refused.

Nothing can carry a newline or another control character through a unit line: those values are refused
with a :class:`UnitValueError` that names the variable, the value and the fix (one line).
"""

from __future__ import annotations

import re
from collections.abc import Mapping


def is_number(token: str) -> bool:
    """A command-line token that is a number ("-1", "0.5"), not a flag."""
    try:
        float(token)
    except ValueError:
        return False
    return True


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NEEDS_QUOTES = set(" \t\"'\\;")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")
# words passed through verbatim must be plain: only systemd specifiers we mean (e.g. %d, the credentials dir)
_VERBATIM = re.compile(r"[A-Za-z0-9/_.%-]+\Z")


class UnitValueError(ValueError):
    """A value a systemd unit cannot hold, with the variable it came from and what to do."""


def _char_name(char: str) -> str:
    return {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte"}.get(
        char, f"the control character U+{ord(char):04X}")


def representable(value: object, what: str) -> str:
    """``value`` as a str that a unit line can carry, else :class:`UnitValueError` naming ``what``."""
    if not isinstance(value, str):
        raise UnitValueError(f"{what}={value!r}: expected a string")
    match = _CONTROL.search(value)
    if match:
        raise UnitValueError(f"{what}={value!r}: contains {_char_name(match.group())}, which a systemd unit line "
                             "cannot hold; use a value without control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnitValueError(f"{what}={value!r}: not valid UTF-8; use a value systemd can read") from None
    return value


def absolute_path(value: object, what: str) -> str:
    path = representable(value, what)
    if not path.startswith("/"):
        raise UnitValueError(f"{what}={value!r}: not an absolute path; give the full path on the host "
                             f"(e.g. /{path.lstrip('./') or '...'})")
    if any(part in (".", "..") for part in path.split("/")):
        raise UnitValueError(f"{what}={value!r}: has . or .. components, which systemd refuses; write the "
                             "path without them")
    if any(len(part.encode("utf-8")) > 255 for part in path.split("/")):
        raise UnitValueError(f"{what}={value!r}: a component is longer than 255 bytes; shorten it")
    return path


def _quoted(value: str) -> str:
    if value and not any(c in _NEEDS_QUOTES for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def executable(path: object, what: str = "executable") -> str:
    """The first word of ``ExecStart=``: systemd expands ``%`` but not ``$`` in it, and refuses an executable
    path holding a quote or a backslash ("Executable name contains special characters") however it is quoted."""
    text = absolute_path(path, what)
    bad = sorted({c for c in text if c in "\"'\\"})
    if bad:
        raise UnitValueError(f"{what}={path!r}: systemd refuses an executable path containing {' or '.join(bad)}; "
                             "install it under a path without quotes or backslashes")
    return _quoted(text).replace("%", "%%")


def exec_word(arg: str, what: str = "argument") -> str:
    """One word of ``ExecStart=``."""
    return _quoted(representable(arg, what)).replace("%", "%%").replace("$", "$$")


def exec_line(argv: list[str], multiline: bool = False, verbatim: list[str] | tuple[str, ...] = (),
              what: str = "llama-server argument") -> str:
    """``argv`` for ``ExecStart=``; words in ``verbatim`` (plain, e.g. ``%d/key``) keep their specifiers;
    ``multiline`` puts each flag on its own continued line."""
    for word in verbatim:
        if not _VERBATIM.match(word):
            raise UnitValueError(f"verbatim ExecStart word {word!r} may hold only letters, digits, / _ . - %")
    words = [(arg if arg in verbatim else (executable(arg, what) if i == 0 else exec_word(arg, what)), arg)
             for i, arg in enumerate(argv)]
    if not multiline:
        return " ".join(w for w, _ in words)
    lines: list[list[str]] = [[]]
    for word, arg in words:
        if arg.startswith("-") and lines[-1] and not is_number(arg):
            lines.append([])
        lines[-1].append(word)
    return " \\\n    ".join(" ".join(line) for line in lines)


def path_list(paths: list[str] | str, what: str = "path") -> str:
    """Absolute paths for ``ReadOnlyPaths=``/``ReadWritePaths=`` (space-separated, each quoted as needed)."""
    items = [paths] if isinstance(paths, str) else list(paths)
    return " ".join(_quoted(absolute_path(p, what)).replace("%", "%%") for p in items)


def env_assignment(key: str, value: object, what: str = "environment") -> str:
    """One ``Environment=`` word: ``"KEY=value"``."""
    name = representable(key, what)
    if not _ENV_NAME.match(name):
        raise UnitValueError(f"{what}: {key!r} is not an environment variable name (letters, digits, _; "
                             "not starting with a digit)")
    text = representable(value if isinstance(value, str) else _scalar(value, f"{what}.{key}"), f"{what}.{key}")
    return ('"' + f"{name}={text}".replace("\\", "\\\\").replace('"', '\\"') + '"').replace("%", "%%")


def env_assignments(env: Mapping[str, object], what: str = "environment") -> list[str]:
    """One :func:`env_assignment` word per entry of ``env``, sorted by key (one ``Environment=`` line each)."""
    return [env_assignment(str(k), v, what) for k, v in sorted(dict(env).items())]


def _scalar(value: object, what: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return str(value)
    raise UnitValueError(f"{what}={value!r}: expected a string or a number")


def line_value(value: object, what: str = "value") -> str:
    """A value that takes the rest of the line (``Description=``, ``WorkingDirectory=``)."""
    text = representable(value, what)
    if text != text.strip(" "):
        raise UnitValueError(f"{what}={value!r}: leading or trailing blanks are lost in a unit; remove them")
    if text.endswith("\\"):
        raise UnitValueError(f"{what}={value!r}: a trailing backslash continues the unit line; remove it")
    return text.replace("%", "%%")


def credential(name: str, path: object, what: str = "credential") -> str:
    """The value of ``LoadCredential=NAME:PATH``."""
    if not _CREDENTIAL_NAME.match(name):
        raise UnitValueError(f"credential name {name!r} may hold only letters, digits, _ . -")
    return f"{name}:{line_value(absolute_path(path, what), what)}"


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.@-]+\Z")
_SIZE = re.compile(r"(\d+(\.\d+)?[KMGTPE]?|\d+(\.\d+)?%|infinity)\Z")


def plain_name(value: object, what: str = "name") -> str:
    """A single word that needs no quoting or escaping (``StateDirectory=`` name, a unit or user name)."""
    text = representable(value, what)
    if not _PLAIN_NAME.match(text) or text in (".", ".."):
        raise UnitValueError(f"{what}={value!r}: may hold only letters, digits and _ . - @; rename it")
    return text


_PERCENT = re.compile(r"\d+(\.\d+)?%\Z")


def cpu_quota(value: object, what: str = "cpu quota") -> str:
    """A ``CPUQuota=`` percentage (may exceed 100% on several cores)."""
    text = representable(value if isinstance(value, str) else str(value), what)
    if not _PERCENT.match(text):
        raise UnitValueError(f"{what}={value!r}: not a CPU quota systemd reads (a percentage, e.g. 50% or 200%)")
    return text


def address_prefix(value: object, what: str = "address") -> str:
    """One ``IPAddressAllow=`` entry: an IPv4/IPv6 address or prefix (10.0.0.0/8), or a systemd keyword."""
    import ipaddress

    text = representable(value if isinstance(value, str) else str(value), what)
    if text in ("any", "localhost", "link-local", "multicast"):
        return text
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise UnitValueError(f"{what}={value!r}: not an IP address or prefix (e.g. 10.0.0.5 or 10.0.0.0/24)") from None
    return text


def memory_size(value: object, what: str = "size") -> str:
    """A ``MemoryMax=``-style size: bytes with an optional K, M, G, T, P or E suffix, a percentage of the host's
    memory, or infinity."""
    text = representable(value if isinstance(value, str) else str(value), what)
    if not _SIZE.match(text):
        raise UnitValueError(f"{what}={value!r}: not a size systemd reads (e.g. 20G, 512M, 80% or infinity); "
                             "set one of those")
    return text
