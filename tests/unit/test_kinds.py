"""The table of candidate kinds (specops.kinds): which candidates the files and the build allow, what each kind
probes, how ties rank, what the memory fit checks; a made-up kind followed through every step of the tune; and no
tune step naming a kind by hand."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from specops import kinds
from specops.bench.arms import parse_arm
from specops.bench.costmodel import Run, StepCosts
from specops.bench.stats import Interval
from specops.knobs import NGRAM_TYPES, knob
from specops.tune import decide, predict, price, probes, record
from specops.tune.deploy import scope
from specops.tune.result import profile_vars

pytestmark = pytest.mark.fast

TYPES = ("none", "draft-simple", "draft-mtp", "draft-eagle3", "ngram-simple", "ngram-mod", "ngram-cache")
PINNED = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def files(**kw) -> kinds.Files:
    return kinds.Files(**{"lengths": (2, 4), "spec_types": TYPES, **kw})


def test_candidates_follow_the_build_and_the_models():
    assert kinds.candidates(files(lengths=(16, 2, 8), draft_arch="llama")) == [
        "exact-n2", "exact-n8", "exact-n16", "exact-ngram-mod", "exact-ngram-simple", "exact-ngram-cache",
        "exact-spec-default"]
    assert kinds.candidates(files(ngram=("ngram-mod",), with_default=False)) == ["exact-ngram-mod"]
    assert kinds.candidates(files(ngram=(), with_default=False)) == []


def test_llama_cpps_default_is_measured_once_where_it_is_a_known_ngram_type():
    """At 0c1e57098 --spec-default is ngram-mod with ngram-mod's own defaults (common/arg.cpp, common/common.h): one
    server, probed and measured once under exact-ngram-mod."""
    got = kinds.candidates(files(commit=PINNED))
    assert "exact-spec-default" not in got and got.count("exact-ngram-mod") == 1
    assert kinds.candidates(files(ngram=(), commit=PINNED)) == ["exact-ngram-mod"]
    assert kinds.candidates(files(ngram=(), commit="4227c9be4")) == ["exact-spec-default"]


def test_every_ngram_type_has_a_place_in_the_probe_order():
    assert sorted(kinds.NGRAM_ORDER) == sorted(NGRAM_TYPES)


def test_a_target_with_mtp_layers_brings_the_mtp_head_at_each_n_max():
    got = kinds.candidates(files(target_mtp=True, ngram=(), with_default=False))
    assert got == ["exact-mtp-n2", "exact-mtp-n4"]
    # a build without draft-mtp, or a target without MTP layers: none
    assert kinds.candidates(files(target_mtp=True, spec_types=("draft-simple",), ngram=(), with_default=False)) == []
    assert kinds.candidates(files(ngram=(), with_default=False)) == []


def test_a_target_with_mtp_layers_brings_its_type_list_with_ngram_mod_too():
    got = kinds.candidates(files(target_mtp=True, lengths=(3,), with_default=False))
    assert got == ["exact-mtp-n3", "exact-mtp-n3-ngram-mod", "exact-ngram-mod", "exact-ngram-simple",
                   "exact-ngram-cache"]
    assert kinds.of("exact-mtp-n3-ngram-mod").profile("exact-mtp-n3-ngram-mod") == {
        "spec_type": "draft-mtp,ngram-mod", "draft_n_max": 3, **kinds.EXACT_NUMERICS}
    assert kinds.tie_rank("exact-mtp-n3") < kinds.tie_rank("exact-mtp-n3-ngram-mod") < kinds.tie_rank("exact-n2")
    s = scope("auto", "draft-mtp, ngram-mod", None, False, [2, 4])
    assert s.run and s.args == ("--lengths", "2,4", "--kinds", "mtp-ngram"), s


def test_an_eagle3_draft_is_measured_as_eagle3_never_as_a_draft_model():
    got = kinds.candidates(files(draft_arch=kinds.EAGLE3_ARCH, ngram=(), with_default=False))
    assert got == ["exact-eagle3-n2", "exact-eagle3-n4"]
    assert kinds.candidates(files(draft_arch="llama", ngram=(), with_default=False)) == ["exact-n2", "exact-n4"]


def test_kinds_narrows_the_candidates_to_the_kinds_asked():
    f = files(draft_arch="llama", target_mtp=True, only=kinds.parse_only("mtp"))
    assert kinds.candidates(f) == ["exact-mtp-n2", "exact-mtp-n4"]
    assert kinds.parse_only("auto") is None and kinds.parse_only("") is None
    with pytest.raises(kinds.KindError, match="unknown kind lookahead"):
        kinds.parse_only("mtp,lookahead")


@pytest.mark.parametrize("name", ["exact-n4", "exact-eagle3-n3", "exact-mtp-n2", "exact-mtp-n2-ngram-mod",
                                  "exact-ngram-mod",
                                  "exact-ngram-map-k4v", "exact-spec-default", "draft-n8", "mtp-n3", "ngram-simple"])
def test_each_kind_is_an_arm_of_the_bench_with_the_same_settings(name):
    kind, arm = kinds.of(name), parse_arm(name)
    assert arm.profile == kind.profile(name)
    assert (arm.draft is not None) == kind.draft_model
    for setting in kind.profile(name):  # its argv goes through the knob table
        assert knob(setting).name == setting


def test_ties_rank_plain_then_nothing_loaded_then_the_mtp_head_then_a_draft_model():
    names = ["exact-n2", "exact-mtp-n4", "exact-ngram-simple", "plain", "exact-eagle3-n2", "exact-mtp-n2",
             "exact-ngram-mod", "exact-n8"]
    assert sorted(names, key=kinds.tie_rank) == [
        "plain", "exact-ngram-mod", "exact-ngram-simple", "exact-mtp-n2", "exact-mtp-n4", "exact-n2",
        "exact-eagle3-n2", "exact-n8"]


def test_probes_run_each_kind_with_lengths_at_its_longest_and_shortest():
    names = ["exact-n2", "exact-n4", "exact-n8", "exact-mtp-n2", "exact-mtp-n8", "exact-ngram-mod"]
    assert kinds.probe_names(names) == ["exact-n8", "exact-n2", "exact-mtp-n8", "exact-mtp-n2", "exact-ngram-mod"]
    assert kinds.probe_names(names, own_probes=False) == ["exact-n8", "exact-n2", "exact-mtp-n8", "exact-mtp-n2"]
    assert kinds.essential(names) == ["exact-n8", "exact-mtp-n8"]


def test_the_memory_fit_checks_each_kind_present():
    got = kinds.fit_spec_types(["exact-n2", "exact-n8", "exact-mtp-n4", "exact-ngram-mod", "exact-ngram-simple"])
    assert got == [("draft-simple", True, 8), ("draft-mtp", False, 4), ("ngram-mod", False, 0)]


def test_the_record_keys_the_new_kinds_only(tmp_path):
    """A record written before the table (draft lengths, n-gram types, llama.cpp's default) keeps its key; one with
    an MTP or EAGLE-3 candidate names the kinds in its settings."""
    args = argparse.Namespace(**{k: None for k in record.SETTINGS}, tasks=None, target=None, draft=None, parallel=1)
    args.kinds = "auto"  # specops tune's default: left out of the key, as before the table
    old = record.facts(tmp_path, "cpu", args, ["exact-n2", "exact-ngram-mod"])["settings"]
    assert "candidate_kinds" not in old and "kinds" not in old
    args.kinds = "draft"
    assert record.facts(tmp_path, "cpu", args, ["exact-n2"])["settings"]["kinds"] == "draft"
    args.kinds = "auto"
    new = record.facts(tmp_path, "cpu", args, ["exact-n2", "exact-mtp-n2"])["settings"]
    assert new["candidate_kinds"] == ["mtp"]


def test_the_deploy_tunes_the_length_of_each_kind_that_has_one():
    s = scope("auto", "draft-mtp", None, False, [2, 4])
    assert s.run and s.args == ("--lengths", "2,4", "--kinds", "mtp") and "MTP n-max among 2,4" in s.why
    s = scope("auto", "draft-eagle3", None, True, [2, 4])
    assert s.run and s.draft and s.args == ("--lengths", "2,4", "--kinds", "eagle3")
    assert not scope("auto", "draft-eagle3", None, False, [2, 4]).run  # its draft model is missing
    assert not scope("auto", "ngram-mod", None, True, [2, 4]).run  # a kind without a length: nothing to choose


# -- a made-up kind, followed through every step

LOOKAHEAD = kinds.Kind(
    "lookahead", "exact-la-n<K>", re.compile(r"^(?:exact-)?la-n(\d+)$"), "ngram-map-k", "",
    lambda f: "ngram-map-k" in f.spec_types, kinds.TARGET, kinds.LENGTHS, 1, names=lambda f: [
        f"exact-la-n{k}" for k in sorted(f.lengths)], keyed=True, length_name="look-ahead",
    description="a made-up kind: ngram-map-k drafting K tokens, probed by lengths")


@pytest.fixture
def lookahead(monkeypatch):
    monkeypatch.setattr(kinds, "KINDS", [*kinds.KINDS, LOOKAHEAD])
    return LOOKAHEAD


def test_a_made_up_kind_goes_through_every_step(lookahead, tmp_path):
    f = files(spec_types=(*TYPES, "ngram-map-k"), ngram=(), with_default=False, lengths=(3, 6))
    names = kinds.candidates(f)
    assert names == ["exact-la-n3", "exact-la-n6"]
    # the bench builds its server from the table; the deploy sets its variables
    assert parse_arm("exact-la-n6").profile == {"spec_type": "ngram-map-k", "draft_n_max": 6,
                                                **kinds.EXACT_NUMERICS}
    assert profile_vars("exact-la-n3") == {"llama_server_spec_type": "ngram-map-k", "llama_server_draft_n_max": 3}
    # probes: its longest (always) and its shortest
    s = SimpleNamespace(names=names, ngram_probes=False, lengths=[3, 6])
    assert probes.probe_names(s) == [probes.PLAIN_ARM, "exact-la-n6", "exact-la-n3"]
    assert kinds.essential(names) == ["exact-la-n6"]
    # the ceiling prices no draft model for it and rules nothing of it out
    assert price.priced_draft(names) == []
    no_draft = argparse.Namespace(draft=None, measure_all=False, probe_all=False)
    assert price.pruned(SimpleNamespace(names=names), no_draft, StepCosts(0.1, {})) == ({}, [])
    # predicted from its longest probe's per-position acceptance, each length
    found = {probes.PLAIN_ARM: probes.ProbeResult(probes.PLAIN_ARM, Run(100, 12.0)),
             "exact-la-n6": probes.ProbeResult("exact-la-n6", Run(100, 8.0, 30, 180, 70),
                                               {str(i): 30 * 0.8 ** (i + 1) for i in range(6)})}
    _, preds, _ = predict.predict(s, StepCosts(0.1, {1: 1.0, 4: 1.2, 7: 1.4}), found)
    by = {p.name: p for p in preds}
    assert set(by) == set(names) and all(p.predicted and p.predicted > 0 for p in by.values())
    assert "not priced" in by["exact-la-n3"].how
    # the choice ranks it in ties by its tier: cheaper than a draft model, dearer than plain decoding
    iv = Interval(1.2, 1.1, 1.3, 12)
    c = decide.choose([decide.Measured("exact-n2", iv, True), decide.Measured("exact-la-n3", iv, True)])
    assert c.chosen == "exact-la-n3"
    assert kinds.fit_spec_types(names) == [("ngram-map-k", False, 6)]
    assert kinds.parse_only("lookahead") == frozenset({"lookahead"})
    args = argparse.Namespace(**{k: None for k in record.SETTINGS}, tasks=None, target=None, draft=None, parallel=1)
    assert record.facts(tmp_path, "cpu", args, names)["settings"]["candidate_kinds"] == ["lookahead"]
    assert "look-ahead among 3,6" in scope("auto", "ngram-map-k", None, False, [3, 6]).why


def test_a_kind_is_one_entry(lookahead):
    """The same kind twice, or a name two kinds claim, would make the table ambiguous."""
    assert len(kinds.keys()) == len(set(kinds.keys()))
    for k in kinds.KINDS:
        if k.probe == kinds.LENGTHS:
            assert [o.key for o in kinds.KINDS if o.matches(k.name(3))] == [k.key]


# -- no tune step names a kind by hand

STEPS = Path(kinds.__file__).parent / "tune"
# what a kind is called in llama.cpp (its spec types) or in the tune's grammar: only the table says these
BY_HAND = re.compile(r"^(draft-(simple|mtp|eagle3)|ngram-[a-z0-9-]+|exact-(n\d*|mtp|eagle3|ngram|spec)[-a-z0-9<>]*)$")


def test_no_tune_step_names_a_kind_by_hand():
    found = []
    for path in sorted(STEPS.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and BY_HAND.match(node.value):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.Attribute) and node.attr == "draft" and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", "") == "parse_arm":
                found.append(f"{path.name}:{node.lineno}: parse_arm(...).draft (the kind guessed from the arm)")
    assert not found, "a tune step names a kind by hand (read it from specops.kinds):\n" + "\n".join(found)


def test_the_kinds_table_is_in_the_design_doc():
    text = (Path(kinds.__file__).parents[2] / "docs" / "design.md").read_text()
    assert "specops/kinds.py" in text and all(k.grammar in text for k in kinds.KINDS if k.key != kinds.PLAIN)


# -- the tune's steps return what they found (issue 64 item 3)

MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add", "discard"}


def _writes_to_setup(tree: ast.AST) -> list[int]:
    """Lines where ``s.<attr>`` (the Setup) is assigned, or a container in it is changed in place."""
    def on_setup(node: ast.AST) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return isinstance(node, ast.Name) and node.id == "s"

    lines = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        lines += [node.lineno for t in targets if isinstance(t, (ast.Attribute, ast.Subscript)) and on_setup(t)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS \
                and isinstance(node.func.value, (ast.Attribute, ast.Subscript)) and on_setup(node.func.value) \
                and not ast.unparse(node.func.value).startswith(("s.meter", "s.progress", "s.store")):
            lines.append(node.lineno)
    return lines


def test_the_tunes_steps_write_nothing_shared():
    """The Setup is frozen, and no step changes a container in it: each returns what it found (and what stays
    open), the pipeline carries it to the one builder of the record (specops.tune.result). The progress file, the
    notes and the work dir's store are outputs, not state."""
    from dataclasses import FrozenInstanceError, fields

    from specops.tune.state import Setup

    assert Setup.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert not {"open", "drift", "retuned"} & {f.name for f in fields(Setup)}
    found = {p.name: _writes_to_setup(ast.parse(p.read_text())) for p in sorted(STEPS.glob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, found
    s = object.__new__(Setup)
    with pytest.raises(FrozenInstanceError):
        s.names = []  # type: ignore[misc]


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_no_two_tune_modules_differ_by_a_suffix():
    """probes.py beside probing.py, streams.py beside at_streams.py: one name each."""
    names = sorted(p.stem for p in STEPS.glob("*.py") if p.stem != "__init__")
    close = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if a.startswith(b) or b.startswith(a) or a.endswith(b) or b.endswith(a)
             or _common_prefix(a, b) >= 4]
    assert not close, close
