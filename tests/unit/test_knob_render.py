"""Every knob is rendered from the table (issue 53, item 2): each knob says how build_argv writes it (its ``render``),
build_argv walks the table, and the command line stays the one the hand-listed build_argv wrote (a changed argv
rewrites every host's unit: the upgrade would restart every service)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops import knobgen, knobs
from specops.argv import FlagError, build_argv, setting_in, spec_type_of
from specops.capabilities import Capabilities, parse_help
from specops.knobs import (
    ALWAYS,
    DRAFT,
    EXTRA,
    GENERAL,
    KNOBS,
    NGRAM,
    SPECULATION,
    SPECULATIVE,
    SWITCH,
    SWITCH_OFF,
    SWITCH_ON,
    VALUED,
    Knob,
    argv_order,
    knob,
)
from specops.profile import ProfileError, ServerProfile, profile_class

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = json.loads((FIX / "argv-golden" / "ca0f252.json").read_text())
CURRENT_HELP = (FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text()
CURRENT = parse_help(CURRENT_HELP)


def build(name: str) -> Capabilities:
    """The builds the golden file was rendered for."""
    if name == "0c1e57098":
        return parse_help(CURRENT_HELP)
    if name == "0c1e57098-no-cache-ram-no-slots":  # a build from before the prompt cache and the /slots flag
        return parse_help("\n".join(line for line in CURRENT_HELP.splitlines()
                                    if "--cache-ram" not in line and not line.startswith("--slots")))
    return parse_help((FIX / f"llama-server-{name}" / "help.txt").read_text())


@pytest.mark.parametrize("case", GOLDEN["renders"], ids=lambda c: f"{c['profile']}@{c['build']}")
def test_the_command_line_is_the_one_the_hand_listed_build_argv_wrote(case):
    """Byte for byte, in order, and the same refusals: the golden file was rendered before the table said how."""
    profile = ServerProfile.from_dict(dict(GOLDEN["profiles"][case["profile"]]))
    try:
        got: object = build_argv(profile, build(case["build"]), binary=GOLDEN["binary"])
    except FlagError as exc:
        got = f"FlagError: {exc}"
    assert got == case["argv"]


def test_the_golden_file_covers_every_knob_and_every_kind():
    """Each knob is set by some golden profile, and every build writes something."""
    given = set().union(*(p.keys() for p in GOLDEN["profiles"].values()))
    assert given == {k.name for k in KNOBS}
    assert {k.render for k in KNOBS} == {ALWAYS, VALUED, SWITCH, SWITCH_ON, SWITCH_OFF, SPECULATION, DRAFT, NGRAM,
                                         SPECULATIVE, EXTRA}


def test_the_argv_order_is_the_tables_but_where_a_knob_says_otherwise():
    general = [k.name for k in argv_order(GENERAL)]
    assert general[:5] == ["model", "host", "port", "ctx_size", "parallel"]
    assert general.index("kv_unified") == general.index("cache_type_v") + 1  # where the unit always had it
    assert [k.name for k in argv_order((DRAFT,))] == [k.name for k in KNOBS if k.name.startswith("draft_")
                                                      and k.name != "draft_model"]
    assert [k.name for k in argv_order((DRAFT,)) if k.mtp] == ["draft_n_max", "draft_n_min", "draft_p_min"]
    assert [k.name for k in argv_order((EXTRA,))] == ["extra_args"]
    assert len(argv_order()) == len(KNOBS)


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"type": "bool", "flags": ("--x-on",)}, "a bool knob is rendered as one of"),
    ({"type": "int", "flags": ("--x",), "render": SWITCH}, "a bool knob is rendered as one of"),
    ({"type": "int"}, "render valued needs its flags"),
    ({"type": "bool", "flags": ("--x",), "render": SWITCH}, "render switch needs off_flags"),
    ({"type": "int", "flags": ("--x",), "render": "sometimes"}, "render 'sometimes' is none of"),
    ({"type": "int", "per_spec_type": (("ngram-mod", "--x"),)}, "a knob with no flag of its own but the n-gram"),
    ({"type": "list", "flags": ("--x",)}, "a list knob is rendered extra"),
    ({"type": "int", "flags": ("--x",), "mtp": True}, "mtp marks a draft setting"),
    ({"type": "int", "flags": ("--x",), "render": DRAFT, "llama_per_type": (("ngram-mod", 3),)},
     "ngram-mod: no n-gram type it has a spelling under"),
])
def test_a_knob_build_argv_could_not_write_is_refused_where_it_is_declared(kwargs, problem):
    kwargs = dict(kwargs)
    kind = kwargs.pop("type")
    flags = kwargs.pop("flags", ())
    with pytest.raises(ValueError, match=rf"^knob x: {problem}"):
        Knob("x", kind, "a setting", flags, **kwargs)


# ---- one new knob of each kind, in a copy of the table -------------------------------------------------------------
NEW = (
    Knob("timeout", "int", "server read/write timeout in seconds", ("--timeout", "-to"), default=3600,
         llama_default=3600, low=1, profile_default=3600, render=ALWAYS),
    Knob("batch_size", "int", "logical batch size", ("--batch-size", "-b"), llama_default=2048, low=1),  # valued
    Knob("cont_batching", "bool", "continuous batching", ("--cont-batching", "-cb"),
         off_flags=("--no-cont-batching", "-nocb"), llama_default=True, render=SWITCH),
    Knob("draft_prio", "int", "draft thread priority", ("--spec-draft-prio", "--prio-draft"), low=0, high=3,
         render=DRAFT),
    Knob("spec_synth_len", "float", "synthetic mean acceptance length", ("--spec-synth-len",), low=1,
         render=SPECULATIVE),
)


# the real table's command line for the profile the new knobs are added to (rendered before any table is patched)
REAL = build_argv(ServerProfile.from_dict({"model": "/m.gguf", "draft_model": "/d.gguf", "spec_synth_rates": "0.9"}),
                  CURRENT)


@pytest.fixture
def table(monkeypatch) -> tuple[Knob, ...]:
    """The real table with :data:`NEW` before the extra arguments; monkeypatch puts the real one back."""
    copy = (*KNOBS[:-1], *NEW, KNOBS[-1])
    monkeypatch.setattr(knobs, "KNOBS", copy)
    monkeypatch.setattr(knobs, "_BY_NAME", {k.name: k for k in copy})
    monkeypatch.setattr(knobgen, "KNOBS", copy)
    return copy


def test_a_new_knob_of_each_kind_is_rendered_without_another_edit(table):
    profile = profile_class(table)
    base = {"model": "/m.gguf", "draft_model": "/d.gguf"}
    plain = build_argv(profile.from_dict(base), CURRENT)
    assert plain[plain.index("--timeout") - 1:plain.index("--timeout") + 2] == ["--slots", "--timeout", "3600"]
    assert not {"--batch-size", "--cont-batching", "--no-cont-batching", "--spec-draft-prio",
                "--spec-synth-len"} & set(plain)
    argv = build_argv(profile.from_dict({**base, "timeout": 30, "batch_size": 512, "cont_batching": False,
                                         "draft_prio": 2, "spec_synth_len": 2.5, "spec_synth_rates": "0.9"}), CURRENT)
    general = argv[argv.index("--slots") + 1:argv.index("--spec-draft-model")]
    assert general == ["--timeout", "30", "--batch-size", "512", "--no-cont-batching"]  # the table's order
    assert argv[-6:] == ["--spec-draft-prio", "2", "--spec-synth-rates", "0.9", "--spec-synth-len", "2.5"]
    assert "--cont-batching" in build_argv(profile.from_dict({**base, "cont_batching": True}), CURRENT)
    # nothing else moved: without the new knobs' words it is what the real table writes
    assert [a for a in argv if a not in ("--timeout", "30", "--batch-size", "512", "--no-cont-batching",
                                         "--spec-draft-prio", "2", "--spec-synth-len", "2.5")] == REAL


def test_a_new_knob_is_range_checked(table):
    profile = profile_class(table)
    for name, bad, says in (("timeout", 0, "at least 1"), ("batch_size", 0, "at least 1"),
                            ("draft_prio", 4, "within 0..3"), ("spec_synth_len", 0.5, "at least 1")):
        with pytest.raises(ProfileError, match=rf"^{name} must be {says}"):
            profile.from_dict({"model": "/m.gguf", name: bad})
    assert knobs.ranges()["draft_prio"] == (0, 3)


def test_a_new_knob_reaches_every_copy_the_table_generates(table):
    """The role's defaults, argument specs and README row (specops knobs --update)."""
    defaults, specs, readme = knobgen.defaults_block(), knobgen.specs_block(), knobs.markdown_table()
    for k in NEW:
        assert f"\n{k.role_var}: " in f"\n{defaults}", k.name
        assert f"      {k.role_var}:\n        type: {k.type}\n" in specs, k.name
        assert f"| `{k.role_var}` |" in readme, k.name
    assert "\nllama_server_timeout: 3600\n" in defaults and "\nllama_server_batch_size: null\n" in defaults
    assert "logical batch size (llama.cpp: 2048; >= 1)" in defaults.replace("\n# ", " ")


