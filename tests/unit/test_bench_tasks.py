"""The task set: the standard set's shape and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.tasks import TaskError, load_file, load_tasks, task_set_digest, workloads_of


def test_standard_set_shape() -> None:
    tasks = load_tasks()
    counts = {w: sum(t.workload == w for t in tasks) for w in workloads_of(tasks)}
    assert set(counts) == {"tool_calls", "code", "prose", "edit"}
    assert counts["code"] >= 6 and counts["prose"] >= 10 and counts["tool_calls"] >= 10, counts
    assert counts["edit"] >= 15
    edits = [t for t in tasks if t.workload == "edit"]
    assert all("copy-heavy" in t.tags for t in edits)
    # most of an edit's answer repeats the prompt: the block to edit is longer than a 192-token answer
    assert all(len(t.messages[-1][1]) > 500 for t in edits)
    assert sum("copy-heavy" in t.tags for t in tasks) >= 5
    assert sum("structured-json" in t.tags for t in tasks) >= 5
    assert len({t.messages[-1][1] for t in tasks}) == len(tasks), "prompts must be varied"


def test_digest_is_stable_and_content_sensitive() -> None:
    a, b = load_tasks(), load_tasks()
    assert task_set_digest(a) == task_set_digest(b)
    assert task_set_digest(a) != task_set_digest(a[1:])


def test_workload_filter_and_limit() -> None:
    tasks = load_tasks(workloads=["code", "prose"], limit_per_workload=2)
    assert [t.workload for t in tasks] == ["code", "code", "prose", "prose"]
    with pytest.raises(TaskError, match="not in the task set"):
        load_tasks(workloads=["poetry"])


def test_empty_file_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text("\n  \n")
    with pytest.raises(TaskError, match=r"mine\.jsonl has no tasks"):
        load_tasks([f])


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="cannot read task file"):
        load_file(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        ("{not json", "invalid JSON"),
        ('{"id": "a"}', "'messages' must be"),
        ('{"id": "", "messages": [{"role": "user", "content": "x"}]}', "'id' must be"),
        ('{"id": "a", "messages": [{"role": "robot", "content": "x"}]}', "role in"),
        (
            '{"id": "a", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}',
            "last message must be from the user",
        ),
        ('{"id": "a", "messages": [{"role": "user", "content": "x"}], "prio": 1}', "unknown key"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, line: str, msg: str) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"id": "ok", "messages": [{"role": "user", "content": "fine"}]}\n' + line + "\n")
    with pytest.raises(TaskError, match=msg) as err:
        load_file(f)
    assert "t.jsonl:2" in str(err.value)


def test_workload_defaults_to_file_stem_and_duplicates_rejected(tmp_path: Path) -> None:
    f = tmp_path / "support.jsonl"
    f.write_text('{"id": "s1", "messages": [{"role": "user", "content": "hi"}]}\n')
    assert load_file(f)[0].workload == "support"
    g = tmp_path / "other.jsonl"
    g.write_text('{"id": "s1", "messages": [{"role": "user", "content": "hey"}]}\n')
    with pytest.raises(TaskError, match="duplicate task id 's1'"):
        load_tasks([f, g])


def test_systematic_sample_keeps_every_kth_task_of_each_workload() -> None:
    full = load_tasks()
    sample = load_tasks(sample_every=4)
    for wl in workloads_of(full):
        ids = [t.id for t in full if t.workload == wl]
        assert [t.id for t in sample if t.workload == wl] == ids[::4]
    assert load_tasks(sample_every=1) == full
    with pytest.raises(TaskError, match="K >= 1"):
        load_tasks(sample_every=0)
