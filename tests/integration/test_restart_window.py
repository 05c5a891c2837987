"""No started answer is cut by a restart, on the lab host's real llama-server.

The hold after an idle look (issue 51 item 2: the drain's way where it cannot hold from its first moment): a
request begun on purpose in the window between the drain's last look at idle slots and its hold is answered whole,
and one that arrives during the hold is answered whole or refused (no answer at all), never cut. The window is
opened on purpose with the drain's ``--pause-after-look`` (it says on stderr when the look found idle slots and when
the hold began): the first client starts right after the look, the second once the hold began. Each way of holding
is tried: socket filters on llama-server's sockets and the frozen look, both run through nsenter (outside the
container's seccomp filter), and ``--hold filters`` run over SSH as the deploy ran it before issue 63 (under
systemd-nspawn's seccomp filter pidfd_getfd is refused, so that one holds with the frozen look, and says why).

A busy restart (issue 63 item 4): 4 clients back to back at ``parallel 4`` (the slots are never all idle), a deploy
that changes the unit: the drain holds new requests from its first moment, waits only for those in flight, and
cuts none.

Each case prints one row (run with -s): case | first (in the gap) | second (in the hold) | held | held s.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import threading
import time

import pytest

from tests import lab
from tests.integration.test_deploy import UNIT, deploy, main_pid
from tests.lab import Stream, ship_host_scripts

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

SCRIPTS = "/run/specops-drain-window.pyz"   # the drain with the modules it shares, as the deploy ships them
ROWS: list[str] = []

# one streamed completion (lab.CLIENT's request): whether it ended whole, the pieces it got, a refusal's status
ONE = r"""
import json, sys, time, urllib.error, urllib.request
t0, pieces, done, status, error = time.time(), 0, False, None, None
body = json.dumps({"prompt": "Write a long story about a lighthouse keeper and the sea:", "n_predict": int(sys.argv[1]),
                   "stream": True, "temperature": 0, "cache_prompt": False, "ignore_eos": True}).encode()
