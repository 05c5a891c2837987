"""The tune's transient systemd unit, as the deploy drives it on the host (roles/llama_server_tune/tasks/run.yml;
issue 51).

The deploy runs ``specops tune`` with ``systemd-run --unit specops-tune`` (a runtime limit of its budget plus grace,
the whole control group killed when it ends, probe servers included) and watches it from the controller with this
module, run on the host with the host's Python (the standard library, and specops.tune.leash, which is too):

``sweep``
    Before the tune starts, under the deploy lock: stops what an interrupted deploy left -- the unit still running,
    a ``specops tune`` writing the host's record outside any unit (deploys from before the unit), and orphaned
    llama-server / llama-bench processes of the install root (under PID 1 and no service's main process) -- and
    says so in one line. Clears the last run's files and touches the heartbeat.
``poll``
    One look, as an Ansible ``until`` loop takes it: touches the heartbeat (the tune's leash,
    :mod:`specops.tune.leash`, stops the tune when the looks stop), waits up to ``--wait`` seconds for the unit to
    end, and prints one JSON object: the progress line while it runs; when it ended, its exit status, why in one line
    and its output.
``exit``
    The unit's ``ExecStopPost``: systemd hands it how the tune ended ($SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS);
    it keeps that and the one-line reason (:func:`why`) in ``--exit-file`` for ``poll``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.paths import write_whole
from specops.tune.leash import STOPPED

ACTIVE = frozenset({"active", "activating", "deactivating", "reloading", "refreshing"})
CLD = {"1": "exited", "2": "killed", "3": "dumped"}  # systemctl show's ExecMainCode (si_code) in systemd's words
SERVERS = ("llama-server", "llama-bench")
UNPROVEN = 3  # specops tune's own exit status for an unproven result (specops.commands.tune; STOPPED: the leash's)
TERM_WAIT_S = 10.0  # SIGTERM, then SIGKILL
SETTLE_S = 3.0  # a unit seen ended without its record: how long its ExecStopPost may still take to write it
SHOW = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus", "MainPID",
        "ActiveEnterTimestamp", "Description")

Systemctl = Callable[..., "subprocess.CompletedProcess[str]"]


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=60, check=False)


def show(unit: str, systemctl: Systemctl = _systemctl) -> dict[str, str]:
    """``systemctl show`` of the unit (a unit systemd no longer knows reads LoadState=not-found)."""
    out = systemctl("show", f"{unit}.service", *(f"--property={p}" for p in SHOW)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def tail(path: Path | None, size: int = 65536) -> str:
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def last_line(text: str, prefix: str = "") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip().startswith(prefix)]
    return lines[-1] if lines else ""


def signame(status: str) -> str:
    """SIGKILL from systemd's "KILL" ($EXIT_STATUS) or "9" (ExecMainStatus)."""
    s = status.strip()
    if s.isdigit():
        try:
            return signal.Signals(int(s)).name
        except ValueError:
            return f"signal {s}"
    s = s.upper()
    return s if s.startswith("SIG") else f"SIG{s}"


def why(result: str, code: str, status: str, *, budget_min: float, grace_s: float, out: str = "",
        err: str = "") -> tuple[int | None, str]:
    """How the tune ended: its exit status (None when a signal ended it) and one line saying why ('' for what the
    deploy goes on from: 0, a choice or the reused one; 3, unproven). ``result``, ``code`` and ``status`` are
    systemd's ($SERVICE_RESULT, $EXIT_CODE and $EXIT_STATUS, or ExecMainCode and ExecMainStatus as numbers); ``out``
    and ``err`` the ends of the tune's stdout and stderr."""
    code = CLD.get(code, code)
    rc = int(status) if code == "exited" and status.strip().isdigit() else None
    if result == "timeout":
        return rc, (f"specops tune ran past its budget of {budget_min:g} min + {grace_s:.0f} s grace: stopped by "
                    "systemd (its whole control group, probe servers included)")
    if result == "oom-kill":
        return rc, ("specops tune was killed for memory (OOM): the kernel's OOM killer ended it or one of its probe "
                    "servers, and systemd stopped the rest")
    if code in ("killed", "dumped"):
        return None, f"specops tune was killed by signal {signame(status)}" + (
            " (core dumped)" if code == "dumped" else "")
    if rc in (0, UNPROVEN):
        return rc, ""
    if rc == STOPPED:
        line = last_line(out, "stopped: ")
        return rc, f"specops tune {line}" if line else "specops tune stopped itself (its deploy was gone)"
    if rc == 130:
        return rc, "specops tune was interrupted (SIGINT: exit 130)"
    if rc == 2:  # its own refusal, one line on stderr ("specops tune: ...")
        return rc, last_line(err) or "specops tune refused (exit 2) and said nothing on stderr"
    if rc is None:
        return None, f"specops tune ended without an exit status (systemd: {result or '?'}, {code or '?'} {status})"
    return rc, f"specops tune exited with {rc}: {last_line(err) or 'nothing on stderr'}"


