"""specops tune's inputs and outputs that need no server (the candidates: test_kinds.py): refusals in one line, the
variables a choice deploys, the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.cli import main
from specops.commands.tune import table
from specops.tune.result import profile_vars

pytestmark = pytest.mark.fast

TYPES = ["none", "draft-simple", "draft-mtp", "ngram-simple", "ngram-mod", "ngram-cache"]

def test_the_variables_a_choice_deploys():
    assert profile_vars("plain") == {"llama_server_spec_type": "none"}
    assert profile_vars("exact-n16") == {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 16}
    # an n-gram type gets llama.cpp's own draft length for it, not the role's draft-model default
    assert profile_vars("exact-ngram-mod") == {"llama_server_spec_type": "ngram-mod", "llama_server_draft_n_max": 64}
    assert profile_vars("exact-ngram-simple") == {"llama_server_spec_type": "ngram-simple"}
    assert profile_vars("exact-spec-default") == {"llama_server_spec_type": "default"}


def test_table_rows():
    text = table({"candidates": [
        {"name": "exact-n16", "predicted": 1.39, "how": "probe", "measured": "1.40× [1.35, 1.45]", "identical": True,
         "verdict": "chosen"},
        {"name": "exact-n2", "predicted": 0.9, "how": "probe", "measured": None, "identical": None,
         "verdict": "predicted 0.90×: cannot clear plain decoding by 5%"}]})
    assert "| exact-n16 | 1.39× | probe | 1.40× [1.35, 1.45] | yes | chosen |" in text
    assert "| exact-n2 | 0.90× | probe | — | — | predicted 0.90×" in text


def _prefix(tmp_path: Path, bench: bool) -> Path:
    bindir = tmp_path / "llama" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "llama-server").write_text("")
    if bench:
        (bindir / "llama-bench").write_text("")
    (tmp_path / "llama" / "capabilities.json").write_text(json.dumps({"spec_types": TYPES, "options": []}))
    return tmp_path / "llama"


@pytest.mark.parametrize(("extra", "bench", "expected"), [
    ([], False, "llama-bench is missing"),
    (["--ngram", "ngram-map-k"], True, "this build has no speculative type ngram-map-k"),
    (["--lengths", "0,4"], True, "--lengths must be draft lengths of at least 1"),
    (["--lengths", "x"], True, "--lengths must be a comma list of numbers"),
    (["--draft", "/nonexistent.gguf"], True, "draft model /nonexistent.gguf not found"),
    (["--mix", "code=1,chat=1"], True, "--mix names workload(s) chat not in the task set"),
    (["--mix", "code=0,edit=0"], True, "--mix: every share is zero; nothing was changed"),
    (["--mix", "code=-1,edit=2"], True, "--mix: code's share is negative (-1)"),
    (["--mix", "edit=1", "--workloads", "code,prose"], True, "--mix names workload(s) edit not in the task set (it "
     "has: code, prose)"),
])
def test_bad_input_is_one_line_and_changes_nothing(tmp_path, capsys, extra, bench, expected):
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    work = tmp_path / "work"
    rc = main(["tune", "--target", str(target), "--llama-prefix", str(_prefix(tmp_path, bench)),
               "--work-dir", str(work), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and expected in err and len(err.splitlines()) == 1, err
    assert not work.exists()


def test_a_ceiling_slower_than_the_server_itself_is_named():
    """The H200 run's ceiling (two llama-bench repetitions) read a 14B step twice the plain server's whole time per
    token: the overhead terms clip to 0 and the predictions ran 9-29% high. The tune says so in what stays open; a
    ceiling consistent with the server (the same data with the step scaled below the server's) says nothing."""
    from types import SimpleNamespace

    from specops.bench.costmodel import Run, StepCosts
    from specops.tune.predict import predict as _predict
    from specops.tune.probes import ProbeResult

    fixtures = Path(__file__).parents[1] / "fixtures" / "gpu-h200-tune"
    ceiling = json.loads((fixtures / "ceiling-qwen2.5-14b.json").read_text())
    found = {n: ProbeResult(n, Run(p["n_tokens"], p["seconds"], p["drafts"], p["drafted"], p["accepted"]),
                            p["per_pos"])
             for n, p in json.loads((fixtures / "probes-qwen2.5-14b.json").read_text())["probes"].items()}
    lengths = [2, 4, 8, 12, 16]
    s = SimpleNamespace(lengths=lengths, names=[f"exact-n{k}" for k in lengths], ngram_probes=True)
    costs = StepCosts.from_ceiling(ceiling, "fa=on,ctv=q8_0", "draft")
    over, preds, said = _predict(s, costs, found)
    assert len(said) == 1 and "slower than the plain server's whole time per token" in said[0], said
    assert "14.1 ms" in said[0] and "7.2 ms" in said[0]
    assert over.per_round == over.per_drafted == 0.0 and len(preds) == 5
    for k, v in ceiling["target"]["fa=on,ctv=q8_0"]["batch_s"].items():
        ceiling["target"]["fa=on,ctv=q8_0"]["batch_s"][k] = v * 0.45  # a step of 6.3 ms: the server's is 7.2
    s2 = SimpleNamespace(lengths=lengths, names=s.names, ngram_probes=True)
    assert _predict(s2, StepCosts.from_ceiling(ceiling, "fa=on,ctv=q8_0", "draft"), found)[2] == []
    # no draft-model probe (the ceiling ruled the draft out on a CPU): the round terms cannot be fitted, and the
    # record says which terms the n-gram predictions lack
    plain_only = {n: r for n, r in found.items() if n == "exact-baseline"}
    s3 = SimpleNamespace(lengths=lengths, names=[], ngram_probes=True)
    said = _predict(s3, StepCosts.from_ceiling(ceiling, "fa=on,ctv=q8_0", "draft"), plain_only)[2]
    assert len(said) == 1 and "missing from the predictions: per round, per drafted token" in said[0]


def test_models_that_do_not_fit_are_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """The probes load the target with the draft: where that does not fit the memory the build computes on, the tune
    says so in one line (the numbers, where to look) and creates nothing."""
    from specops.fit import MIB, Memory
    from tests.unit.synthgguf import write_gguf

    target = write_gguf(tmp_path / "t.gguf", extra_tensor_elems=16 * 2**20)  # 64 MiB of weights
    monkeypatch.setattr("specops.tune.prepare.measure_memory",
                        lambda backend: Memory("host RAM", 100 * MIB, 100 * MIB, "psutil (available)"))
    work = tmp_path / "work"
    rc = main(["tune", "--target", str(target), "--draft", str(target), "--llama-prefix",
               str(_prefix(tmp_path, True)), "--work-dir", str(work)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "the target and the draft model do not fit in host RAM here" in err and "100 MiB available" in err, err
    assert "specops fit" in err and not work.exists()


def test_a_gpu_build_without_its_gpu_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    from tests.unit.synthgguf import write_gguf

    target = write_gguf(tmp_path / "t.gguf")
    prefix = _prefix(tmp_path, True)
    (prefix / "build-info.json").write_text(json.dumps({"backend": "cuda"}))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi
    work = tmp_path / "work"
    rc = main(["tune", "--target", str(target), "--llama-prefix", str(prefix), "--ngram", "ngram-mod",
               "--work-dir", str(work)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "memory fit: nvidia-smi not found" in err and "nothing was changed" in err, err
    assert not work.exists()
