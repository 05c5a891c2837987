"""One reader of API key files (issue 53, item 3): specops.keyfile follows llama-server's own rule, and the tune,
the exporter, the soak and the host scripts all read the file through it (the host scripts through specops.host.hostlib,
in the zip the deploy ships).

The rule, llama.cpp 0c1e57098 (the pinned commit), common/arg.cpp:3502-3518 (``--api-key-file``)::

    while (std::getline(key_file, key)) {             // arg.cpp:3511: split at LF only, nothing stripped
        if (!key.empty() && key[0] != '#') {          // arg.cpp:3512: empty lines and lines starting with # skipped
            params.api_keys.push_back(key);           // arg.cpp:3513: every other line is a key, as written
        }
    }

and tools/server/server-http.cpp:260-287 accepts ``Authorization: Bearer KEY`` for any KEY in that list, byte for
byte."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from specops import keyfile
from specops.cli import build_parser
from specops.exporter.config import ConfigError
from specops.soak.config import SoakConfigError
from specops.tune import quiet
from tests.unit.hostcode import BARE, argv, zip_path

REPO = Path(__file__).resolve().parents[2]
BOM = "\xef\xbb\xbf"   # a UTF-8 byte-order mark's three bytes, one character per byte as keyfile returns a key

# (file content, the keys llama-server holds): each row is the rule above applied by hand
CASES = [
    pytest.param(b"sk-one\n", ["sk-one"], id="one key"),
    pytest.param(b"sk-one", ["sk-one"], id="no final LF: getline still yields the last line"),
    pytest.param(b"sk-one\nsk-two\nsk-three\n", ["sk-one", "sk-two", "sk-three"], id="several keys, in order"),
    pytest.param(b"\n\nsk-one\n\n\nsk-two\n\n", ["sk-one", "sk-two"], id="blank lines skipped (key.empty())"),
    pytest.param(b"# the lab's key\nsk-one\n#sk-old\n", ["sk-one"], id="comment lines skipped (key[0] == '#')"),
    pytest.param(b" #sk-one\n", [" #sk-one"], id="# only as the first byte: a key"),
    pytest.param(b"sk-one\r\nsk-two\r\n", ["sk-one\r", "sk-two\r"], id="CRLF: the CR stays in each key"),
    pytest.param(b"\r\n", ["\r"], id="a line of one CR is not empty: a key"),
    pytest.param(b"\xef\xbb\xbfsk-one\nsk-two\n", [BOM + "sk-one", "sk-two"], id="a BOM stays in the first key"),
    pytest.param(b"sk-one  \n\tsk-two\n", ["sk-one  ", "\tsk-two"], id="spaces and tabs at the ends stay"),
    pytest.param(b"   \n", ["   "], id="a line of spaces is not empty: a key"),
    pytest.param(b"", [], id="empty file: no key (the server asks for none)"),
    pytest.param(b"# only a comment\n\n", [], id="only comments and blank lines: no key"),
    pytest.param(b"sk-\xc3\xa9\n", ["sk-\xc3\xa9"], id="bytes as they are, one character each (latin-1)"),
]


@pytest.mark.parametrize(("data", "keys"), CASES)
def test_the_keys_are_llama_servers(data: bytes, keys: list[str]) -> None:
    assert keyfile.keys_in(data) == keys


@pytest.mark.parametrize(("data", "keys"), CASES)
def test_a_file_reads_the_same_and_a_client_sends_its_first_key(tmp_path: Path, data: bytes, keys: list[str]) -> None:
    path = tmp_path / "api-key"
    path.write_bytes(data)
    assert keyfile.read_keys(path) == keyfile.read_keys(str(path)) == keys
    assert keyfile.first_key(path) == (keys[0] if keys else "")


def test_a_key_is_sent_as_its_bytes() -> None:
    """latin-1 text: http.client encodes a header value back to exactly the bytes llama-server compares."""
    key = keyfile.keys_in(b"sk-\xc3\xa9\xff\n")[0]
    assert f"Bearer {key}".encode("latin-1") == b"Bearer sk-\xc3\xa9\xff"


@pytest.mark.parametrize(("key", "flaws"), [
    ("sk-one", []),
    ("sk one", []),                                       # a space inside is sent as it is
    ("sk-one\r", ["cr"]),                                 # a CRLF file's key: the CR alone is reported
    ("sk-one \r", ["cr", "edge_whitespace"]),
    ("sk-one ", ["edge_whitespace"]),
    ("\tsk-one", ["edge_whitespace"]),
    ("\x0bsk-one", ["edge_whitespace", "nonprintable"]),
    ("sk\x01one", ["nonprintable"]),
    ("sk\tone", ["nonprintable"]),
    (BOM + "sk-one", ["nonprintable"]),
    ("\r", ["cr"]),
])
def test_what_no_client_can_send_is_named(key: str, flaws: list[str]) -> None:
    assert keyfile.flaws(key) == flaws
    assert bool(keyfile.problem(key)) is bool(flaws)
    assert "sk" not in keyfile.problem(key)


def test_a_clients_key_is_the_first_and_a_bad_one_is_one_line_without_the_key(tmp_path: Path) -> None:
    path = tmp_path / "api-key"
    path.write_bytes(b"# keys\nsk-one\nsk-two\r\n")
    assert keyfile.client_key(path) == "sk-one"
    path.write_bytes(b"sk-one\r\nsk-two\r\n")
    with pytest.raises(ValueError, match="CR") as bad:
        keyfile.client_key(path)
    assert str(path) in str(bad.value) and "sk-one" not in str(bad.value) and "\n" not in str(bad.value)
    with pytest.raises(ValueError, match="No such file"):
        keyfile.client_key(tmp_path / "missing")
    path.write_bytes(b"# none yet\n")
    assert keyfile.client_key(path) == ""


# ---- one module: the package's, shipped to the host as it is ------------------------------------------------------
HOST = REPO / "src" / "specops" / "host"


def test_the_host_scripts_read_the_packages_module_not_a_copy() -> None:
    """No second key reader, no link to this one: the host code imports specops.keyfile, and the zip the deploy
    ships holds that very file."""
    assert not [p for p in [*REPO.glob("roles/**/*.py"), *HOST.rglob("*.py")] if p.name == "keyfile.py"]
    tree = ast.parse((REPO / "src" / "specops" / "keyfile.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "os"}, imported   # the host has the standard library only
    with zipfile.ZipFile(zip_path()) as zf:
        assert zf.read("specops/keyfile.py") == (REPO / "src" / "specops" / "keyfile.py").read_bytes()


def _host_sources() -> dict[str, str]:
    """The host code's own files (specops.host)."""
    return {p.relative_to(REPO).as_posix(): p.read_text() for p in sorted(HOST.rglob("*.py"))}


