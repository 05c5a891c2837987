"""specops.room (the first play's disk and context checks), disk_facts.py on a real filesystem, and the speed
gate's record as a deploy reads it back (issue 40)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

from specops import room
from specops.speedgate import read_record
from tests.unit.hostcode import argv
from tests.unit.synthgguf import write_gguf

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def facts(*items: dict) -> dict:
    return {"items": [{"dev": 1, "mount": "/srv", "free": 200 * MIB, "present_size": None, **i} for i in items]}


def model(name: str, size_mib: float, **kw) -> dict:
    return {"what": f"model {name}", "variable": "specops_models_dir", "dir": "/srv/m", "file": f"{name}.gguf",
            "size": int(size_mib * MIB), **kw}


def test_models_that_do_not_fit_with_the_margin_are_refused_in_one_line_per_filesystem():
    f = facts(model("t", 120), model("d", 60),
              {"what": "the llama.cpp build (cpu, estimate)", "variable": "llama_server_install_root",
               "dir": "/opt/llama.cpp", "file": "", "size": 150 * MIB, "dev": 2, "mount": "/", "free": 10_000 * MIB})
    [line] = room.disk_problems("h1", f, 64)
    assert line == ("specops_models_dir: not enough disk on h1: the filesystem at /srv has 200 MiB free and this "
                    "deploy writes 180 MiB there (model t 120 MiB + model d 60 MiB) + llama_server_disk_margin_mib "
                    "64; free 44 MiB there or point specops_models_dir at a larger filesystem (nothing was copied)")
    assert room.disk_problems("h1", f, 20) == []          # fits with a smaller margin


def test_a_model_already_there_at_its_size_needs_no_room_and_both_variables_are_named_on_a_shared_filesystem():
    f = facts(model("t", 190, present_size=int(190 * MIB)), model("d", 60),
              {"what": "the build", "variable": "llama_server_install_root", "dir": "/srv/opt", "file": "",
               "size": 150 * MIB})
    [line] = room.disk_problems("h1", f, 0)
    assert line.startswith("llama_server_install_root or specops_models_dir: not enough disk")
    assert "writes 210 MiB there (model d 60 MiB + the build 150 MiB)" in line
    assert room.disk_problems("h1", facts(model("t", 190, present_size=int(190 * MIB))), 0) == []


def test_disk_facts_reads_the_nearest_existing_directory_and_what_is_already_there(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.gguf").write_bytes(b"x" * 1000)
    items = [{"what": "a", "variable": "v", "dir": str(tmp_path / "m"), "file": "a.gguf", "size": 1000},
             {"what": "b", "variable": "v", "dir": str(tmp_path / "not" / "yet"), "file": "b.gguf", "size": 5}]
    out = json.loads(subprocess.run(argv("disk_facts", json.dumps(items)), capture_output=True,
                                    text=True, check=True).stdout)["items"]
    vfs = os.statvfs(tmp_path)
    assert [i["present_size"] for i in out] == [1000, None]
    assert out[0]["dev"] == out[1]["dev"] == os.stat(tmp_path).st_dev
    assert abs(out[1]["free"] - vfs.f_bavail * vfs.f_frsize) < 64 * MIB     # the same filesystem, read twice
    assert Path(out[0]["mount"]) in [tmp_path, *tmp_path.parents]
    assert not (tmp_path / "not").exists()   # reads only


@pytest.fixture
def gguf(tmp_path):
    def make(name: str, context_length: int) -> str:
        path = tmp_path / f"{name}.gguf"
        write_gguf(path, arch="llama", ctx=context_length)
        return str(path)
    return make


def test_a_slot_context_beyond_training_names_the_model_its_figure_and_the_fix(gguf):
    t = room.trained("target", gguf("t", 8192))
    d = room.trained("draft", gguf("d", 4096))
    assert (t.arch, t.context_length) == ("llama", 8192)
    assert room.context_problems(8192, 1, [t]) == []
    assert room.context_problems(0, 1, [t, d]) == []            # 0: the model's own context
    assert room.context_problems(16384, 2, [t]) == []           # 8192 per slot
    [line] = room.context_problems(8192, 1, [t, d])
    assert line == ("llama_server_ctx_size=8192: each slot gets 8192 tokens of context, but the draft d.gguf "
                    "(llama) was trained for 4096 (llama.context_length): past it llama.cpp only logs 'possible "
                    "training context overflow' and the text degrades. Set llama_server_ctx_size <= 4096, or "
                    "llama_server_allow_ctx_beyond_training: true to serve it anyway (warned on every deploy)")
    [line] = room.context_problems(40960, 2, [t])
    assert "each slot gets 40960 / llama_server_parallel 2 = 20480 per slot" in line
    assert "llama_server_ctx_size <= 16384" in line


@pytest.mark.parametrize("text,problem", [
    (None, ""),
    ('{"verdict": "pays", ', "/r.json is not valid JSON (Expecting property name enclosed in double quotes at line 1"),
    ("[1, 2]", "/r.json holds a JSON list, not a speed-gate record"),
    ('{"verdict": "great"}', "/r.json has verdict 'great', none of pays, loses, unproven, not_measured"),
    ('{"verdict": "not_measured", "unit_sha256": "ab"}', ""),
])
def test_a_record_that_is_not_one_is_named_in_one_line(text, problem):
    record, why = read_record(text, "/r.json")
    assert why.startswith(problem) and (why == "") == (problem == "")
    assert record == ({} if problem or text is None else json.loads(text))


def test_the_filter_reads_a_slurp_result():
    from tests.unit.by_path import plugin_filters

    specops_gate_record = plugin_filters("specops").specops_gate_record
    ok = {"content": base64.b64encode(b'{"verdict": "loses", "ratio": 0.6}').decode()}
    assert specops_gate_record(ok, "/r") == {"record": {"verdict": "loses", "ratio": 0.6}, "problem": ""}
    assert specops_gate_record({"failed": True, "msg": "file not found"}, "/r") == {"record": {}, "problem": ""}
    bad = specops_gate_record({"content": base64.b64encode(b"\xff\xfe").decode()}, "/r")
    assert bad["record"] == {} and bad["problem"].startswith("/r is not valid JSON")
