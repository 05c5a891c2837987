"""API key files as llama-server reads them (``--api-key-file``): the one reader of that file kind, for the deploy's
host scripts, the tune, the exporter and the soak.

Standard library only, and importing nothing of specops: the deploy runs it on the host with its scripts
(specops.host imports it; specops.hostzip puts both in the zip the deploy ships).

The rule, from llama.cpp at the pinned commit (0c1e57098), common/arg.cpp:3502-3518 (``--api-key-file``)::

    std::ifstream key_file(value);
    std::string key;
    while (std::getline(key_file, key)) {
        if (!key.empty() && key[0] != '#') {
            params.api_keys.push_back(key);
        }
    }

- the file's bytes are split at LF only (``std::getline``'s delimiter; an ifstream on Linux translates nothing);
- each line that is not empty and does not start with ``#`` is a key, exactly as written: nothing is stripped, so
  a CR before the LF, spaces or tabs at either end and a byte-order mark at the start of the file all stay in the
  key; ``#`` counts only as the line's very first byte (`` #x`` is a key); a last line without a final LF is a key;
- every key is accepted: tools/server/server-http.cpp:260-287 takes ``Authorization`` (else ``X-Api-Key``), drops a
  leading ``Bearer `` and looks the rest up in the list, byte for byte; with no key at all, it asks for none.

A key is returned as text with one character per byte (latin-1), the way Python's http.client encodes a header
value, so that a client sends exactly the bytes llama-server holds. A client sends the first key (:func:`first_key`).
A key that no HTTP client can send (:func:`flaws`: a CR, white space at an end, a byte that is not printable ASCII)
is refused by the deploy's first play (specops.deploycheck, from host_facts.py's ``key_lines``).
"""

from __future__ import annotations

import os

# C's isspace() in the "C" locale (bytes.isspace): white space at a key's end that HTTP drops from a header value
_SPACE = frozenset(" \t\n\r\x0b\x0c")
_PRINTABLE = frozenset(map(chr, range(0x20, 0x7F)))
_WHY = {"cr": "holds a CR (a Windows line ending)",
        "edge_whitespace": "starts or ends with white space",
        "nonprintable": "holds a character that is not printable ASCII"}


def keys_in(data: bytes) -> list[str]:
    """Every key in a key file's content, in file order (llama-server's rule, above)."""
    return [line.decode("latin-1") for line in data.split(b"\n") if line and not line.startswith(b"#")]


def read_keys(path: str | os.PathLike[str]) -> list[str]:
    """Every key of the key file at ``path``; OSError when it cannot be read."""
    with open(path, "rb") as fh:
        return keys_in(fh.read())


def first_key(path: str | os.PathLike[str]) -> str:
    """The key a client sends: the file's first key; '' when it has none (llama-server then asks for no key)."""
    return next(iter(read_keys(path)), "")


def flaws(key: str) -> list[str]:
    """Why no HTTP client can send ``key`` although llama-server holds it, as names (``cr``, ``edge_whitespace``,
    ``nonprintable``); [] when one can. A trailing CR is reported as ``cr`` alone."""
    body = key.rstrip("\r")
    found = {"cr": "\r" in key,
             "edge_whitespace": body[:1] in _SPACE or body[-1:] in _SPACE,
             "nonprintable": bool(set(body.strip(" \t")) - _PRINTABLE)}
    return [name for name, hit in found.items() if hit]


def problem(key: str) -> str:
    """One phrase saying why no HTTP client can send ``key`` ('' when one can), never the key."""
    return "; ".join(_WHY[name] for name in flaws(key))


def client_key(path: str | os.PathLike[str]) -> str:
    """The key a client (the exporter, the soak) sends: the file's first ('' when it has none). ValueError, one line
    naming the file and never the key, when the file cannot be read or no HTTP client can send that key."""
    try:
        key = first_key(path)
    except OSError as exc:
        raise ValueError(f"{os.fspath(path)}: {exc.strerror or exc}") from None
    why = problem(key)
    if why:
        raise ValueError(f"{os.fspath(path)}: its first key {why}, which llama-server keeps in the key and no HTTP "
                         "client can send; write one key per line, in printable ASCII, with LF line endings")
    return key
