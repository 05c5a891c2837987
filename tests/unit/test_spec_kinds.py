"""Speculation kinds without a draft file (issue 43, items 1-2): draft-mtp (the target's own MTP head), n-gram types
alone, and comma lists of types. One rule decides whether a spec type loads a draft model
(specops.knobs.uses_draft_model, the ``specops_uses_draft_model`` filter): the profile, ``specops argv``, the first
play's refusals, the models role (which draft to fetch, check, install) and the service role's defaults follow it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops import room
from specops.argv import FlagError, build_argv
from specops.capabilities import Capabilities, parse_help
from specops.deploycheck import check_inputs
from specops.knobs import DRAFT_TYPES, NGRAM_TYPES, spec_type_members, spec_type_problem, uses_draft_model
from specops.profile import ProfileError, ServerProfile, models_wanted
from tests.unit.synthgguf import write_gguf

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
CURRENT = parse_help((FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text())
LEGACY = parse_help((FIX / "llama-server-legacy" / "help.txt").read_text())
SPECS = yaml.safe_load((REPO / "roles/llama_server/meta/argument_specs.yml").read_text())["argument_specs"]["main"][
    "options"]


def opt(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def render(**profile) -> list[str]:
    return build_argv(ServerProfile.from_dict({"model": "/m/t.gguf", **profile}), CURRENT)


# ---- the one rule -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec_type,uses", [
    ("auto", True), ("draft-simple", True), ("draft-eagle3", True), ("draft-dflash", True), ("draft-dspark", True),
    ("draft-simple,ngram-mod", True), ("ngram-mod, draft-eagle3", True),
    ("draft-mtp", False), ("ngram-mod", False), ("ngram-simple,ngram-map-k", False), ("draft-mtp,ngram-mod", False),
    ("none", False), ("default", False), ("", False), (None, False),
])
def test_which_spec_types_load_a_draft_model(spec_type, uses):
    assert uses_draft_model(spec_type) is uses


def _plugin(name: str):
    """A filter plugin module loaded by path, as Ansible does."""
    from importlib import util
    spec = util.spec_from_file_location(f"specops_kinds_{name}", REPO / "plugins" / "filter" / f"{name}.py")
    assert spec and spec.loader
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_filter_is_the_rule():
    plugin = _plugin("specops")
    filters = plugin.FilterModule().filters()
    for spec_type in ("auto", "draft-simple", "draft-mtp", "ngram-mod", "draft-mtp,ngram-mod", "none", "default"):
        assert filters["specops_uses_draft_model"](spec_type) is uses_draft_model(spec_type)
    models = [{"catalog": "t"}, {"name": "d", "catalog": "qwen2.5-coder-0.5b"}, {"catalog": "extra"}]
    assert filters["specops_models_wanted"](models, "t", "d", "ngram-mod") == [{"catalog": "t"}, {"catalog": "extra"}]
    assert filters["specops_models_wanted"](models, "t", "d", "auto") == models


def test_the_draft_entry_is_left_out_only_where_the_type_loads_no_draft_and_it_is_not_the_target():
    models = [{"catalog": "smollm2-135m"}, {"catalog": "qwen2.5-coder-0.5b"}]
    assert models_wanted(models, "smollm2-135m", "qwen2.5-coder-0.5b", "ngram-mod") == [models[0]]
    assert models_wanted(models, "smollm2-135m", "qwen2.5-coder-0.5b", "draft-mtp,ngram-mod") == [models[0]]
    assert models_wanted(models, "smollm2-135m", "qwen2.5-coder-0.5b", "draft-simple") == models
    assert models_wanted(models, "smollm2-135m", "smollm2-135m", "ngram-mod") == models  # the draft is the target
    assert models_wanted(models, "smollm2-135m", "", "ngram-mod") == models


# ---- profiles -------------------------------------------------------------------------------------------------------
def test_draft_mtp_needs_no_draft_model_and_renders_without_one():
    argv = render(spec_type="draft-mtp", draft_n_max=3, draft_ngl=99)
    assert opt(argv, "--spec-type") == "draft-mtp" and opt(argv, "--spec-draft-n-max") == "3"
    assert "--spec-draft-model" not in argv and "-md" not in argv
    assert "--spec-draft-ngl" not in argv  # no draft model: the draft model's own settings do not apply


@pytest.mark.parametrize("kind", ["draft-simple", "draft-eagle3", "draft-simple,ngram-mod"])
def test_a_type_that_drafts_with_a_model_still_needs_one(kind):
    with pytest.raises(ProfileError, match="needs draft_model"):
        ServerProfile.from_dict({"model": "t", "spec_type": kind})


@pytest.mark.parametrize("kind", ["draft-mtp", "ngram-mod", "draft-mtp,ngram-mod", "default", "none"])
def test_a_draft_model_with_a_type_that_loads_none_is_refused(kind):
    with pytest.raises(ProfileError, match=r"loads no draft model .*never used"):
        ServerProfile.from_dict({"model": "t", "draft_model": "d", "spec_type": kind})


def test_a_list_renders_as_one_spec_type_argument_with_each_members_settings():
    argv = render(spec_type="draft-mtp, ngram-mod", draft_n_max=3, ngram_size_n=16)
    assert argv.count("--spec-type") == 1 and opt(argv, "--spec-type") == "draft-mtp,ngram-mod"
    assert opt(argv, "--spec-draft-n-max") == "3" and opt(argv, "--spec-ngram-mod-n-max") == "3"
    assert opt(argv, "--spec-ngram-mod-n-match") == "16" and "--spec-draft-model" not in argv
    p = ServerProfile.from_dict({"model": "t", "spec_type": "draft-mtp, ngram-mod"})
    assert p.effective_spec_type == "draft-mtp,ngram-mod" and p.spec_types == ("draft-mtp", "ngram-mod")


def test_a_list_with_a_draft_model_type_gets_the_draft_and_a_shared_flag_once():
    argv = render(spec_type="draft-simple,ngram-cache", draft_model="/m/d.gguf", draft_n_max=4)
    assert opt(argv, "--spec-draft-model") == "/m/d.gguf" and opt(argv, "--spec-type") == "draft-simple,ngram-cache"
    assert argv.count("--spec-draft-n-max") == 1  # ngram-cache spells its length the same way


@pytest.mark.parametrize("spec_type,fragment", [
    ("draft-mtp,ngram-magic", "ngram-magic is not one of auto, none, default, draft-simple"),
    ("none,ngram-mod", "none stands alone, not in a list"),
    ("auto,draft-mtp", "auto stands alone"),
    ("ngram-mod,ngram-mod", "ngram-mod listed twice"),
    (",", "not one of"),
])
def test_a_bad_list_is_refused_naming_the_member(spec_type, fragment):
    with pytest.raises(ProfileError, match=fragment):
        ServerProfile.from_dict({"model": "t", "spec_type": spec_type})
    assert fragment in (spec_type_problem(spec_type) or "")


def test_every_known_type_and_list_of_them_is_accepted():
    for kind in (*DRAFT_TYPES, *NGRAM_TYPES, "auto", "none", "default", "draft-mtp,ngram-mod,ngram-simple"):
        assert spec_type_problem(kind) is None, kind
    assert spec_type_members(" draft-mtp ,ngram-mod,") == ("draft-mtp", "ngram-mod")


def test_each_member_is_checked_against_the_types_the_build_lists():
    old = Capabilities.from_dict({**CURRENT.to_dict(),
                                  "spec_types": [t for t in CURRENT.spec_types if t != "draft-mtp"]})
    with pytest.raises(FlagError, match=r"spec_type draft-mtp is not offered by this build \(its --spec-type lists "
                                        r"none, draft-simple, .*\); pick from those \(llama_server_spec_type"):
        build_argv(ServerProfile.from_dict({"model": "t", "spec_type": "ngram-mod,draft-mtp"}), old)
    assert opt(build_argv(ServerProfile.from_dict({"model": "t", "spec_type": "ngram-mod"}), old),
               "--spec-type") == "ngram-mod"


@pytest.mark.parametrize("kind", ["draft-mtp", "draft-mtp,ngram-mod"])
def test_a_build_without_spec_type_offers_neither_mtp_nor_lists(kind):
    with pytest.raises(FlagError, match="not offered by this build: it has no --spec-type"):
        build_argv(ServerProfile.from_dict({"model": "t", "spec_type": kind}), LEGACY)


# ---- the first play's refusals (specops.deploycheck) -------------------------------------------------------------
def test_spec_type_lists_pass_the_input_checks_and_bad_members_are_one_line():
    assert "choices" not in SPECS["llama_server_spec_type"]  # Ansible would refuse a list: the check is ours
    assert check_inputs({"llama_server_spec_type": "draft-mtp,ngram-mod", "llama_server_draft_model": ""}, SPECS) == []
    [line] = check_inputs({"llama_server_spec_type": "draft-mtp,ngram-fast"}, SPECS)
    assert line.startswith("llama_server_spec_type='draft-mtp,ngram-fast': ngram-fast is not one of auto, none")
    assert "e.g. llama_server_spec_type: draft-mtp,ngram-mod" in line and "\n" not in line


@pytest.mark.parametrize("spec_type,why", [
    ("ngram-mod", "n-gram types draft from the text itself"),
    ("ngram-simple,ngram-map-k", "n-gram types draft from the text itself"),
    ("draft-mtp", "draft-mtp drafts with the target's own MTP head"),
    ("draft-mtp,ngram-mod", "draft-mtp drafts with the target's own MTP head; n-gram types draft from the text itself"),
    ("default", "llama.cpp's --spec-default is an n-gram config"),
])
def test_a_draft_named_for_a_type_that_loads_none_is_refused_naming_the_variable(spec_type, why):
    values = {"llama_server_spec_type": spec_type, "llama_server_draft_model": "/srv/specops/models/d.gguf",
              "specops_models_draft": "qwen2.5-coder-0.5b"}
    [line] = check_inputs(values, SPECS)
    assert line == (f"specops_models_draft='qwen2.5-coder-0.5b': a draft model, but llama_server_spec_type="
                    f"{spec_type!r} loads none ({why}), so llama-server would load it and never use it; set "
                    'specops_models_draft: "" and drop its entry from specops_models, or a llama_server_spec_type '
                    "that drafts with a model (draft-simple, draft-eagle3)")
    # a path given to the service role directly: that variable is named
    [line] = check_inputs({"llama_server_spec_type": spec_type, "llama_server_draft_model": "/m/d.gguf"}, SPECS)
    assert line.startswith("llama_server_draft_model='/m/d.gguf': a draft model, but")
    assert 'set llama_server_draft_model: ""' in line and "drop its entry" not in line


def test_no_draft_for_these_types_passes_and_a_draft_model_type_without_one_is_refused():
    for spec_type in ("ngram-mod", "draft-mtp", "draft-mtp,ngram-mod", "none", "default"):
        assert check_inputs({"llama_server_spec_type": spec_type, "llama_server_draft_model": "",
                             "specops_models_draft": ""}, SPECS) == [], spec_type
    [line] = check_inputs({"llama_server_spec_type": "draft-eagle3", "llama_server_draft_model": ""}, SPECS)
    assert line.startswith("llama_server_spec_type='draft-eagle3': draft-eagle3 drafts with a separate draft model "
                           "and none is set; set specops_models_draft to the draft's entry in specops_models")
    assert check_inputs({"llama_server_spec_type": "draft-simple", "llama_server_draft_model": "/m/d.gguf"},
                        SPECS) == []


# ---- draft-mtp against the target's GGUF header (specops.room) ----------------------------------------------------
def test_draft_mtp_on_a_target_without_mtp_layers_names_the_key_and_the_architecture(tmp_path):
    plain = write_gguf(tmp_path / "plain.gguf", arch="qwen2")
    zero = write_gguf(tmp_path / "zero.gguf", arch="qwen35", extra={"qwen35.nextn_predict_layers": 0})
    mtp = write_gguf(tmp_path / "mtp.gguf", arch="qwen35", extra={"qwen35.nextn_predict_layers": 1})
    [line] = room.mtp_problems("draft-mtp", plain)
    assert line.startswith("llama_server_spec_type='draft-mtp': draft-mtp drafts with the target's own "
                           "multi-token-prediction layers, but the target plain.gguf (qwen2) has no "
                           "qwen2.nextn_predict_layers in its GGUF header; ")
    assert "or set llama_server_spec_type to a type without draft-mtp" in line and "\n" not in line
    [line] = room.mtp_problems("draft-mtp,ngram-mod", zero)
    assert "the target zero.gguf (qwen35) has qwen35.nextn_predict_layers = 0 in its GGUF header" in line
    assert room.mtp_problems("draft-mtp,ngram-mod", mtp) == []
    assert room.mtp_problems("ngram-mod", plain) == [] and room.mtp_problems("auto", plain) == []


def test_the_room_filter_reads_nothing_for_a_target_it_did_not_install(tmp_path):
    plugin = _plugin("room")
    mtp_problems = plugin.FilterModule().filters()["specops_mtp_problems"]
    assert mtp_problems("", "draft-mtp") == []
    assert len(mtp_problems(str(write_gguf(tmp_path / "t.gguf")), "draft-mtp")) == 1


# ---- the roles follow the rule -------------------------------------------------------------------------------------
def _playbook(tmp_path: Path, play: list[dict], *extra: str) -> subprocess.CompletedProcess[str]:
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(book),
                           "-e", f"ansible_python_interpreter={sys.executable}", *extra], capture_output=True,
                          text=True, cwd=REPO, check=False, env=env, timeout=300)


def test_the_role_defaults_name_no_draft_for_a_type_that_loads_none(tmp_path):
    """The models role's default list and draft, and the service's draft path, by spec type: the Qwen pair for auto
    (as before), the target alone and no draft for n-gram types and draft-mtp."""
    kinds = ("auto", "ngram-mod", "draft-mtp", "draft-mtp,ngram-mod", "draft-eagle3")
    tasks = [{"name": kind, "vars": {"llama_server_spec_type": kind}, "ansible.builtin.copy": {
        "dest": str(tmp_path / f"{i}.json"), "mode": "0644",
        "content": "{{ {'models': specops_models | map(attribute='catalog') | list, 'draft': specops_models_draft, "
                   "'path': llama_server_draft_model} | to_json }}"}} for i, kind in enumerate(kinds)]
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars_files": [str(REPO / "roles/models/defaults/main.yml"),
                            str(REPO / "roles/llama_server/defaults/main.yml")], "tasks": tasks}]
    proc = _playbook(tmp_path, play)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    got = {kind: json.loads((tmp_path / f"{i}.json").read_text()) for i, kind in enumerate(kinds)}
    pair = {"models": ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"], "draft": "qwen2.5-coder-0.5b",
            "path": "/srv/specops/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}
    alone = {"models": ["qwen2.5-coder-1.5b"], "draft": "", "path": ""}
    assert got == {"auto": pair, "ngram-mod": alone, "draft-mtp": alone, "draft-mtp,ngram-mod": alone,
                   "draft-eagle3": pair}


def test_the_models_role_fetches_checks_and_fits_no_draft_for_a_type_that_loads_none(tmp_path):
    """roles/models with a draft named in the list and a spec type that loads none (the deploy refuses that in its
    first play; the role on its own leaves the draft out): only the target is fetched, check-pair does not run, and
    the fit counts no draft."""
    record = tmp_path / "calls.jsonl"
    cli = tmp_path / "fake-specops"
    cli.write_text(f"#!{sys.executable}\nimport json,sys\n"
                   f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                   "a = sys.argv[1:]\n"
                   "if a[0] == 'fetch-model':\n"
                   "    spec = json.loads(a[a.index('--spec-json') + 1])\n"
                   "    name = spec.get('name') or spec['catalog']\n"
                   f"    print(json.dumps({{'name': name, 'path': {str(tmp_path)!r} + '/' + name + '.gguf', "
                   "'fetched': False, 'size': 1, 'sha256': ''}))\n"
                   "else:\n"
                   "    print(json.dumps({'fits': True, 'ok': True}))\n")
    cli.chmod(0o755)
    common = {"specops_models_cli": str(cli), "specops_fit_memory_mib": 9999,
              "specops_models": [{"catalog": "t"}, {"catalog": "d"}],
              "specops_models_target": "t", "specops_models_draft": "d"}
    plays = []
    for spec_type in ("ngram-mod", "draft-simple"):
        plays.append({"hosts": "localhost", "gather_facts": False, "connection": "local",
                      "vars": {**common, "llama_server_spec_type": spec_type},
                      "tasks": [{"ansible.builtin.include_role": {"name": "models", "tasks_from": "fetch"}},
                                {"ansible.builtin.include_role": {"name": "models", "tasks_from": "preflight"}},
                                {"ansible.builtin.include_role": {"name": "models", "tasks_from": "fit"}},
                                {"name": "mark", "ansible.builtin.shell": f"echo '[\"--\"]' >> {record}",
                                 "changed_when": False}]})
    proc = _playbook(tmp_path, plays)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    split = calls.index(["--"])
    ngram, simple = calls[:split], calls[split + 1:-1]
    assert [c[0] for c in ngram] == ["fetch-model", "fit"], ngram  # no draft fetched, no check-pair
    assert json.loads(ngram[0][ngram[0].index("--spec-json") + 1]) == {"catalog": "t"}
    fit = ngram[1]
    assert fit[:3] == ["fit", "--json", f"{tmp_path}/t.gguf"] and f"{tmp_path}/d.gguf" not in fit
    assert [c[0] for c in simple] == ["fetch-model", "fetch-model", "check-pair", "fit"], simple
    assert f"{tmp_path}/d.gguf" in simple[3]
