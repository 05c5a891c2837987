"""A fleet (issue 15): three throwaway systemd hosts serving SmolLM2 behind HAProxy (roles/loadbalancer, on the
first host), deployed by deploy.yml as a rolling deploy while two clients send requests *through the load
balancer* the whole time, one streaming its answers, one not:

1. a rolling change of a setting: every host leaves the pool, restarts and comes back proven, one at a time, and
   not one request fails or is cut;
3. a bad rollout (a setting that fails its proof): the first host is rolled back to its known-good unit and is
   back in the pool, the other two are untouched, the play fails naming the host and the cause, no request fails;
and a run with nothing changed drains and restarts nothing.
4. a fleet tunes once per kind of host (issue 63 item 1; llama_server_tune_share: kind, the controller's store in a
   directory of the test's own): the rolling deploy tunes the first host, the other two reuse its record (it says so,
   from which host and why), each host's own speed gate measures its unit, every host serves; then a shared choice
   that one host's gate finds loses there (a planted record, a gate minimum no profile reaches) makes that host tune
   for itself in the same deploy, saying why, while the others keep theirs.
2. (scripts/test-upgrade, which builds a second, older llama.cpp first and sets SPECOPS_LEGACY_ROOT: the fleet
   starts on that build) a rolling upgrade to the pinned build, the units' flags changing dialect on the way
   (--draft-max → --spec-draft-n-max, --spec-type draft-simple): no request fails, every host proven speculating
   on the new build. Without SPECOPS_LEGACY_ROOT (the default suite) it is skipped.

The hosts are created with ``peers`` (lab/specops_lab/labhost.py): each reaches the others, so HAProxy on the first
one checks and forwards to all three, which listen on their own address with an API key. A watcher samples
HAProxy's view of the pool every 0.2 s: how long each host was out, and whether two ever were at once.
Each scenario prints one row for the note (run with -s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from specops.tune import record
from specops_lab.labhost import LabHost
from tests import lab
from tests.integration.test_deploy import PROFILE, UNIT
from tests.integration.test_tune_deploy import TUNE, untuned_profile
from tests.lab import Stream
from tests.labhost_fixture import Lab, _env_flag, bring_up

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

NAMES = ["specops-fleet-1", "specops-fleet-2", "specops-fleet-3"]
LB_PORT = 8000
ADMIN = "/run/haproxy/admin.sock"
KEY_FILE = "/etc/specops-fleet/api-key"
KEY = "fleet-test-key-4c1e0b9a"
URL = f"http://127.0.0.1:{LB_PORT}/completion"
AUTH = {"Authorization": f"Bearer {KEY}"}
LEGACY_ROOT = os.environ.get("SPECOPS_LEGACY_ROOT", "")
LEGACY_BUILD = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "legacy-build.yml"

# HAProxy's view of every server, every 0.2 s, one JSON line per sample (from inside the load balancer's host)
WATCH = r"""
import csv, io, json, os, socket, sys, time
admin, backend, stop = sys.argv[1:4]
while not os.path.exists(stop):
    try:
        s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(admin); s.sendall(b"show stat\n")
        text = b"".join(iter(lambda: s.recv(65536), b"")).decode(); s.close()
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        status = {r["svname"]: r["status"] for r in rows
                  if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")}
        print(json.dumps({"t": time.time(), "status": status}), flush=True)
    except OSError as exc:
        print(json.dumps({"t": time.time(), "error": str(exc)}), flush=True)
    time.sleep(0.2)
"""


class PoolWatch:
    """Samples HAProxy's status of every server while a deploy runs (from inside the load balancer's host)."""

    def __init__(self, lb: Lab) -> None:
        self.lb, self.stop = lb, "/run/specops-fleet-watch.stop"
        self.samples: list[dict] = []

    def __enter__(self) -> PoolWatch:
        self.lb.run(["rm", "-f", self.stop])
        self.proc = subprocess.Popen(self.lb.host.nsenter_argv(["python3", "-c", WATCH, ADMIN, "llama_servers",
                                                                self.stop]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.samples.append(json.loads(line))
            except ValueError:
                self.samples.append({"t": time.time(), "error": line.strip()})

    def __exit__(self, *exc: object) -> None:
        self.lb.run(["touch", self.stop])
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)

    def out(self, sample: dict) -> set[str]:
        """The servers out of the pool in a sample: anything but UP (DRAIN, MAINT, DOWN, DOWN 1/2 coming back)."""
        return {name for name, status in sample["status"].items() if not status.startswith("UP")}

    def longest_out(self) -> dict[str, float]:
        """Per server, the longest time it was out of the pool (seconds, between samples)."""
        longest: dict[str, float] = {}
        since: dict[str, float] = {}
        for sample in [s for s in self.samples if "status" in s]:
            now_out = self.out(sample)
            for name in sample["status"]:
                if name in now_out:
                    since.setdefault(name, sample["t"])
                elif name in since:
                    longest[name] = max(longest.get(name, 0.0), sample["t"] - since.pop(name))
        return {name: round(s, 1) for name, s in longest.items()}

    def overlaps(self) -> list[dict]:
        """Samples with more than one server out of the pool at once."""
        return [s for s in self.samples if "status" in s and len(self.out(s)) > 1]


@pytest.fixture(scope="module")
def fleet(llama_build) -> Iterator[list[Lab]]:
    keep = _env_flag("SPECOPS_LAB_KEEP")
    labs: list[Lab] = []
    try:
        for name in NAMES:
            host = LabHost(name)
            reuse = keep and host.exists() and host.state().peers
            labs.append(bring_up(name, fresh=not reuse, peers=True))
        for host in labs:
            host.run(["sh", "-c", f"umask 077; mkdir -p {os.path.dirname(KEY_FILE)}; "
                                  f"printf '%s\\n' {KEY} > {KEY_FILE}"])
        yield labs
    finally:
        if not keep:
            for host in labs:
                host.host.destroy()


@pytest.fixture(scope="module")
def inventory(fleet, tmp_path_factory) -> Path:
    """The three hosts as llama_servers (each listening on its own address, with an API key), the first one also
    the load balancer (listening on its loopback, where the clients run)."""
    servers = {}
    for host in fleet:
        hostvars = yaml.safe_load(host.inventory.read_text())["all"]["children"]["llama_servers"]["hosts"][host.name]
        servers[host.name] = {**hostvars, "llama_server_host": host.ip, "llama_server_api_key_file": KEY_FILE}
    path = tmp_path_factory.mktemp("fleet") / "fleet.yml"
    path.write_text(json.dumps({"all": {"children": {
        "llama_servers": {"hosts": servers},
        "loadbalancers": {"hosts": {fleet[0].name: {"loadbalancer_bind_address": "127.0.0.1",
                                                    "loadbalancer_port": LB_PORT}}}}}}))
    return path


def fleet_deploy(inventory: Path, *extra: str, legacy: bool = False) -> lab.PlaybookRun:
    build = (["-e", f"llama_cpp_install_root={LEGACY_ROOT}", "-e", f"@{LEGACY_BUILD}"] if legacy
             else ["-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}"])
    # three servers on this 2-core machine: one thread each (two each spin against each other: 2 s a token), and
    # no speed gate (it measures each host while the other two serve the clients on the same cores; the gate's own
    # tests are test_deploy's and test_live_host's)
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(inventory),
                                "-e", f"@{PROFILE}", "-e", "llama_server_threads=1",
                                "-e", "llama_server_draft_threads=1", "-e", "llama_server_speed_gate=off",
                                *build, *extra)


def main_pid(host: Lab) -> int:
    return int(host.run(["systemctl", "show", "-p", "MainPID", "--value", UNIT]).stdout.strip())


def unit_text(host: Lab) -> str:
    return host.run(["cat", f"/etc/systemd/system/{UNIT}.service"]).stdout


def pool(lb: Lab) -> dict[str, str]:
    code = ("import socket,csv,io,json; s=socket.socket(socket.AF_UNIX); s.connect('" + ADMIN + "'); "
            "s.sendall(b'show stat\\n'); t=b''.join(iter(lambda: s.recv(65536), b'')).decode(); "
            "print(json.dumps({r['svname']: r['status'] for r in csv.DictReader(io.StringIO(t.lstrip('# '))) "
            "if r['pxname'] == 'llama_servers' and r['svname'] not in ('FRONTEND', 'BACKEND')}))")
    return json.loads(lb.run(["python3", "-c", code]).stdout)


ROWS: list[str] = []


def row(case: str, seconds: float, clients: list[Stream], watch: PoolWatch) -> None:
    requests = sum(len(c.records) for c in clients)
    failed = sum(len(c.failures) for c in clients)
    cut = sum(len(c.cut) for c in clients)
    out = ", ".join(f"{name} {s:.1f} s" for name, s in sorted(watch.longest_out().items())) or "none"
    line = f"| {case} | {seconds:.0f} s | {requests} | {failed} | {cut} | {out} |"
    ROWS.append(line)
    print("\nFLEET " + line)


@pytest.fixture(scope="module")
def serving(fleet, inventory) -> list[Lab]:
    # the first deploy onto fresh hosts: all at once, nobody is using them yet (on the older build when
    # scripts/test-upgrade built one: the upgrade test comes first)
    run = fleet_deploy(inventory, "-e", "specops_serial=3", legacy=bool(LEGACY_ROOT))
    assert run.rc == 0, run.output[-6000:]
    lb = fleet[0]
    lb.wait_for(lambda: set(pool(lb).values()) == {"UP"}, timeout=60, what="every server UP in HAProxy")
    return fleet


@dataclass
class UnderLoad:
    run: lab.PlaybookRun
    streamed: Stream
    plain: Stream
    watch: PoolWatch

    @property
    def failures(self) -> tuple[list[dict], list[dict]]:
        return self.streamed.failures, self.plain.failures


def deploy_under_load(lb: Lab, inventory: Path, case: str, *extra: str) -> UnderLoad:
    """fleet_deploy(*extra) while two clients (streamed, not) request through the load balancer and the pool is
    watched; both clients answer again after it; the scenario's row for the note. Both rest between requests
    (the streamed one 1.5 s, the other lab.PACED): requests keep arriving while servers leave and rejoin the pool,
    answers are in flight across it, and the clients do not keep the lab's two cores from the deploy under test
    (with both back to back the three servers used ~170 s of CPU per suite run; paced with 48-token answers,
    ~120 s: answers are 32 tokens, a few seconds each on these cores, in flight across every drain)."""
    streamed = Stream(lb, tokens=32, url=URL, headers=AUTH, name="fleet-stream", pause=1.5)
    plain = Stream(lb, tokens=32, url=URL, headers=AUTH, stream=False, name="fleet-plain", pause=lab.PACED)
    with streamed, plain, PoolWatch(lb) as watch:
        t0 = time.monotonic()
        run = fleet_deploy(inventory, *extra)
        seconds = time.monotonic() - t0
        after = time.time()
        streamed.wait_ok(1, after=after)
        plain.wait_ok(1, after=after)
    row(case, seconds, [streamed, plain], watch)
    return UnderLoad(run, streamed, plain, watch)


def running_binary(host: Lab) -> str:
    pid = main_pid(host)
    return host.run(["readlink", f"/proc/{pid}/exe"]).stdout.strip()


@pytest.mark.skipif(not LEGACY_ROOT, reason="needs the older llama.cpp build: scripts/test-upgrade")
def test_a_rolling_upgrade_from_an_older_llama_cpp_fails_no_request(serving, inventory, llama_build):
    lb = serving[0]
    for host in serving:  # the older build, its own dialect
        unit = unit_text(host)
        assert "--draft-max" in unit and "--spec-type" not in unit, unit
    before = {host.name: running_binary(host) for host in serving}
    old = Path(LEGACY_ROOT) / "current" / "bin" / "llama-server"
    diff = subprocess.run([str(Path(sys.executable).with_name("specops")), "capabilities", "diff", str(old),
                           str(llama_build.server)], capture_output=True, text=True)
    print(f"\nspecops capabilities diff {old} {llama_build.server}:\n{diff.stdout}")
    assert diff.returncode == 0 and "--draft-max" in diff.stdout, diff.stdout + diff.stderr
    load = deploy_under_load(lb, inventory, "rolling upgrade 4227c9be4 → 0c1e57098 (flags change dialect)")
    run, watch = load.run, load.watch
    assert run.rc == 0, run.output[-6000:]
    assert "Upgrade guard - print the changes" in run.text, run.text[-3000:]
    for host in serving:
        unit = unit_text(host)
        assert "--spec-draft-n-max" in unit and "--spec-type draft-simple" in unit and "--draft-max" not in unit
        assert running_binary(host) != before[host.name], host.name
    assert len(re.findall(r"answers and speculates: [1-9]", run.text)) == len(serving), run.text[-3000:]
    assert watch.overlaps() == [], watch.overlaps()[:3]
    assert set(watch.longest_out()) == {host.name for host in serving}, watch.longest_out()
    assert load.failures == ([], []), (load.failures[0][:3], load.failures[1][:3])


def test_a_rolling_change_restarts_one_host_at_a_time_and_fails_no_request(serving, inventory):
    lb = serving[0]
    pids = {host.name: main_pid(host) for host in serving}
    load = deploy_under_load(lb, inventory, "rolling change of a setting (ctx 2048 → 1536), serial 1",
                             "-e", "llama_server_ctx_size=1536")
    run, watch = load.run, load.watch
    assert run.rc == 0, run.output[-6000:]
    for host in serving:
        assert main_pid(host) != pids[host.name], f"{host.name} was not restarted"
        assert "--ctx-size 1536" in unit_text(host)
    assert run.text.count("Drain this server from the load balancer") == len(serving), run.text[-3000:]
    assert len(re.findall(r"answers and speculates: [1-9]", run.text)) == len(serving), run.text[-3000:]
    assert set(watch.longest_out()) == {host.name for host in serving}, watch.longest_out()
    assert watch.overlaps() == [], watch.overlaps()[:3]
    assert load.failures == ([], []), (load.failures[0][:3], load.failures[1][:3])
    assert len(load.streamed.records) >= 3 and len(load.plain.records) >= 3
    assert set(pool(lb).values()) == {"UP"}


def test_a_bad_rollout_stops_at_the_first_host_rolled_back_and_serving(serving, inventory):
    lb, first, rest = serving[0], serving[0], serving[1:]
    units = {host.name: unit_text(host) for host in serving}
    pids = {host.name: main_pid(host) for host in rest}
    load = deploy_under_load(lb, inventory, "bad rollout (--lora of a missing file), stops at the first host",
                             "-e", '{"llama_server_extra_args": ["--lora", "/nonexistent/a.gguf"]}')
    run, watch = load.run, load.watch
    assert run.rc != 0
    assert f"The new llama-server configuration failed on {first.name}" in run.text, run.text[-3000:]
    assert "answers /health again" in run.text
    assert unit_text(first) == units[first.name]  # the known-good unit is back
    assert first.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    for host in rest:  # never reached: same unit, same process
        assert unit_text(host) == units[host.name] and main_pid(host) == pids[host.name], host.name
    assert set(watch.longest_out()) == {first.name}, watch.longest_out()
    assert load.failures == ([], []), (load.failures[0][:3], load.failures[1][:3])
    lb.wait_for(lambda: set(pool(lb).values()) == {"UP"}, timeout=30, what="every server UP in HAProxy")


def test_a_run_with_nothing_changed_drains_and_restarts_nothing(serving, inventory):
    """(All three hosts in one batch: whether a host is drained is decided on the host, whatever the batch; the
    rolling batches of one are the tests above.)"""
    pids = {host.name: main_pid(host) for host in serving}
    run = fleet_deploy(inventory, "-e", "llama_server_ctx_size=1536", "-e", "specops_serial=3")
    assert run.rc == 0, run.output[-4000:]
    assert {host.name: main_pid(host) for host in serving} == pids
    assert "Drain this server from the load balancer" not in run.output


# -- a fleet tunes once per kind of host (issue 63 item 1)

STATE = "/etc/specops"
# the lab's short tune (test_tune_deploy: SmolLM2 drafting for itself, lengths 2 and 4, 3 minutes at most), shared by
# kind, and each host's own speed gate on (warn: it measures and keeps the unit; a minimum every profile reaches, so
# the gate agrees here whatever the tune chose: its disagreement is the next test's)
SHARED = {**TUNE, "llama_server_tune_share": "kind", "llama_server_speed_gate": "warn",
          "llama_server_speed_gate_min_ratio": 0.01}


@pytest.fixture(scope="module")
def tune_profile(tmp_path_factory) -> Path:
    return untuned_profile(tmp_path_factory.mktemp("fleet-tune"))


@pytest.fixture(scope="module")
def share_dir(tmp_path_factory) -> Path:
    """The controller's store of shared tune records (llama_server_tune_share_dir), the module's own: never the
    operator's cache, where an earlier run's record of this kind would be reused."""
    return tmp_path_factory.mktemp("tune-shared")


def tune_deploy(inventory: Path, profile: Path, share_dir: Path, extra: dict) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(inventory),
                                "-e", f"@{profile}", "-e", "llama_server_threads=1",
                                "-e", "llama_server_draft_threads=1",
                                "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps({**SHARED, "llama_server_tune_share_dir": str(share_dir), **extra}))


def host_json(host: Lab, name: str) -> dict:
    return json.loads(host.run(["cat", f"{STATE}/{name}"]).stdout)


def answers(lb: Lab, url: str) -> int:
    """Tokens of one short completion at ``url``, asked from the load balancer's host (it reaches every server)."""
    code = ("import json, sys, urllib.request\n"
            "req = urllib.request.Request(sys.argv[1], data=json.dumps({'prompt': 'Hello', 'n_predict': 8}).encode(),"
            " headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + sys.argv[2]})\n"
            "print(json.loads(urllib.request.urlopen(req, timeout=120).read()).get('tokens_predicted', 0))")
    return int(lb.run(["python3", "-c", code, url, KEY]).stdout.strip() or 0)


