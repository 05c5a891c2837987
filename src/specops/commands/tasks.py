"""``specops tasks --from-requests LOG --per-workload N --out FILE``: a task file for the bench and the tune
(``specops tune --tasks``, the role's ``llama_server_tune_tasks``) from a request log of OpenAI-style chat bodies.

It samples N requests per workload (seeded), de-duplicates them, leaves out over-long prompts and labels workloads by
the default rule or the operator's (:mod:`specops.requestlog.label`). It prints ids, workloads, lengths and counts,
never a prompt's text. A bad line of the log (cut, not JSON, not a usable chat body) is skipped and counted on stderr
(``1 line skipped: requests.jsonl:18: not JSON (...)``); the log is refused only when more lines are skipped than
``--max-skipped`` allows (default: the first and last line of any log, 5% of a large one; see
:mod:`specops.requestlog.read`) or none is usable. Bad input is one line naming the file and the line (and the count),
and nothing is written. The task file is written whole (readable by its owner only: prompts can be private) and loads
with the bench's own reader before it replaces FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from specops.bench.tasks import TaskError, load_file
from specops.requestlog.label import RuleError, load_rules
from specops.requestlog.read import ALWAYS_SKIPPABLE, DEFAULT_MAX_SKIPPED, LogError, read_log
from specops.requestlog.sample import CHARS_PER_TOKEN, Selection, select

NAME = "tasks"
HELP = "build a task file (the bench's format) from a request log of OpenAI-style chat bodies"
DEFAULT_MAX_TOKENS = 3000  # a prompt that leaves room for the answer in the tune's 4096-token slot


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from-requests", type=Path, required=True, metavar="LOG",
                   help="JSONL, one chat completion body a line (bare, or under 'request' / 'body')")
    p.add_argument("--per-workload", type=int, required=True, metavar="N", help="tasks sampled per workload")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the task file to write (JSONL)")
    p.add_argument("--workload-rule", type=Path, metavar="FILE",
                   help="JSON/YAML rules tried before the default rule: an ordered list of {workload, last_user: "
                        "REGEX, has_tools: BOOL}")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--max-prompt-tokens", type=int, metavar="M",
                      help=f"leave out prompts over M tokens, estimated at {CHARS_PER_TOKEN} characters a token "
                           f"(default {DEFAULT_MAX_TOKENS})")
    size.add_argument("--max-prompt-chars", type=int, metavar="M", help="leave out prompts over M characters")
    p.add_argument("--max-skipped", type=float, default=DEFAULT_MAX_SKIPPED, metavar="SHARE",
                   help=f"the share of the log's (non-blank) lines that may be skipped as bad (cut, not JSON, not a "
                        f"usable chat body) before the log is refused: at most max({ALWAYS_SKIPPABLE}, SHARE × lines), "
                        f"so any log may lose its first and last line; 0 refuses the first bad line (default "
                        f"{DEFAULT_MAX_SKIPPED:g})")
    p.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")


class TasksError(RuntimeError):
    pass


def _max_chars(args: argparse.Namespace) -> int:
    if args.max_prompt_chars is not None:
        if args.max_prompt_chars < 1:
            raise TasksError("--max-prompt-chars must be at least 1")
        return int(args.max_prompt_chars)
    tokens = DEFAULT_MAX_TOKENS if args.max_prompt_tokens is None else args.max_prompt_tokens
    if tokens < 1:
        raise TasksError("--max-prompt-tokens must be at least 1")
    return int(tokens) * CHARS_PER_TOKEN


def _write(sel: Selection, out: Path) -> None:
    """The tasks to ``out`` whole (mode 0600), checked with the bench's reader first."""
    if not out.parent.is_dir():
        raise TasksError(f"--out {out}: no directory {out.parent}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    except OSError as exc:
        raise TasksError(f"cannot write in {out.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for task in sel.tasks:
                fh.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
        try:
            load_file(tmp)
        except TaskError as exc:  # its message may quote a message: only where
            raise TasksError(f"the tasks written do not load with the bench's reader (at "
                             f"{str(exc).split(': ')[0].rsplit(':', 1)[-1]})") from None
        os.replace(tmp, out)
    except OSError as exc:
        raise TasksError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _report(sel: Selection, read: int, args: argparse.Namespace, max_chars: int) -> None:
    """Counts, ids and lengths only."""
    cut = (f"{args.max_prompt_chars} characters" if args.max_prompt_chars is not None
           else f"{max_chars // CHARS_PER_TOKEN} prompt tokens (estimated, {max_chars:,} characters)")
    print(f"read {read} requests from {args.from_requests}: {sel.duplicates} duplicate(s) and {sel.too_long} over "
          f"{cut} left out")
    for workload, available in sel.available.items():
        mine = [t for t in sel.tasks if t.workload == workload]
        short = f" (fewer than {args.per_workload})" if available < args.per_workload else ""
        ids = ", ".join(f"{t.id} ({sel.chars[t.id]:,} chars)" for t in mine)
        print(f"  {workload}: {available} available, {len(mine)} sampled{short}: {ids}")
    print(f"wrote {len(sel.tasks)} tasks to {args.out} (seed {args.seed}); use it with specops tune --tasks "
          f"{args.out}")


def run(args: argparse.Namespace) -> int:
    try:
        if args.per_workload < 1:
            raise TasksError("--per-workload must be at least 1")
        max_chars = _max_chars(args)
        if not 0 <= args.max_skipped <= 1:  # NaN too
            raise TasksError("--max-skipped must be a share from 0 to 1")
        rules = load_rules(args.workload_rule) if args.workload_rule else []
        log = read_log(args.from_requests, args.max_skipped)
        sel = select(log.requests, args.per_workload, max_chars, args.seed, rules)
        if not sel.tasks:
            skipped = f", {log.count_text()}" if log.skipped else ""
            raise TasksError(f"no request of {args.from_requests} is left ({sel.duplicates} duplicate(s), "
                             f"{sel.too_long} over the prompt limit{skipped})")
        _write(sel, args.out)
    except (TasksError, LogError, RuleError) as exc:
        print(f"specops tasks: {exc}; nothing was written", file=sys.stderr)
        return 2
    if log.skipped:
        print(f"specops tasks: {log.skipped_text()}", file=sys.stderr)
    _report(sel, len(log.requests), args, max_chars)
    return 0