# ---- what the role reads back from a command line ------------------------------------------------------------------
@pytest.mark.parametrize(("data", "spec_type"), [
    ({"model": "/m.gguf", "draft_model": "/d.gguf"}, "draft-simple"),
    ({"model": "/m.gguf"}, "none"),
    ({"model": "/m.gguf", "spec_type": "default"}, "default"),
    ({"model": "/m.gguf", "spec_type": "ngram-mod,draft-mtp"}, "ngram-mod,draft-mtp"),
])
def test_the_spec_type_a_command_line_runs(data, spec_type):
    profile = ServerProfile.from_dict(data)
    assert spec_type_of(build_argv(profile, CURRENT), profile.draft_model) == spec_type
    legacy = build("legacy")  # no --spec-type: a draft model means draft-simple
    if spec_type in ("draft-simple", "none"):
        assert spec_type_of(build_argv(profile, legacy), profile.draft_model) == spec_type


def test_a_setting_read_from_a_command_line():
    argv = ["/bin/llama-server", "-m", "/m.gguf", "--port", "8081", "-c", "4096"]
    assert setting_in(argv, "port", 8080) == "8081" and setting_in(argv, "ctx_size") == "4096"
    assert setting_in(argv, "model") == "/m.gguf" and setting_in(argv, "threads") is None
    assert setting_in(["llama-server", "--port"], "port", 8080) == 8080  # a flag without its value: the default
    assert setting_in([], "port", 8080) == 8080