def all_served(fleet: list[Lab]) -> None:
    """Every host active, back in the pool, answering on its own address and through the load balancer."""
    lb = fleet[0]
    lb.wait_for(lambda: set(pool(lb).values()) == {"UP"}, timeout=60, what="every server UP in HAProxy")
    for host in fleet:
        assert host.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active", host.name
        assert answers(lb, f"http://{host.ip}:8080/completion") > 0, host.name
    assert answers(lb, URL) > 0


def test_a_fleet_of_one_kind_tunes_once_and_every_host_serves(serving, inventory, tune_profile, share_dir):
    """The rolling deploy (serial 1) tunes the first host; its fresh record is kept on the controller under its kind
    key, naming the host; the other hosts, of the same kind (the same build, model files, CPU, settings; their model
    files written at other times), reuse it: their tune.json says it was shared, from which host and why, under their
    own key; each host's own speed gate measured its unit; every host serves."""
    first, rest = serving[0], serving[1:]
    for host in serving:  # nothing of an earlier run: every host's gate measures, none has a result of its own
        host.run(["rm", "-f", f"{STATE}/tune.json", f"{STATE}/tune-shared.json", f"{STATE}/speed-gate.json"])
    t0 = time.monotonic()
    run = tune_deploy(inventory, tune_profile, share_dir, {})
    seconds = time.monotonic() - t0
    assert run.rc == 0, run.output[-6000:]
    kept = sorted(share_dir.glob("*.json"))
    assert len(kept) == 1, kept  # one kind, one record
    shared = json.loads(kept[0].read_text())
    own = host_json(first, "tune.json")
    assert shared["tuned_on"] == first.name and kept[0].stem == shared["kind"]["key"] == own["kind"]["key"]
    assert "shared" not in own and own["when"] == shared["when"] and own["chosen"] == shared["chosen"]
    # one tune: the others reused its record, said so, and kept it under their own facts
    assert run.text.count(f"tuned on {first.name} and shared with this host: the same kind {own['kind']['key']}") \
        == len(rest), run.text[-6000:]
    assert run.text.count("reused: the result of") == len(rest), run.text[-6000:]
    for host in rest:
        res = host_json(host, "tune.json")
        assert res["shared"]["from"] == first.name and res["shared"]["kind"] == own["kind"]["key"], res.get("shared")
        assert res["when"] == own["when"] and res["chosen"] == own["chosen"] and res["kind"] == own["kind"]
        assert res["key"] == record.key(res["facts"]), host.name  # this host's own key: --reuse keeps it here
    # each host's own speed gate measured its unit, the shared record's hosts included
    for host in serving:
        gate = host_json(host, "speed-gate.json")
        assert gate["verdict"] in ("pays", "loses", "unproven"), (host.name, gate.get("verdict"))
        assert gate["tune"]["reused"] is (host is not first), host.name
        assert (gate["tune"]["shared"] or {}).get("from") == (None if host is first else first.name), host.name
    all_served(serving)
    line = (f"| rolling deploy of {len(serving)} hosts of one kind, tune shared | {seconds:.0f} s | tuned once, on "
            f"{first.name} ({own['elapsed_s']:.0f} s of its {own['budget_s'] / 60:g} min): {own['chosen']}; reused on "
            f"{', '.join(h.name for h in rest)} | every host's gate measured |")
    ROWS.append(line)
    print("\nFLEET " + line)


