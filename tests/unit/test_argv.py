from pathlib import Path

import pytest

from specops.argv import FlagError, build_argv, check_extra_args, systemd_line
from specops.capabilities import parse_help
from specops.profile import ProfileError, ServerProfile

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CURRENT = parse_help((FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text())
LEGACY = parse_help((FIX / "llama-server-legacy" / "help.txt").read_text())


def opt(argv, flag):
    return argv[argv.index(flag) + 1]


def test_draft_model_always_comes_with_spec_type():
    p = ServerProfile.from_dict({"model": "/m/t.gguf", "draft_model": "/m/d.gguf", "draft_n_max": 8})
    argv = build_argv(p, CURRENT)
    assert opt(argv, "--spec-type") == "draft-simple"
    assert opt(argv, "--spec-draft-model") == "/m/d.gguf"
    assert opt(argv, "--spec-draft-n-max") == "8"
    assert "--draft-max" not in argv and "--metrics" in argv
    assert opt(argv, "--host") == "127.0.0.1" and opt(argv, "--port") == "8080"


def test_legacy_build_gets_legacy_flags():
    p = ServerProfile.from_dict({"model": "t", "draft_model": "d", "draft_n_max": 8, "draft_n_min": 1})
    argv = build_argv(p, LEGACY)
    assert opt(argv, "--draft-max") == "8" and opt(argv, "--draft-min") == "1"
    assert "--spec-type" not in argv and "--spec-draft-n-max" not in argv


def test_baseline_is_explicit():
    argv = build_argv(ServerProfile.from_dict({"model": "t", "spec_type": "none"}), CURRENT)
    assert opt(argv, "--spec-type") == "none"
    assert "-md" not in argv and "--spec-draft-model" not in argv


@pytest.mark.parametrize("kind,flag", [("ngram-simple", "--spec-ngram-simple-size-n"),
                                       ("ngram-map-k", "--spec-ngram-map-k-size-n"),
                                       ("ngram-mod", "--spec-ngram-mod-n-match")])
def test_ngram_types_need_no_draft(kind, flag):
    argv = build_argv(ServerProfile.from_dict({"model": "t", "spec_type": kind, "ngram_size_n": 6}), CURRENT)
    assert opt(argv, "--spec-type") == kind and opt(argv, flag) == "6"


def test_ngram_type_on_legacy_build_is_an_error():
    with pytest.raises(FlagError, match="not offered"):
        build_argv(ServerProfile.from_dict({"model": "t", "spec_type": "ngram-mod"}), LEGACY)


def test_removed_extra_flag_is_rejected_with_hint():
    p = ServerProfile.from_dict({"model": "t", "extra_args": ["--draft-max", "8"]})
    with pytest.raises(FlagError, match="removed"):
        build_argv(p, CURRENT)


def test_unknown_extra_flag_is_rejected():
    with pytest.raises(FlagError, match="not a llama-server flag"):
        check_extra_args(["--turbo-mode"], CURRENT)
    assert check_extra_args(["--batch-size", "512", "-b", "512", "--override-kv", "x=int:-1"], CURRENT)
    with pytest.raises(FlagError, match="--mlock"):  # gone at this commit (see --load-mode)
        check_extra_args(["--mlock"], CURRENT)


def test_draft_without_draft_type_is_refused():
    with pytest.raises(ProfileError, match="never used"):
        ServerProfile.from_dict({"model": "t", "draft_model": "d", "spec_type": "none"})


def test_profile_errors_are_actionable():
    with pytest.raises(ProfileError, match="unknown profile key"):
        ServerProfile.from_dict({"model": "t", "draft_max": 8})
    with pytest.raises(ProfileError, match="needs draft_model"):
        ServerProfile.from_dict({"model": "t", "spec_type": "draft-simple"})
    with pytest.raises(ProfileError, match="draft_n_min"):
        ServerProfile.from_dict({"model": "t", "draft_model": "d", "draft_n_max": 2, "draft_n_min": 4})


def test_exact_profile_settings_render():
    p = ServerProfile.from_dict({"model": "t", "draft_model": "d", "draft_n_max": 2, "flash_attn": "on",
                                 "cache_type_v": "q8_0", "repack": False, "draft_threads": 2})
    argv = build_argv(p, CURRENT)
    assert opt(argv, "--flash-attn") == "on" and opt(argv, "--cache-type-v") == "q8_0"
    assert "--no-repack" in argv and opt(argv, "--spec-draft-threads") == "2"


def test_systemd_quoting():
    line = systemd_line(["/opt/x/llama-server", "-m", "/srv/my models/a.gguf", "--alias", "50%$"])
    assert '"/srv/my models/a.gguf"' in line
    assert "50%%$$" in line


def test_prompt_cache_bound_is_passed_only_when_set():
    argv = build_argv(ServerProfile.from_dict({"model": "t", "cache_ram_mib": 1024}), CURRENT)
    assert opt(argv, "--cache-ram") == "1024"
    assert "--cache-ram" not in build_argv(ServerProfile.from_dict({"model": "t"}), CURRENT)
    assert opt(build_argv(ServerProfile.from_dict({"model": "t", "cache_ram_mib": 0}), CURRENT), "--cache-ram") == "0"


def test_prompt_cache_bound_is_skipped_on_builds_without_a_prompt_cache():
    text = (FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text()
    old = parse_help("\n".join(line for line in text.splitlines() if "--cache-ram" not in line))
    assert "--cache-ram" not in build_argv(ServerProfile.from_dict({"model": "t", "cache_ram_mib": 1024}), old)


# the real --help of the older build scripts/test-upgrade deploys (llama-cpp-python 0.3.16's llama.cpp, 4227c9be4)
REAL_LEGACY = parse_help((FIX / "llama-server-4227c9be4" / "help.txt").read_text())
ROLE_LIKE = {"model": "/m/t.gguf", "draft_model": "/m/d.gguf", "draft_n_max": 4, "flash_attn": "on",
             "cache_type_v": "q8_0", "cache_ram_mib": 1024, "threads": 2, "api_key_file": "/etc/k", "jinja": True}


@pytest.mark.parametrize("caps", [CURRENT, REAL_LEGACY], ids=["0c1e57098", "4227c9be4"])
def test_every_flag_gets_the_arguments_its_build_expects(caps):
    """A switch is never followed by a value (4227c9be4's parser stops at `-fa on`: "invalid argument: on") and a
    valued flag always is."""
    argv = build_argv(ServerProfile.from_dict(ROLE_LIKE), caps)
    for i, token in enumerate(argv[1:], start=1):
        if not token.startswith("-"):
            continue
        following = argv[i + 1] if i + 1 < len(argv) else None
        if token in caps.switches:
            assert following is None or following.startswith("-"), (token, following)
        else:
            assert following is not None and not following.startswith("-"), (token, following)


def test_flash_attn_on_a_build_where_it_is_a_switch():
    on = build_argv(ServerProfile.from_dict(ROLE_LIKE), REAL_LEGACY)
    assert "--flash-attn" in on and "on" not in on
    assert opt(on, "--draft-max") == "4" and "--spec-type" not in on
    for left_out in ("off", "auto"):
        argv = build_argv(ServerProfile.from_dict({**ROLE_LIKE, "flash_attn": left_out}), REAL_LEGACY)
        assert "--flash-attn" not in argv and "-fa" not in argv
    assert opt(build_argv(ServerProfile.from_dict(ROLE_LIKE), CURRENT), "--flash-attn") == "on"


def test_every_draft_knob_of_the_table_reaches_the_command_line():
    """A draft_* setting added to the knob table is rendered with the draft model without another edit (draft_p_split
    once was silently dropped: argv kept its own list)."""
    from specops.capabilities import parse_help
    from specops.knobs import KNOBS

    caps = parse_help((Path(__file__).resolve().parents[1] / "fixtures/llama-server-0c1e57098/llama-server_help.txt")
                      .read_text())
    values = {"int": 2, "float": 0.25, "raw": 3, "str": "q8_0"}
    draft = [k for k in KNOBS if k.name.startswith("draft_") and k.name != "draft_model"]
    profile = ServerProfile.from_dict({"model": "/m.gguf", "draft_model": "/d.gguf",
                                       **{k.name: values[k.type] for k in draft}})
    argv = build_argv(profile, caps, binary="llama-server")
    for k in draft:
        assert any(f in argv for f in k.flags), (k.name, argv)
