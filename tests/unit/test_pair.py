"""check-pair on synthetic GGUFs: each llama.cpp rule, its edge, bad input, CLI exit codes and output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.cli import main
from specops.ggufmeta import GGUFError, read
from specops.pair import check_pair, vocab_of
from tests.unit.synthgguf import vocab, write_gguf


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "target.gguf", extra_tensor_elems=60_000)


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


def test_identical_vocab_is_compatible(target: Path, tmp_path: Path) -> None:
    draft = write_gguf(tmp_path / "draft.gguf")
    report = check_pair(target, draft)
    assert report.compatible, report.checks
    assert report.first_mismatch is None
    assert report.warnings == []  # the draft is far smaller than a third of the target


def test_token_differs_at_id_7(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toks = vocab(300)
    toks[7] = "other7"
    draft = write_gguf(tmp_path / "draft.gguf", tokens=toks)
    report = check_pair(target, draft)
    assert failed(report) == ["token text"]
    assert report.first_mismatch == {"id": 7, "target": "tok7", "draft": "other7"}
    assert main(["check-pair", str(target), str(draft)]) == 1
    out = capsys.readouterr().out
    assert "first difference at id 7: target 'tok7', draft 'other7'" in out
    assert "INCOMPATIBLE (token text)" in out


def test_tokens_below_id_5_are_not_compared(target: Path, tmp_path: Path) -> None:
    toks = vocab(300)
    toks[3] = "<different-pad>"
    assert check_pair(target, write_gguf(tmp_path / "draft.gguf", tokens=toks)).compatible


def test_vocab_size_difference_limit(target: Path, tmp_path: Path) -> None:
    ok = check_pair(target, write_gguf(tmp_path / "d428.gguf", n_vocab=300 + 128))
    assert ok.compatible, "a difference of exactly 128 is allowed"
    bad = check_pair(target, write_gguf(tmp_path / "d429.gguf", n_vocab=300 + 129))
    assert failed(bad) == ["vocab size"]
    assert "difference 129, max 128" in bad.checks[3].detail


def test_bos_compared_only_when_added(target: Path, tmp_path: Path) -> None:
    # add_bos false on both: llama.cpp does not compare the ids
    assert check_pair(target, write_gguf(tmp_path / "d1.gguf", bos=3)).compatible
    t2 = write_gguf(tmp_path / "t2.gguf", add_bos=True)
    report = check_pair(t2, write_gguf(tmp_path / "d2.gguf", add_bos=True, bos=3))
    assert failed(report) == ["bos"]
    assert "bos id 1/3" in report.checks[1].detail


def test_add_bos_must_match(target: Path, tmp_path: Path) -> None:
    assert failed(check_pair(target, write_gguf(tmp_path / "d.gguf", add_bos=True))) == ["bos"]


def test_eos_rule_and_note(tmp_path: Path) -> None:
    t = write_gguf(tmp_path / "t.gguf", add_eos=True)
    assert failed(check_pair(t, write_gguf(tmp_path / "d.gguf", add_eos=True, eos=4))) == ["eos"]
    t2 = write_gguf(tmp_path / "t2.gguf")
    report = check_pair(t2, write_gguf(tmp_path / "d2.gguf", eos=4))
    assert report.compatible
    assert any("eos ids differ" in w for w in report.warnings)


def test_vocab_type_must_match(target: Path, tmp_path: Path) -> None:
    draft = write_gguf(tmp_path / "spm.gguf", tokenizer="llama", pre=None, add_bos=False)
    assert failed(check_pair(target, draft)) == ["vocab type"]


def test_llama_cpp_defaults_when_keys_are_absent(tmp_path: Path) -> None:
    spm = vocab_of(
        read(write_gguf(tmp_path / "spm.gguf", tokenizer="llama", pre=None, add_bos=None, bos=None, eos=None))
    )
    assert (spm.type, spm.add_bos, spm.add_eos, spm.bos, spm.eos) == ("SPM", True, False, 1, 2)
    l3 = vocab_of(read(write_gguf(tmp_path / "l3.gguf", pre="llama-bpe", add_bos=None, bos=None, eos=None)))
    assert (l3.type, l3.add_bos, l3.bos, l3.eos) == ("BPE", True, 11, 11)
    keyed = vocab_of(read(write_gguf(tmp_path / "k.gguf", pre="llama-bpe", add_bos=False)))
    assert keyed.add_bos is False, "the GGUF key wins over the pre-tokenizer default"
    out_of_range = vocab_of(read(write_gguf(tmp_path / "o.gguf", n_vocab=10, bos=None, eos=None)))
    assert out_of_range.bos == -1 and out_of_range.eos == -1, "default ids beyond the vocab are disabled"


def test_draft_size_warning(tmp_path: Path) -> None:
    t = write_gguf(tmp_path / "t.gguf", extra_tensor_elems=30_000)
    d = write_gguf(tmp_path / "d.gguf", extra_tensor_elems=10_000)
    report = check_pair(t, d)
    assert report.compatible
    assert any("speedup will be small" in w for w in report.warnings)
    swapped = check_pair(d, t)
    assert any("swapped" in w for w in swapped.warnings)


def test_json_output(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toks = vocab(300)
    toks[9] = "x"
    draft = write_gguf(tmp_path / "d.gguf", tokens=toks)
    assert main(["check-pair", "--json", str(target), str(draft)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["compatible"] is False
    assert data["first_mismatch"] == {"id": 9, "target": "tok9", "draft": "x"}
    assert data["target"]["vocab_size"] == 300 and data["target"]["n_layer"] == 4
    assert [c["name"] for c in data["checks"]] == ["vocab type", "bos", "eos", "vocab size", "token text"]
    assert "INCOMPATIBLE" in data["message"]


def test_bad_input_exits_2(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-pair", str(target), str(tmp_path / "missing.gguf")]) == 2
    assert "no such file" in capsys.readouterr().err
    html = tmp_path / "page.gguf"
    html.write_text("<html>404</html>")
    assert main(["check-pair", str(html), str(target)]) == 2
    err = capsys.readouterr().err
    assert "not a GGUF file" in err and "error page" in err


def test_truncated_file_is_rejected(target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = target.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(GGUFError, match="truncated: tensor data ends at byte"):
        read(cut)
    assert main(["check-pair", str(target), str(cut)]) == 2
    assert "1,000 missing" in capsys.readouterr().err
    header_only = tmp_path / "head.gguf"
    header_only.write_bytes(data[:200])
    with pytest.raises(GGUFError, match="damaged or truncated GGUF header"):
        read(header_only)


def test_trailing_garbage_is_rejected(target: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra.gguf"
    extra.write_bytes(target.read_bytes() + b"\0" * 4096)
    with pytest.raises(GGUFError, match="unexpected bytes after the tensor data"):
        read(extra)