def test_a_host_whose_gate_disagrees_with_the_shared_choice_tunes_for_itself(serving, inventory, tune_profile,
                                                                             share_dir):
    """The kind's record on the controller is made to choose draft length 4, measured 1.30× (planted: a length that
    pays cannot be produced on this CPU), and the second host loses its own result: it takes the shared record, its
    speed gate (its record gone, and a minimum of 100× nothing reaches) finds the choice loses there, and the deploy
    says so in one line and tunes that host for itself: its own result, not shared further (the controller's record
    is left as it was), its own choice rendered, proven and judged. The first and third hosts keep their results and
    their units (the third's, shared earlier from the same tune, is that record already). All three hosts go in one
    batch (specops_serial 3): the dispute is the second host's own, decided there; the rolling order of a shared tune
    is the test above."""
    first, second, third = serving
    kept = next(share_dir.glob("*.json"))
    planted = json.loads(kept.read_text())
    planted |= {"chosen": "exact-n4", "vars": {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 4}}
    for c in planted["candidates"]:
        if c["name"] == "exact-n4":
            c["measured"] = "1.30× [1.20, 1.40]"
    kept.write_text(json.dumps(planted))
    second.run(["rm", "-f", f"{STATE}/tune.json", f"{STATE}/speed-gate.json"])  # its gate measures what it takes
    others = {host.name: (unit_text(host), host_json(host, "tune.json")["when"]) for host in (first, third)}
    run = tune_deploy(inventory, tune_profile, share_dir, {"llama_server_speed_gate_min_ratio": 100,
                                                           "specops_serial": 3})
    assert run.rc == 0, run.output[-6000:]
    assert f"tune: exact-n4, tuned on {first.name} and shared with the hosts of kind {planted['kind']['key']}, " \
           "loses here (" in run.text, run.text[-6000:]
    assert "the speed gate of this host disagrees, so it tunes for itself now (no shared record)" in run.text
    # only this host tunes for itself (the block's tasks are listed for every host of the batch, skipped by the others)
    assert run.text.count("so it tunes for itself now") == 1, run.text[-6000:]
    res = host_json(second, "tune.json")
    assert "shared" not in res and res["when"] != planted["when"], res.get("shared")  # tuned here, now
    assert json.loads(kept.read_text()) == planted  # a host tuning for itself keeps its result to itself
    gate = host_json(second, "speed-gate.json")
    assert gate["tune"]["shared"] is None and gate["tune"]["reused"] is False and gate["tune"]["when"] == res["when"]
    # their own results stood: the same results, the same units
    assert {host.name: (unit_text(host), host_json(host, "tune.json")["when"]) for host in (first, third)} == others
    all_served(serving)
    print(f"\nFLEET-DISAGREE | {second.name}: the shared exact-n4 lost its gate; tuned for itself: {res['chosen']} "
          f"in {res['elapsed_s']:.0f} s")


def test_fleet_table(serving):
    """The rows collected above, for the note."""
    print("\n| scenario | seconds | requests | failed | cut | longest out of the pool, per host |")
    for line in ROWS:
        print(line)
    assert ROWS
