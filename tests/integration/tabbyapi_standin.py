#!/usr/bin/python3
"""A stand-in for TabbyAPI's ``main.py`` on a host without a GPU (tests/integration/test_tabbyapi_deploy.py).

TabbyAPI needs a CUDA GPU, which no machine here has. This process is installed where the role expects TabbyAPI
(``<tabbyapi_install_dir>/app/main.py``, run by the unit's ``venv/bin/python``) and behaves as TabbyAPI does for
everything the deploy touches: ``--config PATH`` is read (the keys ``roles/tabbyapi`` renders), ``api_tokens.yml``
is read from the working directory (the unit links it to the systemd credential), the model named by
``model_dir``/``model_name`` (and the draft) is "loaded" — its ``config.json`` must parse and its
``*.safetensors`` must have a readable header, else it exits 1 with the error ExLlamaV2 gives — and it serves
``/health`` and ``/v1/model`` (with ``x-api-key`` or ``Authorization: Bearer``, 401 otherwise) on the configured
host and port. Standard library only (the lab host has no PyYAML): the config is read with a small parser for
what ``to_nice_yaml`` writes.
"""

from __future__ import annotations

import json
import os
import re
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def scalar(text: str) -> object:
    text = text.strip()
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1].replace("''", "'")
    if text.startswith('"'):
        return json.loads(text)
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return None if text in ("null", "~", "") else text


def read_config(path: str) -> dict[str, dict[str, object]]:
    """The two-level mappings of config.yml (section -> key -> scalar); lists are skipped."""
    out: dict[str, dict[str, object]] = {}
    section = ""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        top = re.fullmatch(r"(\w+):\s*", line)
        if top:
            section = top.group(1)
            out[section] = {}
            continue
        item = re.fullmatch(r"  (\w+):\s?(.*)", line)
        if item and section:
            out[section][item.group(1)] = scalar(item.group(2))
    return out


def load(model_dir: str, name: str, what: str) -> None:
    """What ExLlamaV2Config.prepare() checks first: config.json, then the safetensors headers."""
    path = Path(model_dir) / name
    try:
        json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"ValueError: {what} {path}: cannot read config.json ({exc})")
    tensors = sorted(path.glob("*.safetensors"))
    if not tensors:
        sys.exit(f"ValueError: No .safetensors files found in directory: {path}")
    for tensor in tensors:
        try:
            with tensor.open("rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                if size > tensor.stat().st_size - 8:
                    raise ValueError("HeaderTooLarge")
                json.loads(fh.read(size))
        except (OSError, ValueError, struct.error) as exc:
            sys.exit(f"safetensors_rust.SafetensorError: Error while deserializing header: {exc} ({tensor})")
    print(f"Loaded {what} {name}", flush=True)


def main() -> None:
    args = sys.argv[1:]
    config = read_config(args[args.index("--config") + 1])
    tokens = {k: str(v) for k, v in read_config_tokens("api_tokens.yml").items()}
    model, draft, net = config.get("model", {}), config.get("draft_model", {}), config.get("network", {})
    load(str(model["model_dir"]), str(model["model_name"]), "model")
    draft_name = draft.get("draft_model_name")
    if draft_name:
        load(str(draft["draft_model_dir"]), str(draft_name), "draft model")
    print(f"SPECOPS-STANDIN {json.dumps({'argv': sys.argv, 'cwd': os.getcwd()})}", flush=True)
    card = {"id": model["model_name"], "object": "model", "owned_by": "tabbyAPI",
            "parameters": {"max_seq_len": model.get("max_seq_len"), "cache_mode": model.get("cache_mode"),
                           **({"draft": {"id": draft_name}} if draft_name else {})}}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"status": "healthy", "issues": []})
            elif self.path == "/v1/model":
                given = self.headers.get("x-api-key") or (self.headers.get("Authorization") or "").removeprefix(
                    "Bearer ")
                if given not in (tokens.get("api_key"), tokens.get("admin_key")):
                    self._send(401, {"detail": "Invalid API key"})
                else:
                    self._send(200, card)
            else:
                self._send(404, {"detail": "Not Found"})

    ThreadingHTTPServer((str(net.get("host", "127.0.0.1")), int(net.get("port", 5000))), Handler).serve_forever()


def read_config_tokens(path: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"(\w+):\s*(.*)", line.strip())
        if match:
            out[match.group(1)] = scalar(match.group(2))
    return out


if __name__ == "__main__":
    main()