# -- exit (ExecStopPost)

def record_exit(exit_file: Path, log: Path | None, err: Path | None, budget_min: float, grace_s: float,
                env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    result, code, status = env.get("SERVICE_RESULT", ""), env.get("EXIT_CODE", ""), env.get("EXIT_STATUS", "")
    rc, line = why(result, code, status, budget_min=budget_min, grace_s=grace_s, out=tail(log), err=tail(err))
    rec = {"result": result, "code": code, "status": status, "rc": rc, "why": line,
           "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    exit_file.parent.mkdir(parents=True, exist_ok=True)
    write_whole(exit_file, json.dumps(rec) + "\n")
    return rec


# -- poll

def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def _journal(unit: str) -> str:
    try:
        return subprocess.run(["journalctl", "-u", f"{unit}.service", "-o", "cat", "--no-pager", "-n", "200"],
                              capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


_EXITED = re.compile(r"Main process exited, code=(\w+), status=(\d+)")
_PREFIX = re.compile(r"^[\w@.:-]+\.service: ")  # systemd's "UNIT.service: " before a line about the unit
_RESULT = re.compile(r"Failed with result '([\w-]+)'")


def from_journal(text: str) -> tuple[str, str, str, str]:
    """How the unit's last run ended, as systemd logged it (its lines since the last "Starting"/"Started"): (result,
    code, status, what its ExecStopPost met: '' or systemd's line about it). For a unit already collected
    (--collect) whose ExecStopPost wrote no record: the kernel's OOM killer, a stop-post killed at its timeout.
    systemd logs no "Main process exited" for an exit 0; a run that ended without one exited 0. A timeout of the
    stop-post is the ExecStopPost's, not the tune's (which would read "runtime time limit")."""
    lines = [_PREFIX.sub("", ln.strip()) for ln in text.splitlines()]
    start = max((i for i, ln in enumerate(lines) if ln.startswith(("Starting ", "Started "))), default=None)
    if start is None:
        return "", "", "", ""
    result = code = status = post = ""
    ended = runtime = False
    for ln in lines[start + 1:]:
        if m := _EXITED.search(ln):
            code, status = m.group(1), m.group(2)
        if m := _RESULT.search(ln):
            result, ended = m.group(1), True
        elif "Deactivated successfully" in ln:
            result, ended = result or "success", True
        runtime = runtime or "runtime time limit" in ln
        if "Control process" in ln or "stop-post" in ln:
            post = post or ln
    if ended and not code and not runtime:
        code, status = "exited", "0"
    if result == "timeout" and post and not runtime:  # the ExecStopPost timed out, not the tune
        result = "success" if (code, status) == ("exited", "0") else "exit-code" if code == "exited" else "signal"
    return result, code, status, post


def poll(unit: str, heartbeat: Path, progress: Path | None, exit_file: Path, log: Path | None, err: Path | None,
         wait_s: float, budget_min: float = 0.0, grace_s: float = 0.0, *, systemctl: Systemctl = _systemctl,
         journal: Callable[[str], str] = _journal, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    touch(heartbeat)
    now = clock()
    deadline, ended_at = now + wait_s, None
    while True:
        rec = _read_json(exit_file)
        state = show(unit, systemctl) if rec is None else {}
        if rec is None and state.get("ActiveState", "inactive") not in ACTIVE:
            ended_at = now if ended_at is None else ended_at
            if now - ended_at >= SETTLE_S:  # ended, and its ExecStopPost wrote nothing: what systemd still knows
                rc, line = why(state.get("Result", ""), state.get("ExecMainCode", ""),
                               state.get("ExecMainStatus", ""), budget_min=budget_min, grace_s=grace_s,
                               out=tail(log), err=tail(err))
                result = state.get("Result", "")
                if state.get("LoadState") == "not-found" or (rc is None and not line):
                    rc, line, result = _gone(unit, exit_file, journal(unit), err, budget_min, grace_s, log)
                rec = {"result": result, "rc": rc, "why": line}
        if rec is not None:
            out = tail(log, 1 << 20)
            return {"done": True, "rc": rec.get("rc"), "why": rec.get("why") or "", "result": rec.get("result"),
                    "stdout": out, "stdout_lines": out.splitlines(),
                    "changed": "\nreused: " not in "\n" + out, "progress": tail(progress, 4096).strip()}
        if now >= deadline:
            return {"done": False, "state": f"{state.get('ActiveState', '?')} ({state.get('SubState', '?')})",
                    "progress": tail(progress, 4096).strip()}
        sleep(1.0)
        now = clock()


def _gone(unit: str, exit_file: Path, journal: str, err: Path | None, budget_min: float, grace_s: float,
          log: Path | None) -> tuple[int | None, str, str]:
    """A unit systemd no longer knows (collected) whose ExecStopPost left no record: how it ended, from the journal
    (:func:`from_journal`); the tune's own exit 0 or 3 stands (its result is written: the deploy goes on), anything
    else is said with systemd's words. Nothing in the journal either: said so, with the tune's last error line."""
    result, code, status, post = from_journal(journal)
    rc, line = why(result, code, status, budget_min=budget_min, grace_s=grace_s, out=tail(log), err=tail(err))
    if code and rc in (0, UNPROVEN):
        return rc, "", result
    if code or result:
        return rc, line + (f" (its exit record was not written: {post})" if post else ""), result
    said = last_line(tail(err))
    return None, (f"specops tune's unit {unit} ended without saying how ({exit_file} was not written, and the "
                  f"journal has no end for it){': ' + said if said else ''}"), result


# -- sweep

@dataclass
class Proc:
    pid: int
    ppid: int
    exe: str
    argv: list[str]
    cgroup: str

    def what(self) -> str:
        return f"pid {self.pid} {' '.join(self.argv)[:120]}"


def cgroup_path(text: str) -> str:
    """The process's control group: the unified hierarchy's (0::PATH), else systemd's own v1 one."""
    unified = legacy = ""
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and not parts[1]:
            unified = parts[2]
        elif "name=systemd" in parts[1].split(","):
            legacy = parts[2]
    return unified or legacy


def service_of(cgroup: str) -> str:
    """The systemd service whose control group holds a process ('' = none: a session, a scope, the root)."""
    for part in reversed(cgroup.strip("/").split("/")):
        if part.endswith(".service"):
            return part
    return ""


def processes(root: Path = Path("/proc")) -> list[Proc]:
    out = []
    for d in sorted((d for d in root.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)):
        try:
            stat = (d / "stat").read_text(errors="replace")
            argv = [a for a in (d / "cmdline").read_bytes().decode(errors="replace").split("\0") if a]
            cgroup = cgroup_path((d / "cgroup").read_text(errors="replace"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
        try:
            exe = os.readlink(d / "exe")
        except OSError:
            exe = ""
        fields = stat[stat.rfind(")") + 2:].split()
        state, ppid = (fields[0], int(fields[1])) if len(fields) > 1 else ("?", 0)
        if state == "Z":
            continue
        out.append(Proc(int(d.name), ppid, exe.removesuffix(" (deleted)"), argv, cgroup))
    return out


def is_deploy_tune(p: Proc, out: str) -> bool:
    """``specops tune ... --out OUT``: a tune writing the host's record (python -m specops tune, or the specops
    script)."""
    a = p.argv
    if "tune" not in a or not any(Path(x).name == "specops" or x == "specops" for x in a[:a.index("tune")]):
        return False
    return any((x == "--out" and i + 1 < len(a) and a[i + 1] == out) or x == f"--out={out}" for i, x in enumerate(a))


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path.startswith(r.rstrip("/") + "/") for r in roots if r)


def is_leftover_server(p: Proc, roots: Sequence[str], unit: str, parents: set[int],
                       main_pid: Callable[[str], int]) -> bool:
    """A llama-server or llama-bench of the install root that nothing runs any more: still in the tune's own unit, a
    child of a leftover tune, or an orphan (under PID 1) that is not the main process of the service whose control
    group holds it. Over SSH without logind, what Ansible started stays in ssh.service's group: a probe server whose
    tune died is an orphan there. A service's own server (the role's units, an operator's) is its main process and is
    not touched, nor one that a live shell or program still runs."""
    if Path(p.exe).name not in SERVERS or not _under(p.exe, roots):
        return False
    service = service_of(p.cgroup)
    if service == f"{unit}.service" or p.ppid in parents:
        return True
    return p.ppid == 1 and not (service and main_pid(service) == p.pid)


def _alive(pid: int, root: Path) -> bool:
    try:
        stat = (root / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[:1] != ["Z"]


def terminate(pids: Sequence[int], *, root: Path = Path("/proc"), kill: Callable[[int, int], None] = os.kill,
              wait_s: float = TERM_WAIT_S, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> None:
    """SIGTERM, and SIGKILL to what is still there after ``wait_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [pid for pid in pids if _alive(pid, root)]
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, sig)
        deadline = clock() + wait_s
        while left and clock() < deadline:
            sleep(0.2)
            left = [pid for pid in left if _alive(pid, root)]
        if not left:
            return


def _mine() -> set[int]:
    """This process and its ancestors (never swept)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat[stat.rfind(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def sweep(unit: str, install_root: str, out: str, heartbeat: Path | None, clear: Sequence[Path] = (), *,
          root: Path = Path("/proc"), systemctl: Systemctl = _systemctl,
          kill: Callable[[int, int], None] = os.kill, wait_s: float = TERM_WAIT_S,
          sleep: Callable[[float], None] = time.sleep, mine: set[int] | None = None) -> dict[str, Any]:
    mine = _mine() if mine is None else mine
    state = show(unit, systemctl)
    stopped_unit = None
    if state.get("ActiveState", "inactive") in ACTIVE:
        systemctl("stop", f"{unit}.service")
        stopped_unit = {"unit": unit, "started": state.get("ActiveEnterTimestamp") or "?",
                        "pid": state.get("MainPID"), "description": state.get("Description", "")}
    if state.get("LoadState", "not-found") != "not-found":
        systemctl("reset-failed", f"{unit}.service")  # a failed unit kept loaded would refuse the next start
    tunes = [p for p in processes(root) if p.pid not in mine and is_deploy_tune(p, out)]
    terminate([p.pid for p in tunes], root=root, kill=kill, wait_s=wait_s, sleep=sleep)
    roots = sorted({install_root, os.path.realpath(install_root)})
    mains: dict[str, int] = {}

    def main_pid(service: str) -> int:
        if service not in mains:
            value = show(service.removesuffix(".service"), systemctl).get("MainPID", "0")
            mains[service] = int(value) if value.isdigit() else 0
        return mains[service]

    servers = [p for p in processes(root)
               if p.pid not in mine and is_leftover_server(p, roots, unit, {t.pid for t in tunes}, main_pid)]
    terminate([p.pid for p in servers], root=root, kill=kill, wait_s=wait_s, sleep=sleep)
    for path in clear:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    if heartbeat is not None:
        touch(heartbeat)
    parts = ([f"a leftover tune ({unit}, started {stopped_unit['started']})"] if stopped_unit else []) + (
        [f"{len(tunes)} `specops tune` outside its unit (pid {', '.join(str(p.pid) for p in tunes)})"]
        if tunes else []) + (
        [f"{len(servers)} probe server(s) (pid {', '.join(str(p.pid) for p in servers)})"] if servers else [])
    message = ("stopped " + " and ".join(parts) + " from an interrupted deploy") if parts else ""
    return {"message": message, "unit": stopped_unit, "tunes": [p.what() for p in tunes],
            "servers": [p.what() for p in servers]}


# -- the command line

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specops.tune.unit", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("sweep")
    sw.add_argument("--unit", required=True)
    sw.add_argument("--install-root", required=True)
    sw.add_argument("--out", required=True, help="the host's tune record (specops tune --out)")
    sw.add_argument("--heartbeat", type=Path)
    sw.add_argument("--clear", type=Path, action="append", default=[], help="a file of the last run to remove")
    po = sub.add_parser("poll")
    po.add_argument("--unit", required=True)
    po.add_argument("--heartbeat", type=Path, required=True)
    po.add_argument("--progress", type=Path)
    po.add_argument("--exit-file", type=Path, required=True)
    po.add_argument("--log", type=Path)
    po.add_argument("--err", type=Path)
    po.add_argument("--wait", type=float, default=15.0, help="seconds to wait for the unit to end (default 15)")
    ex = sub.add_parser("exit")
    ex.add_argument("--exit-file", type=Path, required=True)
    ex.add_argument("--log", type=Path)
    ex.add_argument("--err", type=Path)
    for q in (po, ex):  # for the budget's line
        q.add_argument("--budget-min", type=float, default=0.0)
        q.add_argument("--grace-s", type=float, default=0.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "exit":
        try:
            record_exit(args.exit_file, args.log, args.err, args.budget_min, args.grace_s)
        except OSError as exc:  # never fails the unit's stop: poll says the record is missing
            print(f"specops.tune.unit exit: {exc}", file=sys.stderr)
        return 0
    if args.cmd == "sweep":
        res = sweep(args.unit, args.install_root, args.out, args.heartbeat, args.clear)
    else:
        res = poll(args.unit, args.heartbeat, args.progress, args.exit_file, args.log, args.err, args.wait,
                   args.budget_min, args.grace_s)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
