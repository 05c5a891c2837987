"""The host scripts that fold a phase's looks and small writes into one run on the host (issue 63 item 3: fewer
module runs per deploy): specops.host.files (the speed gate's record and the known-good unit), models_place (the
models directory before any copy) and server_help (llama-server --help and --version on the builder). Run as the
deploy runs them: from the zip, by a python3 with the standard library only."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.unit.hostcode import BARE, zip_path

pytestmark = pytest.mark.fast


def host(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BARE, str(zip_path()), *args], capture_output=True, text=True, check=False, timeout=60,
                          env=env)


def out(*args: str) -> dict:
    done = host(*args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_look_gives_checksums_and_slurp_content_null_for_a_missing_file(tmp_path: Path) -> None:
    unit, rec = tmp_path / "x.service", tmp_path / "speed-gate.json"
    unit.write_text("[Service]\n")
    rec.write_text('{"verdict": "pays"}')
    found = out("files", "look", "--sha256", str(unit), "--sha256", str(tmp_path / "gone"), "--content", str(rec),
                "--content", str(tmp_path / "gone"))
    assert found["sha256"] == {str(unit): hashlib.sha256(b"[Service]\n").hexdigest(), str(tmp_path / "gone"): None}
    assert base64.b64decode(found["content"][str(rec)]) == rec.read_bytes()
    assert found["content"][str(tmp_path / "gone")] is None


def test_files_put_writes_in_order_only_what_differs_and_says_so(tmp_path: Path) -> None:
    unit, rec, kg = tmp_path / "x.service", tmp_path / "speed-gate.json", tmp_path / "known-good"
    kg.mkdir()
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    steps = json.dumps([{"dest": str(rec), "content": '{\n    "verdict": "pays"\n}'},
                        {"dest": str(kg / "x.service"), "src": str(unit)},
                        {"dest": str(kg / "speed-gate.json"), "src": str(rec)}])
    # --check: what would change, nothing written
    assert out("files", "put", "--check", "--steps", steps)["changed"] == [str(rec), str(kg / "x.service"),
                                                                          str(kg / "speed-gate.json")]
    assert not rec.exists() and not list(kg.iterdir())
    # the third step copies what the first wrote: in order
    assert len(out("files", "put", "--steps", steps)["changed"]) == 3
    assert (kg / "speed-gate.json").read_text() == rec.read_text() == '{\n    "verdict": "pays"\n}'
    assert (kg / "x.service").read_bytes() == unit.read_bytes() and mode(kg / "x.service") == 0o644
    # again: nothing differs, nothing changes; a mode put right is a change
    assert out("files", "put", "--steps", steps)["changed"] == []
    os.chmod(rec, 0o600)
    assert out("files", "put", "--steps", steps)["changed"] == [str(rec)] and mode(rec) == 0o644
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_files_put_stops_at_a_missing_source_in_one_line_naming_what_it_changed(tmp_path: Path) -> None:
    rec = tmp_path / "speed-gate.json"
    steps = json.dumps([{"dest": str(rec), "content": "{}"},
                        {"dest": str(tmp_path / "kg.service"), "src": str(tmp_path / "gone.service")},
                        {"dest": str(tmp_path / "after"), "content": "x"}])
    done = host("files", "put", "--steps", steps)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (f"files put: {tmp_path}/gone.service: no such file (to copy to "
                                   f"{tmp_path}/kg.service); changed before it: {rec}")
    assert not (tmp_path / "after").exists()
    assert host("files", "put", "--steps", '[{"dest": "x"}]').returncode == 2


def test_models_place_makes_the_directory_empties_incoming_and_fixes_the_models_in_place(tmp_path: Path) -> None:
    models = tmp_path / "models"
    me, group = str(os.getuid()), str(os.getgid())
    args = ["models_place", "--dir", str(models), "--owner", me, "--group", group, "--dir-mode", "0755",
            "--file-mode", "0644"]
    same, changed = b"GGUF same", b"GGUF changed"
    expect = ["--expect", f"same.gguf={hashlib.sha256(same).hexdigest().upper()}",
              "--expect", f"changed.gguf={hashlib.sha256(b'GGUF the verified one').hexdigest()}",
              "--expect", f"new.gguf={hashlib.sha256(b'GGUF new').hexdigest()}"]
    first = out(*args, *expect)
    assert first["changed"] == [str(models), str(models / ".incoming")] and first["removed"] == []
    assert mode(models) == 0o755 and mode(models / ".incoming") == 0o700
    assert first["sha256"] == {"same.gguf": None, "changed.gguf": None, "new.gguf": None}

    (models / "same.gguf").write_bytes(same)
    (models / "same.gguf").chmod(0o600)
    (models / "changed.gguf").write_bytes(changed)
    (models / "changed.gguf").chmod(0o600)
    left = models / ".incoming" / ".ansible-tmp-1" / "source"
    left.parent.mkdir()
    left.write_bytes(b"half")
    (models / ".incoming" / ".hidden").write_bytes(b"xy")
    # --check: said, not done
    checked = out(*args, *expect, "--check")
    assert [r["path"] for r in checked["removed"]] == [str(models / ".incoming" / ".ansible-tmp-1"),
                                                       str(models / ".incoming" / ".hidden")]
    assert checked["removed"][1]["size"] == 2 and str(models / "same.gguf") in checked["changed"]
    assert left.exists() and mode(models / "same.gguf") == 0o600

    second = out(*args, *expect)
    assert second["sha256"] == {"same.gguf": hashlib.sha256(same).hexdigest(),
                                "changed.gguf": hashlib.sha256(changed).hexdigest(), "new.gguf": None}
    assert not list((models / ".incoming").iterdir())
    # only the model in place as verified is put right; the changed one is the copy's to replace
    assert mode(models / "same.gguf") == 0o644 and mode(models / "changed.gguf") == 0o600
    assert str(models / "same.gguf") in second["changed"] and str(models / "changed.gguf") not in second["changed"]
    assert out(*args, *expect)["changed"] == []


def test_models_place_refuses_an_unknown_owner_in_one_line(tmp_path: Path) -> None:
    done = host("models_place", "--dir", str(tmp_path / "m"), "--owner", "no-such-user-here", "--group", "0",
                "--dir-mode", "0755", "--file-mode", "0644")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "no-such-user-here" in done.stderr
    assert not (tmp_path / "m").exists()


def fake_server(tmp_path: Path, rc: int = 0) -> Path:
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\n"
                   'if [ "$1" = --help ]; then echo "usage: llama-server"; echo "load_backend: x" >&2; fi\n'
                   'if [ "$1" = --version ]; then echo "version: 1 (abc)" >&2; echo "env $SPECOPS_T"; fi\n'
                   f"exit {rc}\n")
    exe.chmod(0o755)
    return exe


def test_server_help_runs_help_and_version_as_the_command_module_did(tmp_path: Path) -> None:
    exe = fake_server(tmp_path)
    saved = tmp_path / "capabilities.json"
    done = host("server_help", "--bin", str(exe), "--saved", str(saved), env={"SPECOPS_T": "on", "PATH": "/bin"})
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    # stdout, a newline, stderr: each without its last newline (ansible.builtin.command's stdout ~ '\n' ~ stderr)
    assert said == {"help": "usage: llama-server\nload_backend: x", "version": "env on\nversion: 1 (abc)",
                    "saved": None}
    saved.write_text('{"commit": "abc"}\n')
    assert json.loads(host("server_help", "--bin", str(exe), "--saved", str(saved)).stdout)["saved"] == \
        '{"commit": "abc"}\n'


def test_server_help_fails_in_one_line_when_the_server_does_not_run(tmp_path: Path) -> None:
    done = host("server_help", "--bin", str(fake_server(tmp_path, rc=127)))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"server_help: {tmp_path}/llama-server --help exited 127: load_backend: x"
    done = host("server_help", "--bin", str(tmp_path / "gone"))
    assert done.returncode == 1 and "No such file" in done.stderr and len(done.stderr.strip().splitlines()) == 1
