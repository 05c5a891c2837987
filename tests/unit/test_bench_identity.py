"""Byte-for-byte identity and the first divergence position."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specops.bench.identity import compare, first_divergence, self_consistency


def test_identical_is_none() -> None:
    assert first_divergence("abc", "abc") is None
    assert first_divergence("", "") is None


def test_first_difference_and_prefix() -> None:
    assert first_divergence("abcdef", "abcXef") == 3
    assert first_divergence("abc", "abcdef") == 3
    assert first_divergence("abcdef", "abc") == 3
    assert first_divergence("x", "y") == 0


def test_positions_are_utf8_bytes() -> None:
    # "é" is two bytes: the divergence after it is at byte 3, not character 2
    assert first_divergence("aéb", "aéc") == 3
    # same first byte of a multibyte character, different second byte
    assert first_divergence("é", "è") == 1


def test_whitespace_counts() -> None:
    assert first_divergence("a b", "a  b") == 2
    assert first_divergence("line\n", "line") == 4


@given(st.text(), st.text())
def test_divergence_is_consistent(a: str, b: str) -> None:
    pos = first_divergence(a, b)
    ab, bb = a.encode(), b.encode()
    if pos is None:
        assert ab == bb
    else:
        assert ab[:pos] == bb[:pos]
        assert pos == min(len(ab), len(bb)) or ab[pos] != bb[pos]


def test_compare_counts_and_lists_divergences() -> None:
    ref = {"t1": "hello world", "t2": "same", "t3": "x"}
    outs = {
        0: {"t1": "hello world", "t2": "samE", "t3": "x"},
        1: {"t1": "hello there", "t2": "same", "t3": "x"},
    }
    res = compare("arm", "baseline", outs, ref)
    assert res.compared == 6 and res.identical == 4
    assert not res.all_identical
    got = sorted((d.task_id, d.rep, d.byte_pos, d.kind) for d in res.divergences)
    assert got == [("t1", 1, 6, "content"), ("t2", 0, 3, "content")]
    assert res.identical_tasks == {"t3"}


def test_missing_reference_is_not_identical() -> None:
    res = compare("arm", "baseline", {0: {"t1": "a", "t9": "b"}}, {"t1": "a"})
    assert res.missing == ["t9"] and not res.all_identical


def test_self_consistency_over_reps() -> None:
    same = self_consistency("baseline", {0: {"a": "1"}, 1: {"a": "1"}, 2: {"a": "1"}})
    assert same.all_identical and same.compared == 2
    drift = self_consistency("baseline", {0: {"a": "1"}, 1: {"a": "2"}})
    assert not drift.all_identical
    assert self_consistency("baseline", {0: {"a": "1"}}).compared == 0


def test_prefix_divergence_is_a_length_difference() -> None:
    res = compare("cli", "baseline", {0: {"t": "abc def ghi"}}, {"t": "abc def"})
    (d,) = res.divergences
    assert d.byte_pos == 7 and d.kind == "length"
    assert d.to_dict()["kind"] == "length"