def test_no_copy_of_the_shared_code_is_left_between_the_host_scripts() -> None:
    """The key reader, the /slots busy count and the /proc/net/tcp scan live once each (issue 53, item 3)."""
    markers = {"key reader": r"not line\.startswith\(b?\"#\"\)|def read_key",
               "tcp scan": r"rsplit\(\":\", 1\)\[1\], 16\)",
               "busy count": r"isinstance\(s, dict\) and s\.get\(\"is_processing\"\)"}
    where = {name: [path for path, text in _host_sources().items() if re.search(pattern, text)]
             for name, pattern in markers.items()}
    assert where == {"key reader": [], "tcp scan": ["src/specops/host/hostlib.py"],
                     "busy count": ["src/specops/host/hostlib.py"]}, where
    assert re.search(markers["key reader"], (REPO / "src/specops/keyfile.py").read_text())


@pytest.mark.parametrize(("script", "shared"), [
    ("drain", ["auth_headers", "busy_slots", "tcp_rows"]),
    ("probe", ["auth_headers"]),
    ("speed_probe", ["hostlib.auth_headers", "hostlib.busy_slots"]),
    ("host_facts", ["keyfile.keys_in", "keyfile.flaws", "tcp_rows"]),
])
def test_the_scripts_use_the_shared_modules(script: str, shared: list[str]) -> None:
    module = importlib.import_module(f"specops.host.{script}")
    for name in shared:
        found = functools.reduce(getattr, name.split("."), module)
        assert found.__module__ in ("specops.host.hostlib", "specops.keyfile"), (script, name, found.__module__)


# ---- the zip the deploy ships: what runs on the host --------------------------------------------------------------
def test_the_zip_runs_a_script_with_its_shared_modules(tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_bytes(b"# keys\nsk-one\r\nsk-two\n")
    key.chmod(0o600)
    out = subprocess.run(argv("host_facts", "--key-file", str(key)), capture_output=True, text=True, check=True,
                         timeout=60, cwd=tmp_path).stdout
    content = json.loads(out)["key_file"]["content"]
    assert content == {"lines": 3, "keys": 2, "empty": False, "cr": True, "edge_whitespace": False,
                       "nonprintable": False}
    assert "sk-one" not in out
    usage = subprocess.run(argv("drain", "--help"), capture_output=True, text=True, check=True, timeout=60,
                           cwd=tmp_path).stdout
    assert usage.startswith("usage: drain.py") and "--api-key-file" in usage


def test_the_zip_without_a_script_says_how_to_run_it(tmp_path: Path) -> None:
    proc = subprocess.run([*BARE, str(zip_path())], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("usage: python3 <host scripts zip> SCRIPT")


# ---- the tune, the exporter and the soak send the first key ------------------------------------------------------
MULTI = b"# the keys of the lab\n\nsk-first\nsk-second\n"


def test_the_tune_sends_the_first_key(tmp_path: Path) -> None:
    path = tmp_path / "api-key"
    path.write_bytes(MULTI)
    assert quiet.read_key(path) == "sk-first"
    path.write_bytes(b"   \nsk-first\n")
    assert quiet.read_key(path) == "   "           # as llama-server holds it (the deploy refuses such a file)
    assert quiet.read_key(None) == ""


def _exporter(key_file: Path):
    from specops.commands.exporter import config_from_args

    return config_from_args(build_parser().parse_args(
        ["exporter", "--server-url", "http://127.0.0.1:9", "--api-key-file", str(key_file)]))


def _soak(key_file: Path):
    from specops.commands.soak import config_from_args

    return config_from_args(build_parser().parse_args(
        ["soak", "--url", "http://127.0.0.1:9", "--duration", "60", "--api-key-file", str(key_file)]))


@pytest.mark.parametrize(("build", "error"), [(_exporter, ConfigError), (_soak, SoakConfigError)],
                         ids=["exporter", "soak"])
def test_the_exporter_and_the_soak_send_the_first_key_of_a_multi_key_file(tmp_path: Path, build, error) -> None:
    path = tmp_path / "api-key"
    path.write_bytes(MULTI)
    assert build(path).api_key == "sk-first"
    path.write_bytes(b"# no key yet\n")
    assert build(path).api_key is None
    path.write_bytes(b"sk-first\r\nsk-second\r\n")
    with pytest.raises(error, match=r"--api-key-file: .*CR") as bad:
        build(path)
    assert "sk-first" not in str(bad.value)
    with pytest.raises(error, match=r"--api-key-file: .*missing"):
        build(tmp_path / "missing")
