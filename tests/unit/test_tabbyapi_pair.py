"""The Hugging Face model-directory pair check on real tokenizer files (see tabbyapi_tokenizers.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specops.cli import main
from specops.ggufmeta import read
from specops.pair import vocab_of
from specops.tabbyapi.gguf_vocab import export
from specops.tabbyapi.hfvocab import check_hf_pair, vocab_of_dir
from tests.unit import tabbyapi_tokenizers as tk


@pytest.fixture(scope="module")
def mistral() -> Path:
    return tk.mistral_dir()


@pytest.fixture(scope="module")
def llama2() -> Path:
    return tk.exported_dir("llama-spm")


def test_mistral_target_llama_draft_is_refused_at_the_first_differing_token(mistral, llama2):
    report = check_hf_pair(mistral, llama2)
    assert not report.compatible
    failed = [c.name for c in report.checks if not c.ok]
    assert failed == ["token text"]  # same type, size, BOS/EOS: only the vocabularies' texts differ
    assert report.first_mismatch == {"id": 260, "target": "▁▁▁▁", "draft": "▁t"}


def test_cli_names_the_first_mismatch_and_exits_1(mistral, llama2, capsys):
    assert main(["check-pair", str(mistral), str(llama2)]) == 1
    out = capsys.readouterr().out
    assert "first difference at id 260" in out and "result: INCOMPATIBLE (token text)" in out


def test_llama2_target_with_phi3_draft_matches(llama2):
    report = check_hf_pair(llama2, tk.exported_dir("phi-3"))
    assert report.compatible, report.checks
    assert report.target.vocab_size == 32000 and report.draft.vocab_size == 32064
    assert any("eos ids differ" in w for w in report.warnings)


def test_same_tokenizer_in_two_directories_matches_json(mistral, tmp_path, capsys):
    draft = tmp_path / "mistral-draft"
    shutil.copytree(mistral, draft)
    assert main(["check-pair", "--json", str(mistral), str(draft)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["compatible"] is True and data["first_mismatch"] is None


def test_draft_without_tokenizer_json_is_bad_input(mistral, tmp_path, capsys):
    draft = tmp_path / "TinyLlama-exl2"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    assert main(["check-pair", str(mistral), str(draft)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no tokenizer.json" in err[0]


def test_converter_keeps_what_the_gguf_check_reads(llama2):
    gguf = read(tk._vocab_gguf("llama-spm"), check_data=False)
    want, (got, config) = vocab_of(gguf), vocab_of_dir(llama2)
    assert (got.type, got.n_tokens, got.bos, got.eos, got.add_bos, got.add_eos) == \
        (want.type, want.n_tokens, want.bos, want.eos, want.add_bos, want.add_eos)
    assert got.tokens == want.tokens
    assert config["vocab_size"] == 32000


def test_converter_on_a_byte_level_bpe_model(tmp_path):
    from tests import lab

    gguf = lab.model_path("smollm2-135m")
    out = export(gguf, tmp_path / "smollm2")
    want, (got, _cfg) = vocab_of(read(gguf)), vocab_of_dir(out)
    assert got.type == want.type == "BPE"
    assert (got.tokens, got.bos, got.eos, got.add_bos) == (want.tokens, want.bos, want.eos, want.add_bos)
