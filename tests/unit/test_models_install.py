"""roles/models/tasks/install.yml on this machine: a model on the host that is not the verified file is reported
(WARNING, the file, both sha256) and then replaced; a matching one, a new one and an unverified one are not."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import sys
from pathlib import Path

import yaml

from tests import lab


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_changed_model_on_the_host_is_reported_then_replaced(tmp_path: Path) -> None:
    cache, host = tmp_path / "cache", tmp_path / "host"
    cache.mkdir()
    host.mkdir()
    data = {name: f"GGUF model {name}".encode() for name in ("same", "tampered", "new", "unverified")}
    for name, body in data.items():
        (cache / f"{name}.gguf").write_bytes(body)
    (host / "same.gguf").write_bytes(data["same"])
    (host / "tampered.gguf").write_bytes(b"GGUF model tampered!")
    (host / "unverified.gguf").write_bytes(b"GGUF something else")
    (host / "same.gguf").chmod(0o600)   # in place as verified: not sent again, its mode put right
    (host / ".incoming" / ".ansible-tmp-1-2-3").mkdir(parents=True)   # what an interrupted copy left
    (host / ".incoming" / ".ansible-tmp-1-2-3" / "source").write_bytes(b"half a model")
    fetched = [{"name": name, "path": str(cache / f"{name}.gguf"), "fetched": False, "size": len(body),
                "sha256": None if name == "unverified" else _sha(body), "verified": name != "unverified"}
               for name, body in data.items()]
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"specops_models_fetched": fetched, "specops_models_dir": str(host),
                      "specops_models_owner": pwd.getpwuid(os.getuid()).pw_name,
                      "specops_models_group": grp.getgrgid(os.getgid()).gr_name,
                      "specops_models_dir_mode": "0755", "specops_models_file_mode": "0644"},
             "tasks": [{"ansible.builtin.include_role": {"name": "models", "tasks_from": "install"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = lab.ansible_playbook(str(tmp_path / "play.yml"), "-i", "localhost,", "-e",
                               f"ansible_python_interpreter={sys.executable}", timeout=300,
                               env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})  # one message, one line
    assert run.rc == 0, run.output[-3000:]
    warnings = [line for line in run.output.splitlines() if "WARNING: model" in line]
    assert len(warnings) == 1, run.output[-3000:]
    assert (f"WARNING: model tampered, {host}/tampered.gguf: expected {_sha(data['tampered'])} (verified on the "
            f"controller), found {_sha(b'GGUF model tampered!')} on localhost: the host's copy was changed or "
            "corrupted; replacing it") in warnings[0]
    for name, body in data.items():
        assert (host / f"{name}.gguf").read_bytes() == body
        assert (host / f"{name}.gguf").stat().st_mode & 0o7777 == 0o644, name
    assert list((host / ".incoming").iterdir()) == [] and (host / ".incoming").stat().st_mode & 0o7777 == 0o700
    assert f"removed {host}/.incoming/.ansible-tmp-1-2-3" in run.output, run.output[-3000:]
