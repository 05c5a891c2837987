"""The operator's tune inputs (issue 52): llama_server_tune_tasks and llama_server_tune_mix, checked on the controller
in the deploy's first play (specops.tune.inputs, through the specops_tune_input_problems filter). Each problem is one
line naming the variable and the file; none quotes a prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.tune import inputs

pytestmark = pytest.mark.fast

SECRET = "the-customer-secret-4711"


def task(i: int, workload: str = "edit", content: str = f"rename x to y in: {SECRET}") -> str:
    return json.dumps({"id": f"{workload}-{i}", "workload": workload,
                       "messages": [{"role": "user", "content": content}]})


def write(tmp_path: Path, name: str, lines: list[str]) -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def problems(paths, shares=None, ctx=4096, max_tokens=96, parallel=1) -> list[str]:
    out = inputs.problems(paths, shares, ctx, max_tokens, parallel)
    assert all(SECRET not in line for line in out), out  # never a prompt's text
    return out


def test_good_files_and_mix_have_no_problem(tmp_path: Path) -> None:
    edits = write(tmp_path, "edits.jsonl", [task(i) for i in range(3)])
    prose = write(tmp_path, "prose.jsonl", [task(i, "prose") for i in range(2)])
    assert problems([edits, prose], {"edit": 70, "prose": 30}) == []
    assert problems([edits]) == []
    assert problems([], {"code": 1, "edit": 1, "prose": 1, "tool_calls": 0}) == []  # the standard set's workloads


def test_a_line_not_in_the_format_is_named_by_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.jsonl", [task(1), "{not json", task(2)])
    assert problems([bad]) == [f"llama_server_tune_tasks={bad}: {bad}:2: invalid JSON (Expecting property name "
                               "enclosed in double quotes)"]
    wrong = write(tmp_path, "wrong.jsonl", [task(1), json.dumps({"id": "t2", "messages": [
        {"role": "robot", "content": SECRET}]})])
    (line,) = problems([wrong])
    assert line.startswith(f"llama_server_tune_tasks={wrong}: {wrong}:2: message 1 needs role in"), line
    assert "robot" in line


def test_an_empty_file_a_missing_file_and_two_of_one_name(tmp_path: Path) -> None:
    empty = write(tmp_path, "empty.jsonl", ["", "// only a comment"])
    assert problems([empty]) == [f"llama_server_tune_tasks={empty}: task file {empty} has no tasks (empty or only "
                                 "blank/comment lines)"]
    (line,) = problems([str(tmp_path / "nowhere.jsonl")])
    assert line == (f"llama_server_tune_tasks={tmp_path / 'nowhere.jsonl'}: not a file on the controller; give the "
                    "path of a task file (JSONL, the bench's format; `specops tasks --from-requests LOG` writes one "
                    "from a request log)")
    (tmp_path / "b").mkdir()
    one = write(tmp_path, "t.jsonl", [task(1)])
    two = write(tmp_path / "b", "t.jsonl", [task(2)])
    (line,) = problems([one, two])
    assert "have the same file name (t.jsonl)" in line


def test_a_file_too_large_to_ship(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "MAX_FILE_BYTES", 1024)
    big = write(tmp_path, "big.jsonl", [task(i) for i in range(40)])
    (line,) = problems([big])
    assert line.startswith(f"llama_server_tune_tasks={big}: ") and "MiB, more than the" in line, line
    assert "--per-workload" in line


@pytest.mark.parametrize(("shares", "why"), [
    ({"edit": -1, "prose": 2}, "llama_server_tune_mix={'edit': -1, 'prose': 2}: edit's share is negative (-1)"),
    ({"edit": 0, "prose": 0}, "llama_server_tune_mix={'edit': 0, 'prose': 0}: every share is zero"),
    ({"edit": 1, "code": 1}, "llama_server_tune_mix={'edit': 1, 'code': 1}: names workload(s) code not in the task "
                             "set (it has: edit, prose)"),
    ({"edit": "lots"}, "llama_server_tune_mix={'edit': 'lots'}: the share of edit is not a number"),
    # issue 61: every share on workloads the files do not hold (the files' workloads all outside the mix)
    ({"code": 70, "tool_calls": 30, "edit": 0}, "llama_server_tune_mix={'code': 70, 'tool_calls': 30, 'edit': 0}: "
                                                "names workload(s) code, tool_calls not in the task set (it has: "
                                                "edit, prose)"),
])
def test_a_mix_that_cannot_be_used(tmp_path: Path, shares: dict, why: str) -> None:
    edits = write(tmp_path, "edits.jsonl", [task(1), task(2, "prose")])
    (line,) = problems([edits], shares)
    assert line.startswith(why), line


def test_a_task_longer_than_the_slots_context(tmp_path: Path) -> None:
    long = "x" * 3000 + SECRET
    f = write(tmp_path, "long.jsonl", [task(1), task(2, content=long)])
    assert problems([f], ctx=4096) == []
    (line,) = problems([f], ctx=2048, parallel=2)  # llama-server divides its context among the slots: 1024 each
    assert line.startswith(f"llama_server_tune_tasks={f}: task 'edit-2' (edit) has a prompt of 3024 characters, about "
                           "1008 tokens"), line
    assert "exceeds the slot's context of 1024" in line
    assert problems([f], ctx=0, parallel=2) == []  # the model's own context: the tune runs at 4096


def test_the_mix_as_the_tune_takes_it() -> None:
    assert inputs.mix_text({"edit": 70, "prose": 30}) == "edit=70,prose=30"
    assert inputs.mix_text({}) == ""