try:
    req = urllib.request.Request("http://127.0.0.1:8080/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        for line in resp:
            if line.startswith(b"data: "):
                pieces += 1
                done = done or bool(json.loads(line[6:]).get("stop"))
except Exception as exc:
    status = exc.code if isinstance(exc, urllib.error.HTTPError) else None
    error = repr(exc)[:200]
print(json.dumps({"ok": done, "pieces": pieces, "status": status, "error": error, "start": t0, "end": time.time()}))
"""

HEALTHY = """
import sys, time, urllib.request
deadline = time.monotonic() + 120
while True:
    try:
        if urllib.request.urlopen("http://127.0.0.1:8080/health", timeout=5).status == 200:
            break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("the service did not answer /health in 120 s")
    time.sleep(0.2)
"""


BUSY = ("-e", "llama_server_speed_gate=off", "-e", "llama_server_parallel=4")


@pytest.fixture(scope="module")
def served(labhost, llama_build) -> None:
    """The service at ``parallel 4`` (what the busy restart needs; a drain holds the same way whatever the slots), so
    that the busy restart's deploy is the module's only other one."""
    run = deploy(labhost, *BUSY)
    assert run.rc == 0, run.output[-6000:]
    ship_host_scripts(labhost, SCRIPTS)


class Client:
    """One streamed request from inside the lab host, started now; ``record()`` waits for its one-line record."""

    def __init__(self, labhost, tokens: int) -> None:
        self.proc = subprocess.Popen(labhost.host.nsenter_argv(["python3", "-c", ONE, str(tokens)]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def record(self) -> dict:
        out, _ = self.proc.communicate(timeout=360)
        return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize(("way", "hold"), [("nsenter", "filters"), ("nsenter", "freeze"), ("ssh", "filters")],
                         ids=["socket filters", "frozen look", "as the deploy ran it"])
def test_a_request_begun_in_the_restart_window_is_answered_whole(served, labhost, way, hold):
    before = main_pid(labhost)
    cmd = ["python3", SCRIPTS, "drain", "--unit", f"{UNIT}.service", "--url", "http://127.0.0.1:8080",
           "--timeout", "120", "--grace", "10", "--hold", hold, "--pause-after-look", "15"]
    argv = labhost.host.nsenter_argv(cmd) if way == "nsenter" else labhost.host.ssh_argv([shlex.join(cmd)])
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = second = None
    said: list[str] = []
    stdout: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda out=proc.stdout: stdout.append(out.read()), daemon=True)
    reader.start()
    for line in proc.stderr:
        said.append(line)
        if line.startswith("drain: slots idle") and first is None:
            first = Client(labhost, 48)        # in the gap: after the idle look, before the hold
        elif line.startswith("drain: held") and second is None:
            time.sleep(0.5)                    # the hold has begun (and the first is being answered)
            second = Client(labhost, 16)
    rc = proc.wait(timeout=300)
    reader.join(10)
    assert rc == 0, "".join(said)[-3000:] + "".join(stdout)[-3000:]
    assert first is not None and second is not None, "".join(said)
    out = json.loads("".join(stdout).strip().splitlines()[-1])
    a, b = first.record(), second.record()
    ROWS.append(f"| {way}, --hold {hold} | {a['pieces']} pieces, {'whole' if a['ok'] else 'NOT WHOLE'} | "
                f"{'whole' if b['ok'] else 'refused' if b['pieces'] == 0 else 'CUT'} ({b['status'] or b['error']}) | "
                f"{out.get('held')} {out.get('no_filters', '')} | {out.get('held_s')} |")
    print("\nWINDOW " + ROWS[-1])
    # begun in the window (a client started under the suite's load can reach the new server instead: then it is
    # refused, 503 while loading): answered whole or refused, never cut after its first piece
    assert a["ok"] or a["pieces"] == 0, (a, out)
    assert b["ok"] or b["pieces"] == 0, (b, out)                  # in the hold: whole or refused, never cut
    assert out["drained"] and out["stop_hung"] is False, out
    if out.get("held") == "socket filters":  # the frozen look counts idle kept-alive connections too
        assert out["open_at_signal"] == 0, out
    if way == "nsenter":
        assert out["held"] == {"filters": "socket filters", "freeze": "frozen look"}[hold], out
    assert out["held"] in ("socket filters", "frozen look"), out
    assert out["held_s"] >= 5, out                                # the pause, then the first answer's end
    labhost.run(["python3", "-c", HEALTHY], timeout=150)          # the drain restarted it: it serves again
    assert main_pid(labhost) != before


@pytest.fixture
def migrate_req(labhost):
    """net.ipv4.tcp_migrate_req on in the lab host's network namespace, as it was afterwards. On a host the drain
    (root) turns it on itself for the moment it hands its queue over; systemd-nspawn without --private-network mounts
    /proc/sys read-only in the container, so the host's root turns it on from outside here (without it the drain
    answers the requests it would hold 503 with Retry-After: tests/unit/test_drain_busy.py)."""
    path = "/proc/sys/net/ipv4/tcp_migrate_req"
    netns = ["nsenter", f"--net=/run/netns/{labhost.host.state().netns}", "sh", "-c"]
    before = subprocess.run([*netns, f"cat {path}"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*netns, f"echo 1 > {path}"], check=True)
    yield
    subprocess.run([*netns, f"echo {before} > {path}"], check=False)


def drain_report(run) -> dict:
    """The drain's JSON line, from a deploy run with -v (the script task's stdout, a YAML block)."""
    found = re.findall(r'^\s*(\{"began": .*\})\s*$', run.output, re.M)
    assert found, run.output[-4000:]
    return json.loads(found[-1])


def test_a_busy_restart_cuts_nothing(served, labhost, migrate_req):
    """Issue 63 item 4: four clients streaming back to back against ``parallel 4``, a deploy that changes the unit
    (the draft length): the drain holds new requests from its first moment (a listener of its own beside
    llama-server's), so it waits only for the requests in flight -- no longer than the longest of them -- and cuts
    none; what it held goes to the new server once it answers /health: no client sees a 503 (its loading window was
    held too), a refused connection or a cut answer."""
    before, unit = main_pid(labhost), labhost.run(["systemctl", "cat", UNIT]).stdout
    assert "--parallel 4" in unit, unit              # the module's service (served), before any client
    with contextlib.ExitStack() as stack:
        # the clients begin with the play that installs, drains and restarts (dozens of tasks before its drain): with
        # them from the start, four clients back to back took a core of the lab's two from the checks and the
        # preflight too
        clients = [Stream(labhost, tokens=48, name=f"busy-{i}", pause=0) for i in range(4)]
        run = lab.clients_from(lab.SERVICE_PLAY, lambda on_line: deploy(
            labhost, *BUSY, "-e", "llama_server_draft_n_max=3", "-v", on_line=on_line), clients, stack)
        after = time.time()
        for client in clients:                       # each is answered by the new server
            client.wait_ok(1, after=after)
    assert run.rc == 0, run.output[-6000:]
    assert main_pid(labhost) != before and labhost.run(["systemctl", "cat", UNIT]).stdout != unit
    out = drain_report(run)
    records = [r for c in clients for r in c.records]
    cut = [r for c in clients for r in c.cut]
    failed = [r for r in records if not r["ok"] and r["end"] >= out["began"]]
    in_flight = [r for r in records if r["start"] <= out["began"] < r["end"] and r["ok"]]
    line = " ".join(run.text.split("Drain result", 1)[-1].split("msg:", 1)[-1].split()[:90])
    print(f"\nBUSY | {len(records)} requests, {len(cut)} cut, {len(failed)} failed during the drain | "
          f"waited {out.get('waited_s')} s, longest in flight "
          f"{max((r['end'] - r['start'] for r in in_flight), default=0):.1f} s | {out.get('requests')} |\n{line}")
    assert out["held"] == "listener" and out["requests"]["cut"] == 0 and out["drained"], out
    assert cut == [], cut
    assert failed == [], (failed[:4], out)          # nothing refused, nothing cut: all held, then answered
    assert out["requests"]["held"] > 0 and out["released"] == "handed to the new server", out
    # the drain waited only for the requests in flight when it began: no longer than the longest of them
    assert in_flight and out["waited_s"] <= max(r["end"] - r["start"] for r in in_flight) + 1.0, (out, in_flight)
    assert "with no request cut" in run.text and "cut 0;" in run.text, line


def test_restart_window_table(served):
    """The rows collected above, for the note."""
    print("\n| case | first (begun in the gap) | second (during the hold) | held | held s |")
    for line in ROWS:
        print(line)
    assert ROWS
