from pathlib import Path

import pytest

from specops.capabilities import Capabilities, parse_help, parse_options, parse_version

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CURRENT = (FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text()
LEGACY = (FIX / "llama-server-legacy" / "help.txt").read_text()


def test_current_build_is_spec_era_with_all_types():
    caps = parse_help(CURRENT)
    assert caps.spec_era == "spec"
    assert caps.has_spec_type
    assert caps.spec_types[:2] == ["none", "draft-simple"]
    assert {"ngram-simple", "ngram-mod", "ngram-map-k", "ngram-cache"} <= set(caps.spec_types)
    assert caps.has_metrics
    assert caps.default_port == 8080


def test_removed_flags_are_known_and_not_usable():
    caps = parse_help(CURRENT)
    for flag in ("--draft-max", "--draft", "--draft-min", "--draft-n-min"):
        assert flag in caps.flags
        assert flag in caps.removed_flags
        assert not caps.has(flag)
    assert caps.has("--spec-draft-n-max")
    assert caps.has("--spec-draft-p-min") and caps.has("--draft-p-min")  # alias kept


def test_all_spellings_of_an_option_are_recorded():
    caps = parse_help(CURRENT)
    for flag in ("-md", "--model-draft", "--spec-draft-model", "-ngld", "--spec-draft-ngl", "-ctv",
                 "--cache-type-v", "-fa", "--flash-attn", "--no-repack", "-nr", "-np", "--parallel"):
        assert caps.has(flag), flag


def test_description_lines_do_not_leak_flags():
    # "--spec-ngram-mod-n-max" appears only inside the description of --draft-max's removal note
    # *and* as an option of its own; a word like "--threads" inside descriptions must not count
    options = parse_options(CURRENT)
    names = [n for o in options for n in o.names]
    assert names.count("--threads") == 1
    assert all(n.startswith("-") for n in names)


def test_legacy_build_uses_draft_max():
    caps = parse_help(LEGACY)
    assert caps.spec_era == "legacy"
    assert not caps.has_spec_type
    assert caps.has("--draft-max") and caps.has("-md")
    assert not caps.removed_flags


def test_version_2026_form():
    caps = parse_version("version: 0.5.0-dev (build 0, commit 0c1e57098)\nbuilt with GNU 12.2.0 for Linux x86_64",
                         parse_help(CURRENT))
    assert caps.version == "0.5.0-dev" and caps.commit == "0c1e57098"


def test_version_and_json_round_trip():
    caps = parse_version("version: 1 (0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n", parse_help(CURRENT))
    assert caps.commit == "0c1e570" and caps.version == "1"
    assert caps.compiler and "GNU 12.2.0" in caps.compiler
    again = Capabilities.from_dict(caps.to_dict())
    assert again.flags == caps.flags and again.removed_flags == caps.removed_flags
    assert again.spec_era == "spec"


@pytest.mark.parametrize("text", ["", "not a help text", "-----\n"])
def test_garbage_gives_empty_capabilities(text):
    caps = parse_help(text)
    assert caps.spec_era == "none" and not caps.has_metrics


def test_switches_are_the_flags_without_an_argument():
    fix = Path(__file__).resolve().parents[1] / "fixtures"
    legacy = parse_help((fix / "llama-server-4227c9be4" / "help.txt").read_text())
    current = parse_help((fix / "llama-server-0c1e57098" / "llama-server_help.txt").read_text())
    assert {"--flash-attn", "-fa", "--metrics", "--jinja"} <= legacy.switches
    assert "--flash-attn" not in current.switches and "--metrics" in current.switches
    assert "--draft-max" not in legacy.switches and "--ctx-size" not in current.switches
    assert Capabilities.from_dict(legacy.to_dict()).switches == legacy.switches
