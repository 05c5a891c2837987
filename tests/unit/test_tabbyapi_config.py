"""config.yml from a service profile, validated against a schema derived from TabbyAPI's own config model
(tests/fixtures/tabbyapi/, origin and commit in its README)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from specops.cli import main
from specops.tabbyapi import TABBYAPI_COMMIT
from specops.tabbyapi.config import TabbyProfile, TabbyProfileError, render_config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tabbyapi"
MODELS = FIX / "models"
TARGET = MODELS / "Midnight-Miqu-70B-v1.5-exl2-2.5bpw"
DRAFT = MODELS / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw"


def schema(commit: str = TABBYAPI_COMMIT) -> dict:
    return json.loads((FIX / f"tabbyapi-config-{commit[:9]}.schema.json").read_text())


def validate(config: dict, commit: str = TABBYAPI_COMMIT) -> None:
    jsonschema.validate(config, schema(commit))


def problems(config: dict, commit: str = TABBYAPI_COMMIT) -> list[str]:
    """Every leaf error's message (an anyOf error keeps the real reasons in its context)."""
    out: list[str] = []
    stack = list(jsonschema.Draft202012Validator(schema(commit)).iter_errors(config))
    while stack:
        err = stack.pop()
        out.append(err.message)
        stack.extend(err.context or [])
    return out


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    """The seed's two models as directories with config.json and a (shared, Llama-style) tokenizer.json."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"tok{i}": i for i in range(3, 12)}}
    tok = {"model": {"type": "BPE", "byte_fallback": True, "vocab": vocab}, "added_tokens": []}
    out = []
    for src in (TARGET, DRAFT):
        d = tmp_path / src.name
        shutil.copytree(src, d)
        (d / "tokenizer.json").write_text(json.dumps(tok))
        out.append(d)
    return out[0], out[1]


def seed_profile(target: Path, draft: Path) -> dict:
    return {"model": str(target), "draft_model": str(draft), "ctx_size": 16384, "cache_mode": "Q4",
            "draft_n_max": 4, "port": 5000}


def test_seed_profile_renders_the_model_and_draft_model_sections(dirs):
    config = render_config(TabbyProfile.from_dict(seed_profile(*dirs)))
    validate(config)
    assert config["model"]["model_dir"] == str(dirs[0].parent)
    assert config["model"]["model_name"] == TARGET.name and config["model"]["cache_mode"] == "Q4"
    assert config["model"]["max_seq_len"] == 16384 and config["model"]["gpu_split_auto"] is True
    draft = config["draft_model"]
    assert draft["draft_mode"] == "model" and draft["draft_model_name"] == DRAFT.name
    assert draft["draft_num_tokens"] == 4
    assert config["network"] == {"host": "127.0.0.1", "port": 5000, "disable_auth": False, "api_servers": ["oai"]}


def test_ngram_on_exllamav3_validates_against_the_newest_model_too(dirs):
    config = render_config(TabbyProfile.from_dict(
        {"model": str(dirs[0]), "spec_type": "ngram-simple", "backend": "exllamav3", "cache_mode": "4,6",
         "ngram_match_min": 3}))
    validate(config)
    validate(config, "e632af41eba68abeadc3437c62674360f2f8cbf1")
    assert config["draft_model"] == {"draft_mode": "ngram", "ngram_match_min": 3}


def test_mtp_on_exllamav3_renders_draft_mode_mtp_and_validates(dirs):
    """ExLlamaV3's MTP drafting (TabbyAPI draft_mode: mtp): the target's own MTP layers, no draft model, the draft
    length as draft_num_tokens; valid for both pinned config models. A target without MTP layers is refused."""
    cfg = json.loads((dirs[0] / "config.json").read_text())
    (dirs[0] / "config.json").write_text(json.dumps({**cfg, "mtp_num_hidden_layers": 1}))
    config = render_config(TabbyProfile.from_dict(
        {"model": str(dirs[0]), "spec_type": "draft-mtp", "backend": "exllamav3", "cache_mode": "4,6",
         "draft_n_max": 3}))
    validate(config)
    validate(config, "e632af41eba68abeadc3437c62674360f2f8cbf1")
    assert config["draft_model"] == {"draft_mode": "mtp", "draft_num_tokens": 3}
    (dirs[0] / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TabbyProfileError, match="has no MTP layers"):
        TabbyProfile.from_dict({"model": str(dirs[0]), "spec_type": "draft-mtp", "backend": "exllamav3",
                                "cache_mode": "4,6"})


@pytest.mark.parametrize("mutate,where", [
    (lambda c: c.update(draft={"draft_model_name": "x"}), "draft"),             # the seed's `draft:` block
    (lambda c: c["model"].update(ngram_decoding=True), "ngram_decoding"),       # the seed's n-gram switch
    (lambda c: c["draft_model"].update(draft_max=8), "draft_max"),              # a llama.cpp spelling
])
def test_schema_rejects_unknown_keys(dirs, mutate, where):
    config = render_config(TabbyProfile.from_dict(seed_profile(*dirs)))
    assert problems(config) == []
    bad = copy.deepcopy(config)
    mutate(bad)
    assert f"Additional properties are not allowed ('{where}' was unexpected)" in problems(bad)


@pytest.mark.parametrize("section,key,value", [
    ("model", "max_seq_len", "16k"), ("model", "cache_mode", "Q5"), ("model", "gpu_split", "20,24"),
    ("draft_model", "draft_cache_mode", "4,4"), ("draft_model", "draft_mode", "eagle"),
    ("network", "port", "five thousand"), ("model", "cache_size", 1000),
])
def test_schema_rejects_wrong_types_and_values(dirs, section, key, value):
    bad = render_config(TabbyProfile.from_dict(seed_profile(*dirs)))
    bad[section][key] = value
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


@pytest.mark.parametrize("change,message", [
    ({"cache_mode": "Q5"}, "unknown cache mode 'Q5'"),
    ({"cache_mode": "4,4"}, "silently fall back to FP16"),
    ({"draft_cache_mode": "Q3"}, "draft_cache_mode 'Q3'"),
    ({"spec_type": "none"}, "never use it"),
    ({"spec_type": "ngram-simple", "draft_model": None}, "needs backend exllamav3"),
    ({"spec_type": "draft-mtp", "draft_model": None}, "draft-mtp needs backend exllamav3"),
    ({"spec_type": "draft-mtp"}, "never use it"),
    ({"ngram_decoding": True}, "unknown profile key"),
    ({"ctx_size": "16k"}, "ctx_size must be a positive integer"),
    ({"gpu_split": "20,24"}, "gpu_split must be a list"),
])
def test_profile_refuses_what_tabbyapi_would_warn_about_and_ignore(dirs, change, message):
    with pytest.raises(TabbyProfileError, match=message):
        TabbyProfile.from_dict({**seed_profile(*dirs), **change})


def test_missing_draft_directory_is_refused(dirs, tmp_path):
    with pytest.raises(TabbyProfileError, match="no such model directory"):
        TabbyProfile.from_dict({**seed_profile(*dirs), "draft_model": str(tmp_path / "absent")})


def test_cli_writes_a_valid_config(dirs, tmp_path):
    prof, out = tmp_path / "profile.yml", tmp_path / "config.yml"
    prof.write_text(yaml.safe_dump(seed_profile(*dirs)))
    assert main(["tabbyapi-config", "--profile", str(prof), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# TabbyAPI config.yml rendered by specops")
    validate(yaml.safe_load(text))


@pytest.mark.parametrize("breakage,message", [
    ("no-tokenizer", "has no tokenizer.json"),
    ("mismatch", "does not match target"),
    ("cache", "unknown cache mode"),
])
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(dirs, tmp_path, capsys, breakage, message):
    target, draft = dirs
    profile = seed_profile(target, draft)
    if breakage == "no-tokenizer":
        (draft / "tokenizer.json").unlink()
    elif breakage == "mismatch":
        tok = json.loads((draft / "tokenizer.json").read_text())
        tok["model"]["vocab"] = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"{'x' if i == 7 else 'tok'}{i}": i
                                                                    for i in range(3, 12)}}
        (draft / "tokenizer.json").write_text(json.dumps(tok))
    else:
        profile["cache_mode"] = "Q5"
    prof, out = tmp_path / "profile.yml", tmp_path / "config.yml"
    prof.write_text(yaml.safe_dump(profile))
    assert main(["tabbyapi-config", "--profile", str(prof), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()