def test_the_role_asks_the_filters_for_what_it_reads_from_a_command_line():
    from tests.unit.by_path import load

    f = load("plugins/filter/specops.py", "specops_filters_knob_render")
    filters = f.FilterModule().filters()
    argv = build_argv(ServerProfile.from_dict({"model": "/m.gguf", "spec_type": "default"}), CURRENT)
    assert filters["specops_argv_spec_type"](argv, None) == "default"
    assert filters["specops_argv_setting"](argv, "port", 9999) == "8080"
    assert filters["specops_argv_setting"](None, "port", 9999) == 9999
    assert filters["specops_devices_argv"]("/opt/b/bin/llama-server") == ["/opt/b/bin/llama-server",
                                                                          knobs.LIST_DEVICES_FLAG]


def test_llama_cpps_per_type_draft_lengths_come_from_the_table():
    from specops.bench.ceiling import NGRAM_DRAFT_N_MAX, arm_n_max

    assert NGRAM_DRAFT_N_MAX == {"ngram-mod": 64, "ngram-simple": 48, "ngram-map-k": 48, "ngram-map-k4v": 48,
                                 "ngram-cache": 3}
    assert knob("draft_n_max").llama_default_for("ngram-mod") == 64
    assert knob("ngram_size_m").llama_default_for("ngram-simple") == 48
    assert arm_n_max({"spec_type": "ngram-mod"}) == 64 and arm_n_max({"spec_type": "ngram-mod", "draft_n_max": 8}) == 8
    assert arm_n_max({"spec_type": "ngram-map-k", "ngram_size_m": 12}) == 12
