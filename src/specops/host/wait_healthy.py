"""Wait until a systemd-managed llama-server answers /health, or fail fast when it crashes.

Runs on the managed host with the standard library only. Exit 0 when healthy; 1 otherwise, with a one-line
``reason`` that names the cause (``<unit> exited (exit-code 1): failed to open GGUF file '/x' (Permission
denied)``), the ``cause`` lines it was taken from and a ``journal`` tail for context.

The journal lines are those of the runs this wait saw: every InvocationID the unit had while polling, matched
as ``_SYSTEMD_INVOCATION_ID`` (the service's own output) or ``INVOCATION_ID`` (systemd's lines about that run,
"Failed with result ..."). Neither the unit's current InvocationID nor a ``--since`` timestamp is enough when
it restarts (Restart=on-failure): by the time the crash is seen the InvocationID and ExecMainStartTimestamp
may already be those of the next run, whose journal holds no cause yet, and from systemd 254 on an automatic
restart passes through "failed", so InactiveExitTimestamp moves past the failed run too.

``--unit-file PATH`` polls the host and port of that unit's ExecStart (the known-good unit during a rollback)
instead of ``--url``.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request

from specops.host.hostlib import systemctl_show

MAX_CAUSE = 5
JOURNAL_TAIL = 25
# a line that says why: llama-server's errors and systemd's own lines about the unit
CAUSE = re.compile(r"\b(errors?|failed|couldn't|cannot|unable|invalid|unknown|permission denied|no such file"
                   r"|out of memory|exception|terminate)\b", re.I)
# systemd restating the outcome, which the reason's "(exit-code 1)" already says: a cause only when nothing
# else is
ECHO = re.compile(r"^(\S+: )?(Failed with result |Main process exited, |Failed to start |Start request repeated "
                  r"too quickly|Scheduled restart job|Unit \S+ entered failed state)")
# llama.cpp's "func: " prefix (after an optional log level, timestamp and "srv  "); "error:" is kept
PREFIX = re.compile(r"^(?:[IWED] )?(?:[\d.]+ [IWED] )?(?:(?:srv|slot|que|res)\s+)?"
                    r"(?!(?:error|warning|fatal)\b)[A-Za-z_][\w:]*(?:\(\))?: ")
UNIT_PREFIX = re.compile(r"^\S+\.service: ")
ANY_HOST = {"0.0.0.0", "::", "localhost", ""}
SETTLE_LOOKS, SETTLE_STEP = 12, 0.25  # a failure whose journal names no cause of its own is read again for 3 s
BEGAN_SLACK_S = 30                    # the unit's lines this long before the wait began count as its run's


def own_causes(lines: list[str]) -> list[str]:
    """The cause lines of the process's own: not systemd's restating the exit."""
    return [line for line in lines if CAUSE.search(line) and not ECHO.match(line.strip())]


def select_cause(lines: list[str], limit: int = MAX_CAUSE) -> list[str]:
    """The lines that say why a run failed, at most ``limit``, in journal order, repeats (restarts) once.

    When there are more, the first is kept with the last ``limit - 1``: llama.cpp logs the innermost error
    first (``failed to open GGUF file … (Permission denied)``) and each caller adds its own "failed to …".
    systemd's lines restating the exit (``Failed with result 'exit-code'``) count only when nothing else does.
    """
    hits = [line.strip() for line in lines if CAUSE.search(line)]
    own = own_causes(hits)
    picked = list(dict.fromkeys(reversed(own or hits)))[::-1]  # the last of each repeat, in order
    if len(picked) > limit:
        picked = picked[:1] + picked[len(picked) - limit + 1:]
    return picked


def short(line: str) -> str:
    """A cause line without its logger prefix (``srv    load_model: ``, ``<unit>.service: ``)."""
    return PREFIX.sub("", UNIT_PREFIX.sub("", line.strip()), count=1)


def exit_text(state: dict[str, str]) -> str:
    """How the main process ended, from ``systemctl show``: ``exit-code 1``, ``signal 9, oom-kill``; "" when
    systemd already started the next run (its ExecMain* and Result are reset)."""
    code, status, result = state.get("ExecMainCode", ""), state.get("ExecMainStatus", ""), state.get("Result", "")
    how = {"1": f"exit-code {status}", "2": f"signal {status}", "3": f"core-dump, signal {status}"}.get(code, "")
    extra = result if result not in ("", "success", "exit-code", "signal", "core-dump") else ""
    return ", ".join(part for part in (how, extra) if part)


def reason_line(head: str, cause: list[str]) -> str:
    """One line: what happened, then the cause lines (prefixes dropped), or a pointer to the journal."""
    return f"{head}: {'; '.join(short(c) for c in cause)}" if cause else f"{head}; the journal names no cause"


def unit_url(text: str, host_flags: list[str], port_flags: list[str], default_host: str = "127.0.0.1") -> str:
    """http://HOST:PORT that a unit file's ExecStart listens on (the host and port options, spelled as the role's
    knob table says and passed in; llama-server's default host otherwise; the deploy always writes the port);
    0.0.0.0, :: and localhost are polled on 127.0.0.1, an IPv6 address in brackets."""
    execs: list[str] = []
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("#", ";")):  # a comment, also inside a continued line (systemd ignores it there)
            continue
        logical += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        if logical.startswith("ExecStart="):
            execs.append(logical[len("ExecStart="):].strip())
        logical = ""
    argv = shlex.split(next((e for e in reversed(execs) if e), ""))
    if not argv:
        raise ValueError("the unit file has no ExecStart=")
    given: dict[str, str] = {}
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag in host_flags or flag in port_flags:
            following = argv[i + 1] if i + 1 < len(argv) else ""
            given["host" if flag in host_flags else "port"] = value if eq else following
    host, port = given.get("host", default_host), given.get("port", "")
    if host.endswith(".sock"):
        raise ValueError(f"ExecStart listens on a unix socket ({host}), not on a TCP port")
    if not port.isdigit():
        raise ValueError(f"ExecStart has no port or a port that is not a number ({port!r})")
    host = "127.0.0.1" if host in ANY_HOST else host
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def journal_argv(unit: str, invocations: list[str], since: str, lines: int = 300) -> list[str]:
    """journalctl for the runs in ``invocations`` (the unit's output and systemd's lines about each run); for
    a systemd without InvocationID, the unit's lines ``--since``."""
    argv = ["journalctl", "--no-pager", "-o", "cat", "-n", str(lines)]
    if not invocations:
        return [*argv, "-u", unit, "--since", since]
    return [*argv, *(f"_SYSTEMD_INVOCATION_ID={i}" for i in invocations), "+",
            *(f"INVOCATION_ID={i}" for i in invocations)]


