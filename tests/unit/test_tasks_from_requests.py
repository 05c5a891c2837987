"""``specops tasks --from-requests`` (issue 52 item 1): a request log of OpenAI-style bodies becomes a task file the
bench loads: sampled per workload (seeded), de-duplicated, over-long prompts left out, labelled by the default rule
or the operator's; bad input is one line naming file:line and writes nothing; no prompt text is ever printed. A log
is read as gateways write it (issue 82 item 3): a bad line (cut, not JSON, not a chat body) is skipped and counted, and
the log is refused only when more lines are skipped than --max-skipped allows or none is usable."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from specops.bench.tasks import load_tasks
from specops.cli import main
from specops.requestlog.label import Rule, RuleError, default_label, label, load_rules
from specops.requestlog.read import DEFAULT_MAX_SKIPPED, LogError, allowed_skips, parse, read_log

pytestmark = pytest.mark.fast

SECRET = "zq-SECRET-7731"  # in every prompt: never in what the command prints
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "request-log" / "requests.jsonl"


def _user(text: str, system: str | None = None, **extra) -> dict:
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return {"model": "m", "messages": msgs, **extra}


CODE = _user(f"Write a Python function that parses ISO dates. {SECRET}")
EDIT = _user(f"Rename `foo` to `bar` and output the full code. {SECRET}\n\n```python\ndef foo():\n    return 1\n```")
PROSE = _user(f"Explain in two paragraphs why the sky is blue. {SECRET}")
TOOL = _user(f"What's the weather in Lisbon? {SECRET}", tools=[{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])


def _log(tmp_path: Path, lines: list[object], name: str = "requests.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _variants(body: dict, n: int) -> list[dict]:
    """``n`` different requests of the same kind (the text differs by a number)."""
    out = []
    for i in range(n):
        b = json.loads(json.dumps(body))
        b["messages"][-1]["content"] = f"{b['messages'][-1]['content']} #{i}"
        out.append(b)
    return out


def _run(*argv: object) -> int:
    return main(["tasks", *map(str, argv)])


def test_a_log_with_duplicates_over_long_prompts_becomes_a_task_file_the_bench_loads(tmp_path, capsys):
    long_prose = _user(f"Summarise this. {SECRET} " + "word " * 3000)
    lines = [*_variants(CODE, 5), *_variants(EDIT, 3), *_variants(PROSE, 4), *_variants(TOOL, 2),
             {"request": _variants(CODE, 1)[0]},  # a duplicate of the first code request, wrapped
             {"body": _variants(PROSE, 2)[1]},  # a duplicate, wrapped
             {"body": json.dumps(_variants(EDIT, 1)[0])},  # a duplicate, the body as a JSON string
             long_prose, "", "   "]
    log, out = _log(tmp_path, lines), tmp_path / "mine.jsonl"
    assert _run("--from-requests", log, "--per-workload", 3, "--out", out, "--max-prompt-tokens", 2000) == 0
    said = capsys.readouterr()
    tasks = load_tasks([out])
    by = {w: [t for t in tasks if t.workload == w] for w in ("code", "edit", "prose", "tool_calls")}
    assert {w: len(ts) for w, ts in by.items()} == {"code": 3, "edit": 3, "prose": 3, "tool_calls": 2}
    assert len({t.messages for t in tasks}) == len(tasks) and all(t.tags == ("from-requests",) for t in tasks)
    assert "read 18 requests" in said.out and "3 duplicate(s) and 1 over 2000 prompt tokens" in said.out
    assert "code: 5 available, 3 sampled" in said.out and "tool_calls: 2 available, 2 sampled (fewer than 3)" in \
        said.out
    assert SECRET not in said.out + said.err and "Lisbon" not in said.out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # prompts can be private
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    tool = by["tool_calls"][0]
    assert tool.messages[0][0] == "system" and tool.messages[0][1].startswith('Tools: [{"name":"get_weather"')


def test_the_sample_is_seeded_and_each_workloads_sample_is_its_own(tmp_path):
    log = _log(tmp_path, [*_variants(CODE, 10), *_variants(PROSE, 10)])
    more = _log(tmp_path, [*_variants(CODE, 10), *_variants(PROSE, 10), *_variants(EDIT, 6)], "more.jsonl")
    outs = {}
    for name, src, seed in (("a", log, 0), ("b", log, 0), ("c", log, 1), ("d", more, 0)):
        outs[name] = tmp_path / f"{name}.jsonl"
        assert _run("--from-requests", src, "--per-workload", 3, "--out", outs[name], "--seed", seed) == 0
    ids = {k: [t.id for t in load_tasks([p])] for k, p in outs.items()}
    assert outs["a"].read_bytes() == outs["b"].read_bytes()
    assert ids["a"] != ids["c"]
    assert [i for i in ids["d"] if not i.startswith("edit-")] == ids["a"]  # another workload's requests change nothing


@pytest.mark.parametrize(("line", "said"), [
    ("{not json", "requests.jsonl:2: not JSON"),
    (json.dumps({"model": "m", "prompt": "hi"}), "requests.jsonl:2: no chat body (messages)"),
    (json.dumps({"messages": []}), "requests.jsonl:2: the body has no messages"),
    (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
     "requests.jsonl:2: message 1 has a 'image_url' part: the bench sends text only"),
    (json.dumps({"messages": [{"role": "user", "content": SECRET}, {"role": "assistant", "content": "Sure"}]}),
     "requests.jsonl:2: the conversation ends with the assistant"),
    (json.dumps({"messages": [{"role": "narrator", "content": SECRET}]}), "requests.jsonl:2: message 1 has role"),
])
def test_a_bad_line_is_skipped_and_named_on_stderr_and_refused_at_max_skipped_0(tmp_path, capsys, line, said):
    log = _log(tmp_path, [CODE, line, PROSE])
    out = tmp_path / "out.jsonl"
    assert _run("--from-requests", log, "--per-workload", 2, "--out", out) == 0
    err = capsys.readouterr()
    assert err.err.startswith(f"specops tasks: 1 line skipped: {tmp_path}/{said}"), err.err
    assert len(err.err.strip().splitlines()) == 1 and SECRET not in err.err + err.out
    assert "read 2 requests" in err.out and len(load_tasks([out])) == 2
    out.write_text("the operator's earlier file\n")
    assert _run("--from-requests", log, "--per-workload", 2, "--out", out, "--max-skipped", 0) == 2
    err = capsys.readouterr()
    assert said in err.err and len(err.err.strip().splitlines()) == 1 and err.out == "", err
    assert "1 of 3 lines skipped, more than the 0" in err.err
    assert "nothing was written" in err.err and SECRET not in err.err
    assert out.read_text() == "the operator's earlier file\n"


@pytest.mark.parametrize(("argv", "said"), [
    (["--per-workload", "0"], "--per-workload must be at least 1"),
    (["--max-prompt-chars", "0"], "--max-prompt-chars must be at least 1"),
    (["--max-prompt-chars", "10"], "no request of"),
    (["--out", "/nonexistent-dir/x.jsonl"], "no directory /nonexistent-dir"),
    (["--max-skipped", "1.5"], "--max-skipped must be a share from 0 to 1"),
    (["--max-skipped", "-0.1"], "--max-skipped must be a share from 0 to 1"),
    (["--max-skipped", "nan"], "--max-skipped must be a share from 0 to 1"),
])
def test_bad_options_are_one_line(tmp_path, capsys, argv, said):
    log = _log(tmp_path, [CODE, PROSE])
    base = {"--per-workload": "2", "--out": str(tmp_path / "o.jsonl")}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    assert _run("--from-requests", log, *[x for kv in base.items() for x in kv]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists()


def test_an_empty_log_is_refused(tmp_path, capsys):
    log = _log(tmp_path, ["", ""])
    assert _run("--from-requests", log, "--per-workload", 2, "--out", tmp_path / "o.jsonl") == 2
    assert "has no requests" in capsys.readouterr().err


def test_the_default_rule_agrees_with_the_standard_set():
    """Every task of the bench's own set, sent as a chat body, gets its own workload."""
    for t in load_tasks():
        assert default_label(parse({"messages": t.chat_messages()}, "x", 1)) == t.workload, t.id


