"""A fleet tunes once per kind of host (issue 63 item 1): the kind key (the tune's facts with each model by its
content, never its path or mtime), ``specops tune --shared`` (a record of this host's kind adopted, saying from which
host and why; one of another kind refused in one line), ``--kind-only`` (what the deploy asks the host), and the
deploy's side: the choice's line, the summary, and the one line when this host's speed gate disagrees with a shared
choice (specops.tune.deploy.disputed). The two-host lab run: tests/integration/test_fleet.py."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from specops.bench.runner import Progress
from specops.commands import tune as tune_command
from specops.tune import deploy, progress, record
from specops.tune.state import TuneError
from tests.unit.by_path import plugin_filters

pytestmark = pytest.mark.fast

MODEL = b"GGUF" + b"\x01" * 60


def _prefix(root: Path, build: str = "b1") -> Path:
    prefix = root / f"llama-{build}"
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "build-info.json").write_text(json.dumps({"build_id": build, "backend": "cpu"}))
    return prefix


def _model(path: Path, content: bytes = MODEL, mtime: int = 1_700_000_000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.utime(path, (mtime, mtime))
    return path


def _args(target: Path, **kw) -> argparse.Namespace:
    base = {k: None for k in record.SETTINGS} | {"synth_rates": (), "tasks": None, "target": target, "draft": None,
                                                  "lengths": "2,4", "parallel": 1, "target_sha256": None,
                                                  "draft_sha256": None}
    return argparse.Namespace(**(base | kw))


def _kind(prefix: Path, args: argparse.Namespace) -> dict:
    return record.kind(record.facts(prefix, "cpu", args), args)


def test_two_hosts_with_the_same_content_elsewhere_are_one_kind(tmp_path: Path):
    """The same model at another path, written at another time: the host keys differ (path, mtime_ns), the kind is
    one; the verified sha256 the models role passes is the hash the tune would take itself."""
    a = _args(_model(tmp_path / "host-a" / "models" / "t.gguf", mtime=1_700_000_000))
    b = _args(_model(tmp_path / "host-b" / "srv" / "t-copy.gguf", mtime=1_800_000_000))
    pa, pb = _prefix(tmp_path / "host-a"), _prefix(tmp_path / "host-b")
    fa, fb = record.facts(pa, "cpu", a), record.facts(pb, "cpu", b)
    assert record.key(fa) != record.key(fb) and record.changed(fa, fb) == ["target"]
    ka, kb = record.kind(fa, a), record.kind(fb, b)
    assert ka["key"] == kb["key"]
    assert ka["facts"]["target"] == {"size": len(MODEL), "sha256": hashlib.sha256(MODEL).hexdigest()}
    given = _args(b.target, target_sha256=hashlib.sha256(MODEL).hexdigest())
    assert record.kind(fb, given)["key"] == ka["key"]


@pytest.mark.parametrize("what", ["model sha256", "model content", "build", "device", "N", "setting", "tasks"])
def test_the_kind_moves_with_what_the_result_depends_on(tmp_path: Path, monkeypatch, what: str):
    target = _model(tmp_path / "models" / "t.gguf")
    prefix = _prefix(tmp_path)
    base = _kind(prefix, _args(target))
    args, where = _args(target), prefix
    if what == "model sha256":  # the models role's verified sha256 of another file of the same size
        args = _args(target, target_sha256="ab" * 32)
    elif what == "model content":
        args = _args(_model(tmp_path / "other" / "t.gguf", MODEL[:-1] + b"\x02"))
    elif what == "build":
        where = _prefix(tmp_path, "b2")
    elif what == "device":
        monkeypatch.setattr(record, "cpu_name", lambda: "another CPU")
    elif what == "N":
        args = _args(target, parallel=4)
    elif what == "setting":
        args = _args(target, lengths="2,8")
    else:
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text('{"id": "a", "workload": "edit", "messages": []}\n')
        args = _args(target, tasks=[tasks])
    other = _kind(where, args)
    assert other["key"] != base["key"], what
    assert record.refusal({"kind": base}, other).startswith("it is of another kind (")


def test_a_sha256_argument_is_64_hex_digits():
    assert record.sha256_arg("AB" * 32) == "ab" * 32
    for bad in ("abc", "zz" * 32, "ab" * 33):
        with pytest.raises(argparse.ArgumentTypeError, match="64 hex digits"):
            record.sha256_arg(bad)


# -- specops tune --shared

def _host(tmp_path: Path, name: str, **kw) -> tuple[SimpleNamespace, argparse.Namespace]:
    """One host's Setup (its facts) and its tune's arguments: --shared FILE, --out its tune.json, no --reuse."""
    target = _model(tmp_path / name / "models" / "t.gguf", mtime=1_700_000_000 + len(name))
    args = _args(target, **kw)
    args.reuse, args.out = None, tmp_path / name / "tune.json"
    s = SimpleNamespace(facts=record.facts(_prefix(tmp_path / name), "cpu", args), progress=Progress(quiet=True),
                        meter=progress.ProgressFile())
    return s, args


def _tuned_on(tmp_path: Path, name: str, **kw) -> dict:
    """The record a fresh tune on host ``name`` wrote, as the deploy keeps it on the controller (tuned_on)."""
    s, args = _host(tmp_path, name, **kw)
    return {"chosen": "exact-ngram-mod", "reason": "1.3× faster", "when": "2026-12-01T10:00:00+0000",
            "vars": {"llama_server_spec_type": "ngram-mod"}, "candidates": [], "facts": s.facts,
            "key": record.key(s.facts), "kind": record.kind(s.facts, args), "tuned_on": name}


def test_a_record_of_this_hosts_kind_is_adopted_and_says_it_was_shared(tmp_path: Path, capsys):
    shared = tmp_path / "tune-shared.json"
    shared.write_text(json.dumps(_tuned_on(tmp_path, "fleet-1")))
    s, args = _host(tmp_path, "fleet-2")
    args.shared = shared
    assert tune_command._reused(s, args)[0] is True
    out = capsys.readouterr().out
    assert ("reused: the result of 2026-12-01T10:00:00+0000 (tuned on fleet-1 and shared with this host: the same "
            "kind ") in out and "the speed gate here still judges it" in out, out
    kept = json.loads(args.out.read_text())
    assert kept["chosen"] == "exact-ngram-mod" and kept["vars"] == {"llama_server_spec_type": "ngram-mod"}
    # this host's own facts and key: the next deploy's --reuse keeps it until something here moves
    assert kept["facts"] == s.facts and kept["key"] == record.key(s.facts)
    mine = record.kind(s.facts, args)["key"]
    assert kept["shared"] == {"from": "fleet-1", "when": "2026-12-01T10:00:00+0000", "kind": mine,
                              "record": str(shared), "why": f"the same kind {mine}: {record.SHARED_WHY}"}
    # reused later as its own: said so, still naming where it came from
    s2, again = _host(tmp_path, "fleet-2")
    again.reuse, again.out, again.shared = args.out, args.out, None
    assert tune_command._reused(s2, again)[0] is True
    assert "(the build, the models, the device and the settings are the same; tuned on fleet-1 and shared)" in \
        capsys.readouterr().out


def test_a_record_of_another_kind_is_refused_in_one_line(tmp_path: Path, capsys):
    shared = tmp_path / "tune-shared.json"
    shared.write_text(json.dumps(_tuned_on(tmp_path, "fleet-1", parallel=4)))
    s, args = _host(tmp_path, "fleet-2")
    args.shared = shared
    assert tune_command._reused(s, args)[0] is False
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"shared: the record at {shared} (tuned on fleet-1) is not used: it is of another kind "
                     "(parallel differs); tuning here"], lines
    assert not args.out.exists()


def test_a_record_without_a_kind_or_none_at_all_is_refused(tmp_path: Path, capsys):
    old = _tuned_on(tmp_path, "fleet-1")
    del old["kind"]
    shared = tmp_path / "tune-shared.json"
    shared.write_text(json.dumps(old))
    s, args = _host(tmp_path, "fleet-2")
    args.shared = shared
    assert tune_command._reused(s, args)[0] is False
    assert "is not used: it has no kind key (tuned before records were shared); tuning here" in capsys.readouterr().out
    args.shared = tmp_path / "missing.json"
    assert tune_command._reused(s, args)[0] is False
    assert capsys.readouterr().out.strip() == f"shared: no tune record at {args.shared}: tuning here"


def test_the_hosts_own_record_that_stands_wins_over_a_shared_one(tmp_path: Path, capsys):
    s, args = _host(tmp_path, "fleet-2")
    own = {"chosen": "plain", "when": "earlier", "facts": s.facts, "key": record.key(s.facts), "vars": {},
           "candidates": []}
    args.out.write_text(json.dumps(own))
    shared = tmp_path / "tune-shared.json"
    shared.write_text(json.dumps(_tuned_on(tmp_path, "fleet-1")))
    args.reuse, args.shared = args.out, shared
    assert tune_command._reused(s, args)[0] is True
    assert json.loads(args.out.read_text()) == own
    assert "shared" not in capsys.readouterr().out


def test_a_result_shared_earlier_gives_way_to_a_newer_tune_of_its_kind(tmp_path: Path, capsys):
    """The host's own result was shared from fleet-1; the kind's record on the controller is the same (kept quietly)
    or a newer tune (adopted in its place: a host that tuned the kind again, llama_server_tune_refresh)."""
    shared = tmp_path / "tune-shared.json"
    shared.write_text(json.dumps(_tuned_on(tmp_path, "fleet-1")))
    s, args = _host(tmp_path, "fleet-2")
    args.shared = shared
    assert tune_command._reused(s, args)[0] is True
    capsys.readouterr()
    args.reuse = args.out
    assert tune_command._reused(s, args)[0] is True  # the same record: kept, said as the host's own
    assert "(the build, the models, the device and the settings are the same; tuned on fleet-1 and shared)" in \
        capsys.readouterr().out
    newer = {**_tuned_on(tmp_path, "fleet-3"), "when": "2026-12-02T09:00:00+0000", "chosen": "plain", "vars": {}}
    shared.write_text(json.dumps(newer))
    assert tune_command._reused(s, args)[0] is True
    kept = json.loads(args.out.read_text())
    assert kept["chosen"] == "plain" and kept["shared"]["from"] == "fleet-3" and kept["key"] == record.key(s.facts)
    assert "tuned on fleet-3 and shared with this host" in capsys.readouterr().out


def test_own_only_does_not_reuse_a_shared_result(tmp_path: Path):
    """llama_server_tune_share: off passes --own-only: a result this host took from another tunes again."""
    shared = tmp_path / "tune-shared.json"
    shared.write_text(json.dumps(_tuned_on(tmp_path, "fleet-1")))
    s, args = _host(tmp_path, "fleet-2")
    args.shared = shared
    assert tune_command._reused(s, args)[0] is True
    again = argparse.Namespace(**{**vars(args), "reuse": args.out, "shared": None, "own_only": True})
    assert tune_command._reused(s, again) == (False, ["it was shared from another host"])


def test_kind_only_prints_the_kind_and_whether_the_own_record_stands(tmp_path: Path, monkeypatch, capsys):
    s, args = _host(tmp_path, "fleet-2")
    args.kind_only = True
    monkeypatch.setattr("specops.tune.prepare.prepare", lambda a: s)
    assert tune_command.run(args) == 0
    assert json.loads(capsys.readouterr().out) == {"kind": record.kind(s.facts, args)["key"], "reuse": False}
    args.out.write_text(json.dumps({"chosen": "plain", "facts": s.facts, "key": record.key(s.facts),
                                    "when": "2026-12-01T10:00:00+0000", "reason": "nothing pays",
                                    "vars": {"llama_server_spec_type": "none"}, "candidates": []}))
    args.reuse = args.out
    assert tune_command.run(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-1])["reuse"] is True
    # where it stands, the lines a reusing tune prints come first: the deploy shows them and runs no tune
    assert "chosen: plain — nothing pays" in out
    assert "reused: the result of 2026-12-01T10:00:00+0000 (the build, the models, the device and the settings are " \
           "the same)" in out
    assert 'variables: {"llama_server_spec_type": "none"}' in out
    # a result shared earlier does not count: the deploy sends the kind's record along, in case it is newer
    args.out.write_text(json.dumps({"chosen": "plain", "facts": s.facts, "key": record.key(s.facts),
                                    "shared": {"from": "fleet-1"}}))
    assert tune_command.run(args) == 0
    assert json.loads(capsys.readouterr().out)["reuse"] is False

    def refuse(a):
        raise TuneError("no llama.cpp build at /x")
    monkeypatch.setattr("specops.tune.prepare.prepare", refuse)
    assert tune_command.run(args) == 0
    assert json.loads(capsys.readouterr().out) == {"kind": None, "reuse": False, "why": "no llama.cpp build at /x"}


# -- the deploy's side

SHARE = {"from": "fleet-1", "when": "then", "kind": "0123abcd", "record": "/etc/specops/tune-shared.json",
         "why": "the same kind 0123abcd: ..."}


def _shared_result(chosen: str = "exact-n4", vars_: dict | None = None) -> dict:
    return {"chosen": chosen, "when": "2026-12-01T10:00:00+0000", "reason": "r", "shared": SHARE,
            "vars": vars_ if vars_ is not None else {"llama_server_spec_type": "draft-simple",
                                                     "llama_server_draft_n_max": 4},
            "candidates": [{"name": "exact-n4", "measured": "1.30× [1.20, 1.40]"}]}


def test_the_choices_line_and_the_summary_name_the_host_it_was_tuned_on():
    res = _shared_result()
    applied = deploy.apply(res, "auto", None)
    assert applied.message.startswith("tune (2026-12-01T10:00:00+0000, tuned on fleet-1 and shared): exact-n4 ")
    assert deploy.summary(res, applied, True)["shared"] == SHARE
    own = {k: v for k, v in res.items() if k != "shared"}
    assert "shared" not in deploy.apply(own, "auto", None).message
    assert deploy.summary(own, applied, True)["shared"] is None


def test_a_gate_that_disagrees_with_a_shared_speculative_choice_is_said_in_one_line():
    disputed = plugin_filters("tune").specops_tune_disputed
    res = _shared_result()
    summary = deploy.summary(res, deploy.apply(res, "auto", None), True)
    line = disputed({"verdict": "loses", "ratio": 0.42}, summary)
    assert line == ("tune: exact-n4, tuned on fleet-1 and shared with the hosts of kind 0123abcd, loses here (0.42× "
                    "plain decoding): the speed gate of this host disagrees, so it tunes for itself now (no shared "
                    "record)"), line
    assert "\n" not in line
    assert "is unproven here (2 prompt(s) measured" in disputed(
        {"verdict": "unproven", "unproven_because": "2 prompt(s) measured"}, summary)
    assert disputed({"verdict": "pays", "ratio": 1.3}, summary) == ""
    own = {**summary, "shared": None}
    assert disputed({"verdict": "loses", "ratio": 0.42}, own) == ""  # its own choice: the gate's usual verdict
    assert disputed({"verdict": "loses"}, None) == ""                 # the tune did not run
    plain = _shared_result("plain", {"llama_server_spec_type": "none"})
    assert disputed({"verdict": "loses"}, deploy.summary(plain, deploy.apply(plain, "draft-simple", None),
                                                         True)) == ""  # the kind the inventory set, not the record's