def unit_state(unit: str) -> dict[str, str]:
    return systemctl_show(unit, "ActiveState", "SubState", "NRestarts", "MainPID", "Result", "ExecMainCode",
                          "ExecMainStatus", "InvocationID")


def journal_lines(unit: str, invocations: list[str], since: str, began: str | None = None) -> list[str]:
    def run(argv: list[str]) -> list[str]:
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        return [line for line in out.splitlines() if line.strip()]
    # what the unit's process logged just before it died can still be on its way into the journal (its line
    # naming the cause arrived after systemd's own lines once, under load): --sync stores everything logged so far
    subprocess.run(["journalctl", "--sync"], capture_output=True, text=True, check=False)
    # a journald that did not tag the lines with the invocation: the unit's recent lines, as before
    lines = run(journal_argv(unit, invocations, since)) or run(journal_argv(unit, [], since))
    if began and invocations and not own_causes(lines):
        # journald tags a line with its run (_SYSTEMD_INVOCATION_ID) from the run's cgroup: a line it stores after
        # the run's cgroup is gone carries none, and the run's own lines are missing above (a TabbyAPI traceback was,
        # under the whole suite's load, even after the settle below): the unit's lines since shortly before this wait
        recent = run(journal_argv(unit, [], began))
        if own_causes(recent):
            return recent
    return lines




def failure(head: str, unit: str, invocations: list[str], since: str, began: str | None = None) -> dict[str, object]:
    lines = journal_lines(unit, invocations, since, began)
    # the dying process's last lines travel through its stdout stream to journald and can land after systemd's
    # own ("Failed with result 'exit-code'"), even after --sync: a TabbyAPI traceback did once under the whole
    # suite's load. Look again for a few seconds before settling for systemd's lines.
    for _ in range(SETTLE_LOOKS):
        if own_causes(lines):
            break
        time.sleep(SETTLE_STEP)
        lines = journal_lines(unit, invocations, since, began)
    cause = select_cause(lines)
    return {"ok": False, "reason": reason_line(head, cause), "cause": cause,
            "journal": "\n".join(lines[-JOURNAL_TAIL:])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url")
    where.add_argument("--unit-file", help="poll the host and port of this unit file's ExecStart")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--since", default="-10min", help="journal window when systemd gives no InvocationID")
    ap.add_argument("--host-flag", action="append", default=[], help="with --unit-file: a spelling of the host option")
    ap.add_argument("--port-flag", action="append", default=[], help="with --unit-file: a spelling of the port option")
    args = ap.parse_args()
    url = args.url
    if args.unit_file:
        try:
            with open(args.unit_file, encoding="utf-8") as fh:
                url = unit_url(fh.read(), args.host_flag, args.port_flag)
        except (OSError, ValueError) as exc:
            print(json.dumps({"ok": False, "reason": f"cannot tell where {args.unit} listens: {exc}", "cause": [],
                              "journal": ""}))
            return 1
    # (the run this wait watches was started just before it: its first lines can be a few seconds older)
    began = f"@{int(time.time()) - BEGAN_SLACK_S}"
    st = unit_state(args.unit)
    restarts0 = int(st.get("NRestarts", "0") or 0)
    seen: list[str] = []
    started = time.monotonic()
    deadline = started + args.timeout
    last = ""
    while True:
        if st.get("InvocationID") and st["InvocationID"] not in seen:
            seen.append(st["InvocationID"])
        if st.get("ActiveState") == "failed" or int(st.get("NRestarts", "0") or 0) > restarts0:
            head = f"{args.unit} exited ({exit_text(st) or 'systemd restarted it'})"
            print(json.dumps({**failure(head, args.unit, seen, args.since, began), "url": url}))
            return 1
        if time.monotonic() >= deadline:
            break
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    print(json.dumps({"ok": True, "state": st, "url": url}))
                    return 0
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        # a small model answers a second or two after a restart: look every 0.25 s for the first 10 s, then every
        # second (a large one loads for minutes; each look also asks systemd for the unit's state)
        time.sleep(0.25 if time.monotonic() - started < 10 else 1)
        st = unit_state(args.unit)
    head = f"{args.unit} gave no healthy answer on {url} within {args.timeout:.0f}s{f' ({last})' if last else ''}"
    print(json.dumps({**failure(head, args.unit, seen, args.since, began), "url": url}))
    return 1


if __name__ == "__main__":
    sys.exit(main())