@pytest.mark.parametrize(("body", "workload"), [
    (CODE, "code"), (EDIT, "edit"), (PROSE, "prose"), (TOOL, "tool_calls"),
    (_user("Explain what this does:\n```go\nwg.Add(1)\n```"), "code"),  # a verb inside the code asks nothing
    (_user("Write a short poem about debugging code late at night."), "prose"),
    (_user("List three colours.", response_format={"type": "json_object"}), "tool_calls"),
    (_user("Apply this patch:\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b"), "edit"),
    ({"messages": [{"role": "user", "content": "weather?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "1", "type": "function", "function": {"name": "w", "arguments": "{\"c\": 1}"}}]},
                   {"role": "tool", "tool_call_id": "1", "content": "20C"}]}, "tool_calls"),
])
def test_default_labels(body, workload):
    assert default_label(parse(body, "x", 1)) == workload


def test_tool_turns_and_content_parts_become_the_benchs_messages():
    req = parse({"messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "weather"}, {"type": "text", "text": "in Lisbon?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Lisbon\"}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "20C"}]}, "x", 7)
    assert req.messages == (("system", "Be brief."), ("user", "weather\nin Lisbon?"),
                            ("assistant", '{"name": "w", "arguments": {"city": "Lisbon"}}'),
                            ("user", "Tool result:\n20C"))
    assert req.last_user == "weather\nin Lisbon?" and req.has_tools and req.line == 7


def test_the_operators_rules_come_first_and_the_default_rule_after(tmp_path, capsys):
    rules = tmp_path / "rules.yml"
    rules.write_text("- workload: support\n  last_user: '(?i)refund'\n- workload: agent\n  has_tools: true\n")
    got = load_rules(rules)
    refund, tool = parse(_user("I want a refund for order 12"), "x", 1), parse(TOOL, "x", 2)
    assert [label(r, got) for r in (refund, tool, parse(PROSE, "x", 3))] == ["support", "agent", "prose"]
    assert label(parse(CODE, "x", 4), [Rule("everything")]) == "everything"  # no condition: a catch-all
    as_json = tmp_path / "rules.json"
    as_json.write_text(json.dumps({"rules": [{"workload": "support", "last_user": "(?i)refund"}]}))
    assert label(refund, load_rules(as_json)) == "support"
    log = _log(tmp_path, [_user("A refund, please"), *_variants(PROSE, 2)])
    out = tmp_path / "o.jsonl"
    assert _run("--from-requests", log, "--per-workload", 5, "--out", out, "--workload-rule", rules) == 0
    assert sorted({t.workload for t in load_tasks([out])}) == ["prose", "support"]


@pytest.mark.parametrize(("text", "suffix", "said"), [
    ("[{\"workload\": \"x\", \"regex\": \"a\"}]", ".json", "rule 1: unknown key(s) regex"),
    ("[{\"workload\": \"Bad Name\"}]", ".json", "rule 1: workload must be a name"),
    ("[{\"workload\": \"x\", \"last_user\": \"(\"}]", ".json", "rule 1: last_user is not a regular expression"),
    ("[{\"workload\": \"x\", \"has_tools\": \"yes\"}]", ".json", "rule 1: has_tools must be true or false"),
    ("[]", ".json", "expected a non-empty list of rules"),
    ("{", ".json", "is not JSON"),
    ("- workload: [", ".yaml", "is not YAML"),
])
def test_a_bad_rule_file_is_one_line(tmp_path, capsys, text, suffix, said):
    rules = tmp_path / f"rules{suffix}"
    rules.write_text(text)
    with pytest.raises(RuleError) as err:
        load_rules(rules)
    assert said in str(err.value)
    log = _log(tmp_path, [CODE])
    assert _run("--from-requests", log, "--per-workload", 1, "--out", tmp_path / "o.jsonl",
                "--workload-rule", rules) == 2
    line = capsys.readouterr().err.strip()
    assert said in line and len(line.splitlines()) == 1 and not (tmp_path / "o.jsonl").exists()


def test_read_log_skips_a_bad_line_and_names_it_and_refuses_it_at_share_0(tmp_path):
    log = _log(tmp_path, [CODE, "", "[1, 2]"])
    got = read_log(log)
    assert [r.line for r in got.requests] == [1] and (got.lines, got.skipped) == (2, 1)
    assert got.reasons == (f"{log}:3: no chat body (messages), bare or under 'request' / 'body'",)
    with pytest.raises(LogError, match=r"requests\.jsonl:3: no chat body"):
        read_log(log, max_skipped=0)


def _fixture_lines() -> list[bytes]:
    return FIXTURE.read_bytes().splitlines()


def _write_lines(tmp_path: Path, lines: list[bytes], name: str = "requests.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    return path


def test_a_log_cut_at_both_ends_is_read_without_its_first_and_last_line(tmp_path, capsys):
    """A log copied while the gateway wrote it: its first line cut in half, its last one cut short (no newline)."""
    lines = _fixture_lines()
    assert len(lines) == 60
    lines[0] = lines[0][len(lines[0]) // 2:]
    log = _write_lines(tmp_path, lines[:-1])
    with log.open("ab") as fh:
        fh.write(lines[-1][:-40])
    out = tmp_path / "tasks.jsonl"
    assert _run("--from-requests", log, "--per-workload", 12, "--out", out) == 0
    said = capsys.readouterr()
    assert said.err.startswith(f"specops tasks: 2 lines skipped: {log}:1: not JSON ("), said.err
    assert f"; {log}:60: not JSON (" in said.err and len(said.err.strip().splitlines()) == 1
    assert "read 58 requests" in said.out
    tasks = load_tasks([out])
    assert len(tasks) == 46 and all(t.tags == ("from-requests",) for t in tasks)
    assert lines[0][:30].decode() not in said.err + said.out  # no prompt text, even of a cut line


@pytest.mark.parametrize(("n", "how", "why", "tasks"), [
    (18, "in half", "not JSON (", 45),  # one of the 10 tool calls: 9 left
    (16, "inside a character", "not UTF-8 (byte ", 46),  # an edit, of 18; its line holds non-ASCII text
])
def test_a_log_with_one_cut_line_reads_the_rest_and_says_1_line_skipped(tmp_path, capsys, n, how, why, tasks):
    lines = _fixture_lines()
    line = lines[n - 1]
    if how == "in half":
        lines[n - 1] = line[:len(line) // 2]
    else:
        wide = next(i for i, b in enumerate(line) if b >= 0x80)
        lines[n - 1] = line[:wide + 1]  # the first byte of a multi-byte character, and nothing after it
    log = _write_lines(tmp_path, lines)
    out = tmp_path / "tasks.jsonl"
    assert _run("--from-requests", log, "--per-workload", 12, "--out", out) == 0
    said = capsys.readouterr()
    assert said.err.startswith(f"specops tasks: 1 line skipped: {log}:{n}: {why}"), said.err
    assert "read 59 requests" in said.out and len(load_tasks([out])) == tasks


def test_a_log_of_which_97_percent_is_cut_is_refused_naming_the_count_and_the_first_bad_lines(tmp_path, capsys):
    fixture = _fixture_lines()
    lines = [*fixture, *fixture[:40]]  # 100 lines
    kept = {10, 50, 90}
    lines = [x if n in kept else x[:len(x) // 2] for n, x in enumerate(lines, 1)]
    log = _write_lines(tmp_path, lines)
    out = tmp_path / "tasks.jsonl"
    assert _run("--from-requests", log, "--per-workload", 12, "--out", out) == 2
    said = capsys.readouterr()
    err = said.err.strip()
    assert len(err.splitlines()) == 1 and said.out == "" and not out.exists(), said
    assert err.startswith(f"specops tasks: request log {log}: 97 of 100 lines skipped, more than the 5 that a share "
                          "of 0.05 allows"), err
    assert all(f"{log}:{n}: not JSON (" in err for n in (1, 2, 3)) and f"{log}:4:" not in err
    assert err.endswith("; and 94 more; nothing was written")
    with pytest.raises(LogError, match="97 of 100 lines skipped"):
        read_log(log)


@pytest.mark.parametrize("share", ["0.05", "1"])
def test_a_log_of_bad_lines_only_is_refused(tmp_path, capsys, share):
    lines = _fixture_lines()[:3]
    log = _write_lines(tmp_path, [lines[0][:50], b"{", b"", b"[1, 2]"])
    out = tmp_path / "tasks.jsonl"
    assert _run("--from-requests", log, "--per-workload", 2, "--out", out, "--max-skipped", share) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert f"request log {log} has no requests: 3 of 3 lines skipped: {log}:1: not JSON (" in err, err
    assert f"; {log}:2: not JSON (" in err and f"; {log}:4: no chat body" in err and "nothing was written" in err


def test_the_max_skipped_share_is_honoured(tmp_path, capsys):
    lines = _fixture_lines()[:20]
    for n in (3, 7, 11, 15):  # 4 of 20 lines cut: 20%
        lines[n - 1] = lines[n - 1][:60]
    log = _write_lines(tmp_path, lines)
    out = tmp_path / "tasks.jsonl"
    assert _run("--from-requests", log, "--per-workload", 3, "--out", out) == 2  # the default allows 2 of 20
    assert "4 of 20 lines skipped, more than the 2 that a share of 0.05 allows" in capsys.readouterr().err
    assert _run("--from-requests", log, "--per-workload", 3, "--out", out, "--max-skipped", 0.15) == 2
    assert "4 of 20 lines skipped, more than the 3 that a share of 0.15 allows" in capsys.readouterr().err
    assert not out.exists()
    assert _run("--from-requests", log, "--per-workload", 3, "--out", out, "--max-skipped", 0.2) == 0
    said = capsys.readouterr()
    assert said.err.startswith(f"specops tasks: 4 lines skipped: {log}:3: not JSON (")
    assert f"; {log}:11: not JSON (" in said.err and said.err.strip().endswith("; and 1 more")  # the first 3 named
    assert "read 16 requests" in said.out and load_tasks([out])


def test_any_log_may_lose_its_first_and_last_line_by_default(tmp_path):
    assert DEFAULT_MAX_SKIPPED == 0.05
    assert [allowed_skips(n, DEFAULT_MAX_SKIPPED) for n in (1, 3, 40, 59, 60, 100, 1000)] == [2, 2, 2, 2, 3, 5, 50]
    assert allowed_skips(1000, 0) == 0 and allowed_skips(100, 0.29) == 29  # no float rounding down
    for n in (3, 4, 41, 1000):
        body = json.dumps(CODE)
        log = _write_lines(tmp_path, [body[:40].encode(), *(json.dumps(b).encode() for b in _variants(CODE, n - 2)),
                                      body[:-3].encode()], f"log-{n}.jsonl")
        got = read_log(log)
        assert (got.lines, got.skipped, len(got.requests)) == (n, 2, n - 2)
        assert [r.line for r in got.requests] == list(range(2, n))


def test_blank_lines_are_ignored_not_counted_as_skipped(tmp_path):
    log = _log(tmp_path, ["{cut", "", "   ", CODE, "", "\t", PROSE, "{cut"])
    got = read_log(log)
    assert (got.lines, got.skipped, [r.line for r in got.requests]) == (4, 2, [4, 7])
    assert got.reasons == (f"{log}:1: not JSON (Expecting property name enclosed in double quotes)",
                           f"{log}:8: not JSON (Expecting property name enclosed in double quotes)")
    with pytest.raises(LogError, match="3 of 4 lines skipped"):
        read_log(_log(tmp_path, ["{cut", "", "{cut", "", "", "{cut", CODE], "more.jsonl"))


def test_a_line_separator_inside_a_prompt_does_not_split_its_line(tmp_path):
    """U+2028 and U+0085 may stand unescaped in JSON (ensure_ascii=False): a line ends at \\n or \\r only."""
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps(_user("one\u2028two\x85three"), ensure_ascii=False) + "\n" + json.dumps(PROSE) + "\n",
                   encoding="utf-8")
    got = read_log(log, max_skipped=0)
    assert got.skipped == 0 and got.requests[0].last_user == "one\u2028two\x85three"
