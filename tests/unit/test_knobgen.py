"""The role's copies of the knob table are written from it (specops.knobgen, `specops knobs --update`): the tree
is current, and a new llama-server setting is one edit of the table plus a rerun (issue 41)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops import knobgen, knobs
from specops.knobs import KNOBS, Knob

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llama_server"


def test_the_role_copies_are_current():
    stale = knobgen.update(ROLE, write=False)
    assert stale == [], f"stale: {[str(p.relative_to(REPO)) for p in stale]}: run `specops knobs --update`"
    out = subprocess.run([sys.executable, "-m", "specops.cli", "knobs", "--update", "--check"], cwd=REPO,
                         capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, ""), out


def test_each_copy_says_what_the_table_says():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for k in (k for k in KNOBS if k.role):
        spec = specs[k.role_var]
        assert spec["type"] == k.type and k.doc in " ".join(spec["description"].split()), k.name
        if k.name in knobgen.COMPUTED:
            assert "{{" in defaults[k.role_var] and "default" not in spec
            continue
        assert defaults[k.role_var] == (list(k.default) if isinstance(k.default, tuple) else knobgen.role_default(k))
        if k.low is not None or k.high is not None:
            assert knobgen.range_text(k) in " ".join(spec["description"].split()), k.name


def test_a_new_setting_is_one_edit_of_the_table(tmp_path, monkeypatch):
    role = tmp_path / "llama_server"
    shutil.copytree(ROLE, role)
    shutil.copytree(ROLE.parent / "llama_server_tune", tmp_path / "llama_server_tune")
    new = Knob("draft_demo", "int", "a demo setting", ("--spec-draft-demo",), default=7, llama_default=3, low=1)
    monkeypatch.setattr(knobs, "KNOBS", (*KNOBS, new))
    monkeypatch.setattr(knobgen, "KNOBS", (*KNOBS, new))
    changed = knobgen.update(role)
    assert sorted(p.name for p in changed) == ["README.md", "argument_specs.yml", "main.yml"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert defaults["llama_server_draft_demo"] == 7
    assert specs["llama_server_draft_demo"] == {"type": "int", "default": 7,
                                                "description": "a demo setting (llama.cpp: 3; >= 1)"}
    assert "`llama_server_draft_demo` | `7` | `3` | `--spec-draft-demo`" in (role / "README.md").read_text()
    assert knobgen.update(role) == []   # a rerun changes nothing
    # and everything outside the markers is kept as written
    outside = (ROLE / "defaults" / "main.yml").read_text().split(knobgen.YAML_END)[1]
    assert (role / "defaults" / "main.yml").read_text().endswith(outside)


def test_a_file_without_markers_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="markers missing: add a line # BEGIN knobs"):
        knobgen.replace_section("a: 1\n", "b: 2\n", knobgen.YAML_BEGIN, knobgen.YAML_END)


def _filters():
    from tests.unit.by_path import plugin_filters

    return plugin_filters("specops")


def test_a_per_backend_default_lives_in_the_table_and_the_role_reads_it_from_there():
    """draft_n_max: the table says 2, cuda 16; the role writes null and its profile filter takes the build's
    backend's value; a value the inventory sets wins on every backend."""
    k = knobs.knob("draft_n_max")
    assert (k.default_for("cpu"), k.default_for("cuda"), k.default_for("vulkan"), k.default_for(None)) == (2, 16, 2, 2)
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["llama_server_draft_n_max"] is None
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    opt = specs["argument_specs"]["main"]["options"]["llama_server_draft_n_max"]
    assert "default" not in opt and "cuda 16, others 2" in opt["description"]
    f = _filters()
    names = f.specops_knob_vars()
    unset = [None] * len(names)
    assert f.specops_knob_profile(unset, "cuda")["draft_n_max"] == 16
    assert f.specops_knob_profile(unset, "cpu")["draft_n_max"] == 2
    assert f.specops_knob_profile(unset)["draft_n_max"] == 2
    assert f.specops_knob_profile(unset, "cuda")["draft_n_min"] is None  # no per-backend default: stays unset
    given = list(unset)
    given[names.index("llama_server_draft_n_max")] = 4
    assert f.specops_knob_profile(given, "cuda")["draft_n_max"] == 4


@pytest.mark.parametrize(("spec_type", "cpu", "cuda"), [
    ("ngram-mod", None, None),  # --spec-ngram-mod-n-max: llama.cpp's 64, not a draft model's 2 (or 16)
    ("ngram-cache", None, None),
    ("ngram-mod,ngram-simple", None, None),
    ("draft-simple", 2, 16),
    ("draft-simple,ngram-mod", 2, 16),  # a draft model in the list: the draft model's length
    ("draft-mtp", 2, 16),
])
def test_an_ngram_type_keeps_llama_cpps_draft_length_when_none_is_set(spec_type, cpu, cuda):
    f = _filters()
    names = f.specops_knob_vars()
    values = [None] * len(names)
    values[names.index("llama_server_spec_type")] = spec_type
    assert f.specops_knob_profile(values, "cpu")["draft_n_max"] == cpu
    assert f.specops_knob_profile(values, "cuda")["draft_n_max"] == cuda
    values[names.index("llama_server_draft_n_max")] = 8
    assert f.specops_knob_profile(values, "cpu")["draft_n_max"] == 8  # a value the inventory sets wins
