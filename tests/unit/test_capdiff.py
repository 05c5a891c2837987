"""`specops capabilities diff OLD NEW` (issue 15's upgrade guard) on the two real --help captures: the legacy
dialect (before the April 2026 rename) and the pinned 0c1e57098."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specops.capdiff import diff_help, same_default
from specops.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures"
LEGACY = FIX / "llama-server-legacy" / "help.txt"
PINNED = FIX / "llama-server-0c1e57098" / "llama-server_help.txt"


def test_the_rename_of_the_draft_length_is_a_rename_with_its_default_change() -> None:
    d = diff_help(LEGACY.read_text(), PINNED.read_text())
    assert (d.old_era, d.new_era) == ("legacy", "spec")
    renamed = {r.old: r for r in d.renamed}
    assert renamed[("--draft", "--draft-n", "--draft-max")].new == ("--spec-draft-n-max",)
    assert "use --spec-draft-n-max" in renamed[("--draft", "--draft-n", "--draft-max")].how
    assert ("--draft", "--draft-n", "--draft-max") not in d.removed
    defaults = {c.names[0]: (c.old, c.new) for c in d.defaults}
    assert defaults["--spec-draft-n-max"] == ("16", "3")
    assert defaults["--spec-draft-p-min"] == ("0.8", "0.00")  # the silent p_min change upstream
    assert ("--spec-type",) in d.added
    assert "draft-simple" in d.spec_types_added and not d.spec_types_removed


def test_a_build_against_itself_has_no_difference() -> None:
    assert diff_help(PINNED.read_text(), PINNED.read_text()).empty


def test_a_downgrade_lists_the_new_flags_as_removed_and_the_rename_backwards() -> None:
    d = diff_help(PINNED.read_text(), LEGACY.read_text())
    assert ("--spec-type",) in d.removed
    renamed = {r.old[0]: r.new for r in d.renamed}
    assert "--draft-max" in renamed["--spec-draft-n-max"]  # known from the knob table's eras
    assert "draft-simple" in d.spec_types_removed


def _profile(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "profile.yml"
    body = {"model": "/srv/t.gguf", "draft_model": "/srv/d.gguf", "draft_n_max": 4, **extra}
    path.write_text(json.dumps(body))
    return path


def test_the_cli_says_whether_the_profile_renders_for_the_new_build(tmp_path: Path, capsys) -> None:
    rc = main(["capabilities", "diff", str(LEGACY), str(PINNED), "--profile", str(_profile(tmp_path))])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "renamed:  --draft, --draft-n, --draft-max -> --spec-draft-n-max" in out
    assert "renders for NEW:" in out and "--spec-draft-n-max 4" in out and "--spec-type draft-simple" in out
    # the other way: an n-gram type has no spelling on the legacy build
    rc = main(["capabilities", "diff", str(PINNED), str(LEGACY), "--json", "--profile",
               str(_profile(tmp_path, draft_model=None, spec_type="ngram-mod"))])
    data = json.loads(capsys.readouterr().out)
    assert rc == 3 and data["profile"]["renders"] is False and data["profile"]["reason"]
    assert ["--spec-type"] in data["removed"]


def test_bad_inputs_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such file"):
        main(["capabilities", "diff", str(tmp_path / "nope"), str(PINNED)])
    empty = tmp_path / "empty.txt"
    empty.write_text("not a help text\n")
    with pytest.raises(SystemExit, match="no llama-server options"):
        main(["capabilities", "diff", str(PINNED), str(empty)])
    with pytest.raises(SystemExit, match="--binary or --help-file"):
        main(["capabilities"])


def _filters():
    from tests.unit.by_path import plugin_filters

    return plugin_filters("specops")


PROFILE = {"model": "/srv/specops/models/t.gguf", "draft_model": "/srv/specops/models/d.gguf",
           "spec_type": "draft-simple", "draft_n_max": 2, "ctx_size": 4096, "port": 8080}


def test_the_deploys_upgrade_guard_prints_the_rename_and_the_silent_default_and_lets_a_renderable_profile_pass():
    out = _filters().specops_upgrade_diff(LEGACY.read_text(), PINNED.read_text(), PROFILE, "4227c9be4-cpu",
                                          "0c1e57098-cpu")
    assert out["changes"] and out["renders"] and out["reason"] == ""
    lines = out["text"].splitlines()
    assert lines[0] == "llama-server 4227c9be4-cpu -> 0c1e57098-cpu: flag dialect legacy -> spec"
    assert any(ln.startswith("renamed:") and "--draft-max" in ln and "--spec-draft-n-max" in ln for ln in lines)
    assert any(ln.startswith("default:") and "--spec-draft-p-min" in ln and "0.8 -> 0.00" in ln for ln in lines)
    # the flags an upgrade adds are counted, not listed one per line in the deploy's output
    (added,) = [ln for ln in lines if ln.startswith("added:")]
    assert re.fullmatch(r"added: +\d+ flags \(`specops capabilities diff OLD NEW` lists them\)", added), added


def test_the_deploys_upgrade_guard_refuses_a_profile_the_new_build_cannot_render():
    # a downgrade to the legacy dialect: no n-gram speculative type there
    out = _filters().specops_upgrade_diff(PINNED.read_text(), LEGACY.read_text(),
                                          {**PROFILE, "draft_model": None, "spec_type": "ngram-mod"})
    assert out["changes"] and not out["renders"]
    assert "ngram-mod" in out["reason"], out["reason"]


def test_the_same_build_is_no_change_for_the_guard():
    out = _filters().specops_upgrade_diff(PINNED.read_text(), PINNED.read_text(), PROFILE)
    assert not out["changes"] and out["renders"]


def test_the_two_real_builds_differ_in_defaults_not_in_decimals():
    """4227c9be4 prints --temp's default as 0.8, 0c1e57098 as 0.80: the same default, not a change; a default
    that really moved (--top-p 0.9 -> 0.95, the draft p_min 0.8 -> 0.00) is listed."""
    fix = Path(__file__).resolve().parents[1] / "fixtures"
    d = diff_help((fix / "llama-server-4227c9be4" / "help.txt").read_text(),
                  (fix / "llama-server-0c1e57098" / "llama-server_help.txt").read_text())
    changed = {n for c in d.defaults for n in c.names}
    assert {"--top-p", "--spec-draft-p-min", "--spec-draft-n-max"} <= changed
    assert not {"--temp", "--repeat-penalty", "--typical", "--mirostat-lr", "--xtc-threshold"} & changed
    assert same_default("1.0, 1.0 = disabled", "1.00, 1.0 = disabled") and not same_default("0.9", "0.95")
    assert not same_default("-1, 0 = disable, -1 = context size", "64, 0 = disable")
