"""Every kind in the tune (issue 64 item 2), with real processes: ``specops tune`` on a target with an MTP layer
(``tests/tiny_mtp.py``) measures the target's own MTP head and its type list with ngram-mod at their n-max values,
and beside SmolLM2 with an EAGLE-3 draft (``tests/tiny_eagle3.py``) measures draft-eagle3 at its lengths: the
candidates come from the models (no flag names a kind; ``--kinds`` keeps the run to the kinds under test), are
probed at their longest and shortest length, predicted, measured side by side with plain decoding, and the record
names their kind (its rows and its key).

The tiny models' weights are random, so their drafts are never right: llama.cpp's synthetic acceptance
(``--synth-rates``, rule fastest) makes them drafted and accepted, and the measurement runs every predicted candidate
(``--measure-all``); the choice is whatever the figures say (on a 10 MB model a round's own cost outweighs what it
accepts), and what it serves is the kind's own setting. Checks the mechanics, not speed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specops.cli import main
from tests import lab, tiny_eagle3, tiny_mtp
from tests.integration.test_bench_smollm import TASKS

pytestmark = pytest.mark.integration


def _tune(llama_build: lab.LlamaBuild, target: Path, draft: Path | None, tmp_path: Path, capsys,
          kinds: list[str]) -> dict:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    out = tmp_path / "tune.json"
    rc = main(["tune", "--llama-prefix", str(llama_build.prefix), "--target", str(target),
               *(["--draft", str(draft)] if draft else []), "--tasks", str(tasks), "--lengths", "2,3",
               "--kinds", ",".join(kinds), "--budget", "4", "--probe-tokens", "24", "--max-tokens", "24",
               "--threads", "1", "--ctx-size", "1024", "--limit-per-workload", "2", "--rule", "fastest",
               "--synth-rates", "1,1,1", "--measure-all", "--work-dir", str(tmp_path / "work"), "--out", str(out),
               "--quiet"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    return json.loads(out.read_text())


def _check(res: dict, kind_of: dict[str, str], spec_types: dict[str, str]) -> None:
    """``kind_of``: each candidate expected, in order, and its kind; ``spec_types``: each kind's llama-server type."""
    by = {c["name"]: c for c in res["candidates"]}
    names = list(kind_of)
    assert list(by) == names and all(c["kind"] == kind_of[n] for n, c in by.items()), res["candidates"]
    # probed at the longest and the shortest length, alone, and they drafted
    assert set(res["probes"]) == {"exact-baseline", *names}, res["probes"]
    for name in names:
        assert res["probes"][name]["drafts"] > 0 and res["probes"][name]["accepted"] > 0, res["probes"][name]
        assert by[name]["predicted"] is not None and "not priced" in by[name]["how"], by[name]
        assert by[name]["vars"]["llama_server_spec_type"] == spec_types[kind_of[name]]
        assert by[name]["vars"]["llama_server_draft_n_max"] == int(re.search(r"-n(\d+)", name).group(1))
    # measured side by side with the unit's plain decoding (or what stopped it said)
    measured = [n for n in names if by[n]["measured"] is not None]
    assert measured or res["open"], res
    for name in measured:
        assert by[name]["measured_interval"]["n"] >= 1
    # the record's key names the kind (a record from before the kinds' table keeps its own)
    assert res["facts"]["settings"]["candidate_kinds"] == sorted(set(kind_of.values()))
    assert res["chosen"] in ("plain", *names)
    assert res["vars"]["llama_server_spec_type"] == ("none" if res["chosen"] == "plain" else
                                                     spec_types[kind_of[res["chosen"]]])
    print(f"\n{'/'.join(sorted(set(kind_of.values()))).upper()} | chosen {res['chosen']}: " + "; ".join(
        f"{n} predicted {by[n]['predicted']:.2f}×, measured {by[n]['measured']}" for n in names))


def test_a_target_with_an_mtp_layer_is_tuned_over_its_mtp_head(llama_build, tmp_path, capsys) -> None:
    """The MTP head alone and its type list with ngram-mod (``--kinds mtp,mtp-ngram``: the n-gram types alone are
    other tests' business)."""
    res = _tune(llama_build, tiny_mtp.cached(), None, tmp_path, capsys, ["mtp", "mtp-ngram"])
    _check(res, {"exact-mtp-n2": "mtp", "exact-mtp-n3": "mtp", "exact-mtp-n2-ngram-mod": "mtp-ngram",
                 "exact-mtp-n3-ngram-mod": "mtp-ngram"}, {"mtp": "draft-mtp", "mtp-ngram": "draft-mtp,ngram-mod"})


def test_an_eagle3_draft_is_tuned_as_eagle3(llama_build, smollm, tmp_path, capsys) -> None:
    eagle = tiny_eagle3.write(smollm, tmp_path / "tiny-eagle3.gguf")
    res = _tune(llama_build, smollm, eagle, tmp_path, capsys, ["eagle3"])
    _check(res, {"exact-eagle3-n2": "eagle3", "exact-eagle3-n3": "eagle3"}, {"eagle3": "draft-eagle3"})
    # llama-bench priced the target alone: an EAGLE-3 head cannot run without it
    assert set(json.loads((tmp_path / "work" / "ceiling.json").read_text())["draft_step_s"]) == set()
