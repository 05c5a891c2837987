"""The deploy's auto-tune (issue 42, item 4) on the lab host with the real llama-server and llama-bench: deploy.yml
with ``llama_server_tune: auto`` runs ``specops tune`` on the host (specops shipped there by roles/specops_package),
prints its table, renders its choice into the unit (plain decoding as its answer keeps the kind the inventory set,
draft-simple here, for the speed gate), keeps its result in /etc/specops/tune.json and a summary in speed-gate.json;
the next deploy reuses the result without measuring; a result naming a draft length is rendered into the unit; an
explicit draft length wins and the tune does not run; with the kind left open (spec type auto), plain decoding as the
answer is what the unit serves, started once, with nothing for the speed gate to judge.

SmolLM2-135M drafts for itself here (as the suite's deploy profile): on a CPU that cannot pay, so the tune predicts
both lengths below plain decoding and measures nothing (its figures must still be there). The "a choice is rendered"
case plants a result in the host's record (the key untouched, so it is reused): a length that pays cannot be produced
on this CPU, and what is tested there is the deploy's side.

The tune is owned by its deploy (issue 51): it runs in a transient unit (specops-tune.service) that takes its probe
servers with it; a deploy interrupted on the controller (Ctrl-C) stops looking at it and the tune's leash stops it,
writing nothing; a tune killed in the host fails the deploy in one line naming the signal; and a later deploy stops
what an interrupted one left (the unit, a probe server under PID 1) and says so.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from specops.knobs import knob
from specops.tune import record, streams
from specops.tune import settings as tune_settings
from tests import lab
from tests.integration.test_deploy import PROFILE, UNIT, main_pid

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

STATE = "/etc/specops"
# one host, tuned for itself: no record shared through the controller (a record of this kind kept there by an earlier
# run would be reused instead of tuning; the fleet's sharing: test_fleet.py)
TUNE = {"llama_server_tune": "auto", "llama_server_spec_type": "draft-simple", "llama_server_tune_lengths": [2, 4],
        "llama_server_tune_budget": 3, "llama_server_tune_max_tokens": 24, "llama_server_tune_probe_tokens": 24,
        "llama_server_tune_limit_per_workload": 2, "llama_server_speed_gate": "off", "llama_server_tune_share": "off"}


def untuned_profile(where: Path) -> Path:
    """The suite's deploy profile without its explicit draft length and its tune: off (an extra var would outrank
    whatever the tune chose, so the open settings must not be given at all), written in ``where``."""
    data = yaml.safe_load(PROFILE.read_text())
    for name in ("llama_server_draft_n_max", "llama_server_tune"):
        data.pop(name)
    path = where / "profile.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    return untuned_profile(tmp_path_factory.mktemp("tune-profile"))


def deploy(labhost, profile: Path, extra: dict, on_line: Callable[[str], None] | None = None) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                                "-e", f"@{profile}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps({**TUNE, **extra}), on_line=on_line)


def host_json(labhost, name: str) -> dict:
    return json.loads(labhost.run(["cat", f"{STATE}/{name}"]).stdout)


def unit_n_max(labhost) -> int:
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    m = re.search(r"--spec-draft-n-max (\d+)", unit)
    assert m, unit
    return int(m.group(1))


@pytest.fixture(scope="module")
def tuned(labhost, llama_build, profile):
    labhost.run(["rm", "-rf", f"{STATE}/tune.json", f"{STATE}/tune-work"])
    run = deploy(labhost, profile, {})
    assert run.rc == 0, run.output[-6000:]
    return run


def test_the_deploy_tunes_on_the_host_and_renders_its_choice(tuned, labhost):
    res = host_json(labhost, "tune.json")
    assert {c["name"] for c in res["candidates"]} == {"exact-n2", "exact-n4"}, res["candidates"]
    assert all(c["predicted"] is not None for c in res["candidates"]), res["candidates"]
    assert res["key"] and res["facts"]["device"].startswith("cpu: ") and res["facts"]["build"]
    # the table and the choice, in the deploy's output
    assert "| exact-n2 |" in tuned.text and "| exact-n4 |" in tuned.text, tuned.text[-4000:]
    assert re.search(r"tune \([^)]*\): ", tuned.text), tuned.text[-4000:]
    chosen = res["chosen"]
    assert chosen in ("plain", "exact-n2", "exact-n4")
    # the kind is set here (draft-simple, only the length left open): plain decoding as the answer keeps it, at the
    # CPU's default length 2, for the speed gate to judge
    assert unit_n_max(labhost) == (2 if chosen == "plain" else int(chosen.removeprefix("exact-n")))
    if chosen == "plain":
        assert ("explicit settings win: llama_server_spec_type=draft-simple kept: the configured kind is deployed and "
                "the speed gate judges it") in tuned.text, tuned.text[-4000:]
    gate = host_json(labhost, "speed-gate.json")
    assert gate["tune"]["chosen"] == chosen and gate["tune"]["reused"] is False
    assert gate["tune"]["key"] == res["key"] and len(gate["tune"]["candidates"]) == 2
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    print(f"\nTUNED | chosen {chosen} in {res['elapsed_s']:.0f} s: "
          + ", ".join(f"{c['name']} predicted {c['predicted']:.2f}×" for c in res["candidates"]))


def test_the_next_deploy_reuses_the_result(tuned, labhost, profile):
    before = host_json(labhost, "tune.json")
    pid = main_pid(labhost)
    run = deploy(labhost, profile, {})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" in run.text, run.text[-4000:]
    # its own result stands: the check says so and no tune runs (no unit started, no look at it)
    assert re.search(r"TASK \[llama_server_tune : Tune - does this host's own result stand[^\]]*\] \**\s*ok:",
                     run.output)
    assert "Tune - start specops tune in its own unit" not in run.output, run.output[-4000:]
    assert "Tune - run specops tune on the host" not in run.output, run.output[-4000:]
    after = host_json(labhost, "tune.json")
    assert after["key"] == before["key"] and after["when"] == before["when"]
    assert main_pid(labhost) == pid  # nothing changed, nothing restarted
    assert host_json(labhost, "speed-gate.json")["tune"]["reused"] is True


def test_a_result_naming_a_length_is_rendered_into_the_unit(tuned, labhost, profile):
    res = host_json(labhost, "tune.json")
    res["chosen"] = "exact-n4"
    res["vars"] = {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 4}
    for c in res["candidates"]:
        if c["name"] == "exact-n4":
            c["measured"] = "1.30× [1.20, 1.40]"
    labhost.run(["sh", "-c", f"cat > {STATE}/tune.json"], input=json.dumps(res))
    run = deploy(labhost, profile, {})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" in run.text
    assert "exact-n4 (measured 1.30× [1.20, 1.40]): llama_server_draft_n_max=4" in run.text, run.text[-4000:]
    assert unit_n_max(labhost) == 4
    gate = host_json(labhost, "speed-gate.json")
    assert gate["tune"]["applied"] == {"llama_server_draft_n_max": 4} and gate["tune"]["draft_n_max"] == 4


def test_an_explicit_draft_length_wins_and_the_tune_does_not_run(tuned, labhost, profile):
    run = deploy(labhost, profile, {"llama_server_draft_n_max": 3})
    assert run.rc == 0, run.output[-6000:]
    assert ("tune: explicit settings win: llama_server_spec_type=draft-simple and llama_server_draft_n_max=3"
            in run.text), run.text[-4000:]
    assert unit_n_max(labhost) == 3
    assert "tune" not in host_json(labhost, "speed-gate.json")


def test_a_tune_beside_traffic_is_unproven_and_the_last_choice_stays(tuned, labhost, profile):
    """The service serves a client throughout: specops tune (forced by llama_server_tune_refresh) watches its /slots,
    sees the traffic and refuses to choose from those figures (exit 3); the host's record stays as it was and its
    choice (the planted exact-n4 above) is what the unit runs."""
    before = host_json(labhost, "tune.json")
    assert before["chosen"] == "exact-n4"  # left by test_a_result_naming_a_length_is_rendered_into_the_unit
    with contextlib.ExitStack() as stack:
        stream = lab.Stream(labhost, tokens=64)  # from the play that tunes (lab.clients_from): the checks before idle
        run = lab.clients_from(lab.SERVICE_PLAY, lambda on_line: deploy(
            labhost, profile, {"llama_server_tune_refresh": True, "llama_server_speed_gate_idle_timeout": 5},
            on_line=on_line), [stream], stack)
        served = len(stream.records)
    assert run.rc == 0, run.output[-6000:]
    assert "unproven: the service at http://127.0.0.1:8080" in run.text, run.text[-4000:]
    # (the YAML callback doubles the apostrophe of "host's" in a quoted message)
    assert "WARNING: the tune is unproven" in run.output and "last tuned choice stays" in run.text
    after = host_json(labhost, "tune.json")
    assert after["when"] == before["when"] and after["key"] == before["key"]
    assert unit_n_max(labhost) == 4
    assert host_json(labhost, "speed-gate.json")["tune"]["chosen"] == "exact-n4"
    print(f"\nBUSY | the client got {served} answers during the deploy; the tune was unproven, exact-n4 stays")


def test_a_plain_answer_with_the_kind_left_open_is_served_directly(tuned, labhost, profile):
    """llama_server_spec_type auto and the tune's answer plain decoding: the unit serves plain decoding (spec type
    none, no draft model), started once by this deploy (no speculative unit installed, measured by the speed gate and
    replaced), and the speed gate's record says it measured nothing because the tune's answer was plain. The result is
    planted as the host's record for the settings of spec type auto (its key recomputed: the tune's --kinds
    differs), so the deploy reuses it: a plain answer is what this CPU gives, and the test is about the
    deploy's side."""
    res = host_json(labhost, "tune.json")
    res["facts"]["settings"] |= {"ngram": "auto", "no_default": False}  # what spec type auto passes specops tune
    res["facts"]["settings"].pop("kinds", None)  # spec type auto: every kind (--kinds auto, left out of the key)
    res["key"] = record.key(res["facts"])
    res |= {"chosen": "plain", "runner_up": None, "vars": {"llama_server_spec_type": "none"},
            "reason": "no candidate beat plain decoding with a confident interval: planted"}
    labhost.run(["sh", "-c", f"cat > {STATE}/tune.json"], input=json.dumps(res))
    since = labhost.run(["date", "+%s"]).stdout.strip()
    pid = main_pid(labhost)
    run = deploy(labhost, profile, {"llama_server_spec_type": "auto", "llama_server_speed_gate": "fallback"})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" in run.text, run.text[-4000:]
    assert ("no candidate pays here (no candidate beat plain decoding with a confident interval: planted): plain "
            "decoding is served (llama_server_spec_type=none); the speed gate has nothing to judge") in run.text
    assert "no speculation pays here" in run.text, run.text[-4000:]  # verify.yml: the tune's answer, not a proof
    assert "TASK [llama_server_speed_gate : Speed gate - judge" not in run.output  # the gate measured nothing
    argv = labhost.run(["systemctl", "show", "-p", "ExecStart", "--value", UNIT]).stdout
    assert "--spec-type none" in argv, argv
    assert not set(argv.split()) & set(knob("draft_model").flags), argv  # the draft model is not loaded
    # one start of the service by this deploy: the plain unit directly, no speculative detour and fallback
    journal = labhost.run(["journalctl", "-u", UNIT, "--since", f"@{since}", "--no-pager", "-o", "cat"]).stdout
    assert len([ln for ln in journal.splitlines() if ln.startswith("Started ")]) == 1, journal[-3000:]
    assert main_pid(labhost) != pid
    gate = host_json(labhost, "speed-gate.json")
    assert gate["verdict"] == "not_measured" and gate["serving"] == "plain" and gate["spec_type"] == "none", gate
    assert gate["message"].startswith("not measured: plain decoding is served, the tune's answer (specops tune, ")
    assert gate["tune"]["chosen"] == "plain" and gate["tune"]["applied"] == {"llama_server_spec_type": "none"}
    print(f"\nPLAIN | served directly: {gate['message']}")


# -- the tune is owned by its deploy (issue 51)

TUNE_UNIT = "specops-tune"
LEASH_S = 60  # roles/llama_server_tune/tasks/run.yml: the heartbeat timeout; a tune nobody looks at then stops
# a forced tune with the kind left open: the ceiling (llama-bench), the probes (the plain server at least), then
# the measurement's servers: llama-server processes of the tune's unit from its first probe on
FORCED = {"llama_server_spec_type": "auto", "llama_server_tune_refresh": True, "llama_server_tune_budget": 2}
# the same with more work and budget: it must still be running when its leash has noticed the deploy is gone (the
# SIGINT comes at its first probe server, some 20 s in; the leash needs up to LEASH_S + one look's 17 s more, then its
# watchdog's 5 s), so it must not finish inside ~2 minutes on this CPU. The test says so if it did (exit 0, not 4)
FORCED_LONG = {**FORCED, "llama_server_tune_budget": 6, "llama_server_tune_max_tokens": 128,
               "llama_server_tune_probe_tokens": 48, "llama_server_tune_limit_per_workload": 4}


class Background:
    """deploy.yml as an operator runs it in a terminal (its own process group, the output to a file), to be
    interrupted."""

    def __init__(self, labhost, profile: Path, extra: dict) -> None:
        self.out = tempfile.NamedTemporaryFile("w+", prefix="specops-tune-deploy-", suffix=".log", delete=False)  # noqa: SIM115
        exe = Path(sys.executable).with_name("ansible-playbook")
        env = {**os.environ, "ANSIBLE_CONFIG": str(lab.REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
               "ANSIBLE_NOCOLOR": "1", "PYTHONUNBUFFERED": "1"}
        cmd = [str(exe), "deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory), "-e", f"@{profile}",
               "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}", "-e", json.dumps({**TUNE, **extra})]
        self.proc = subprocess.Popen(cmd, cwd=lab.REPO, stdout=self.out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def interrupt(self, grace: float = 30) -> None:
        """Ctrl-C: SIGINT to the whole process group, as a terminal sends it. A SIGINT that lands while Ansible forks
        a worker can be lost (test_live_host.interrupted_deploy); then the group is killed, as a closed terminal
        would: either way the controller stops looking at the tune."""
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self, timeout: float = 900) -> lab.PlaybookRun:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(timeout=60)
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        os.unlink(self.out.name)
        return lab.PlaybookRun(rc, text)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


def wait_until(what: str, check: Callable[[], object], timeout: float, every: float = 1.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def tune_active(labhost) -> bool:
    state = labhost.run(["systemctl", "is-active", f"{TUNE_UNIT}.service"], check=False).stdout.strip()
    return state in ("active", "activating", "deactivating")


def strays(labhost) -> list[str]:
    """What must not outlive a tune in the host: any `specops tune`, and any llama-server or llama-bench other than
    the service's own."""
    service = main_pid(labhost)
    out = []
    for line in labhost.run(["ps", "-eo", "pid=,args="]).stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        argv = args.split()
        if not argv or int(pid) == service:
            continue
        if Path(argv[0]).name in ("llama-server", "llama-bench") or argv[1:4] == ["-m", "specops", "tune"]:
            out.append(line.strip())
    return out


def probe_running(labhost) -> bool:
    """The forced tune is in its unit and one of its probe servers runs."""
    return tune_active(labhost) and any(Path(s.split()[1]).name == "llama-server" for s in strays(labhost))


def record_stamp(labhost) -> str:
    """The host's record as bytes and mtime: untouched means the same."""
    return labhost.run(["sh", "-c", f"sha256sum {STATE}/tune.json; stat -c %Y {STATE}/tune.json"]).stdout


def test_ctrl_c_to_the_deploy_stops_its_tune_and_leaves_nothing(tuned, labhost, profile):
    """SIGINT to ansible-playbook while its forced tune probes: nothing looks at the tune any more, its leash stops it
    (no heartbeat, or the lock no longer this run's), systemd takes its probe servers with it, tune.json stays as it
    was, and the next deploy is clean."""
    before = record_stamp(labhost)
    run = Background(labhost, profile, FORCED_LONG)
    try:
        wait_until("a probe server of the forced tune", lambda: probe_running(labhost), 600)
        run.interrupt()
        interrupted = run.finish(timeout=60)
    finally:
        run.kill()
    assert interrupted.rc != 0, interrupted.output[-4000:]
    t0 = time.monotonic()
    wait_until("the tune and its probe servers gone", lambda: not tune_active(labhost) and not strays(labhost),
               LEASH_S + 120, every=2)
    gone = time.monotonic() - t0
    ended = host_json(labhost, "tune-exit.json")
    assert ended["rc"] != 0, f"the tune finished before its leash stopped it: give FORCED_LONG more work ({ended})"
    assert ended["rc"] == 4, ended  # stopped by its leash, not killed by its budget or a signal
    assert re.match(r"specops tune stopped: (no heartbeat from the deploy for \d+ s|the deploy's lock is no longer "
                    r"this run's)", ended["why"]), ended
    assert ended["why"].endswith(f"; {STATE}/tune.json was not written"), ended
    assert record_stamp(labhost) == before
    again = deploy(labhost, profile, {"llama_server_spec_type": "auto"})
    assert again.rc == 0, again.output[-6000:]
    assert "from an interrupted deploy" not in again.text, again.text[-4000:]  # nothing was left to stop
    assert not strays(labhost)
    print(f"\nCTRL-C | the tune stopped {gone:.0f} s after the deploy was interrupted: {ended['why']}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_tune_killed_in_the_host_fails_the_deploy_in_one_line(tuned, labhost, profile, sig):
    """A signal to the tune's own process in the host while a probe server runs: the deploy fails with one line that
    names the signal (never a bare return code), and no probe server is left."""
    before = record_stamp(labhost)
    run = Background(labhost, profile, FORCED)
    try:
        wait_until("a probe server of the forced tune", lambda: probe_running(labhost), 600)
        pid = labhost.run(["systemctl", "show", "-p", "MainPID", "--value", f"{TUNE_UNIT}.service"]).stdout.strip()
        labhost.run(["kill", f"-{sig.name.removeprefix('SIG')}", pid])
        failed = run.finish(timeout=300)
    finally:
        run.kill()
    assert failed.rc != 0, failed.output[-4000:]
    expected = {signal.SIGKILL: r"tune: specops tune was killed by signal SIGKILL\.",
                # Python's KeyboardInterrupt: exit 130, or, inside the measurement, the tune's own stop
                signal.SIGINT: r"tune: specops tune (was interrupted \(SIGINT: exit 130\)|stopped: interrupted during "
                               r"the side-by-side measurement)"}[sig]
    assert re.search(expected, failed.text), failed.text[-4000:]
    assert "non-zero return code" not in failed.text, failed.text[-4000:]
    wait_until("no probe server left", lambda: not tune_active(labhost) and not strays(labhost), 30)
    assert record_stamp(labhost) == before
    print(f"\n{sig.name} | {re.search(expected + r'[^.]*', failed.text).group(0)}")


def test_a_deploy_stops_what_an_interrupted_one_left_and_says_so(tuned, labhost, profile):
    """What a deploy from before the unit could leave: a probe llama-server under PID 1 (started over SSH, as Ansible
    ran the tune, its parent gone), and a tune unit still running. The next deploy stops both before its own tune and
    says so in one line."""
    argv = labhost.run(["sh", "-c", f"tr '\\0' ' ' < /proc/{main_pid(labhost)}/cmdline"]).stdout.split()
    model = argv[argv.index("--model") + 1] if "--model" in argv else argv[argv.index("-m") + 1]
    labhost.ssh(f"setsid -f {argv[0]} --model {model} --port 18123 --ctx-size 256 </dev/null >/dev/null 2>&1")
    labhost.run(["systemd-run", f"--unit={TUNE_UNIT}", "--collect", "--quiet", "sleep", "600"])
    wait_until("the planted probe server", lambda: any("--port 18123" in s for s in strays(labhost)), 30)
    run = deploy(labhost, profile, {"llama_server_spec_type": "auto"})
    assert run.rc == 0, run.output[-6000:]
    line = re.search(rf"stopped a leftover tune \({TUNE_UNIT}, started [^)]+\) and 1 probe server\(s\) \(pid \d+\) "
                     r"from an interrupted deploy", run.text)
    assert line, run.text[-4000:]
    assert not tune_active(labhost) and not strays(labhost)
    print(f"\nLEFTOVER | {line.group(0)}")


def budget_for_streams(before: dict, n: int) -> int:
    """Minutes of tune budget for a run at ``n`` streams on this host, sized by what its one-stream record ``before``
    measured here: the phases that come before any measurement (the ceiling, the probes), plus what the tune keeps
    for ``n`` streams (:func:`specops.tune.streams.reserve_s`, a request's tail from plain decoding's own probe time a
    token), a fifth more for a loaded host; at least 4 minutes (this project's machine: the reserve ~155 s)."""
    phases = before.get("phases_s") or {}
    plain = (before.get("probes") or {}).get("exact-baseline") or {}
    per_token = plain["seconds"] / plain["n_tokens"] if plain.get("n_tokens") else 0.0
    tail = streams.request_s(n, tune_settings.setting("tune_max_tokens").default, per_token)
    need_s = float(phases.get("ceiling", 0.0)) + float(phases.get("probes", 0.0)) + streams.reserve_s(0.0, tail)
    return max(4, math.ceil(need_s * 1.2 / 60))


def test_another_parallel_tunes_again_measures_n_streams_and_the_record_says_why(tuned, labhost, profile):
    """The service's slots are part of what a record is for: a deploy with another llama_server_parallel does not
    reuse it (issue 51 item 3), it tunes again and says what moved; and at 2 slots (issue 52 item 2) the one-stream
    choice, or the best measured, is measured again against plain decoding with 2 streams in flight (the saturation
    soak's machinery: /slots showed both slots processing at once in both arms) and the choice is made for 2."""
    auto = {"llama_server_spec_type": "auto"}  # the kind left open: n-gram types are measured, so 2 streams are too
    # the record to compare with is this profile's at one slot with the kind left open: the test before leaves one
    # (its deploy set spec type auto); where it did not run, a deploy makes one
    before = host_json(labhost, "tune.json")
    if before["facts"]["settings"].get("ngram") != "auto" or before["facts"].get("parallel", 1) != 1:
        again = deploy(labhost, profile, auto)
        assert again.rc == 0, again.output[-6000:]
        before = host_json(labhost, "tune.json")
    assert before["facts"]["settings"].get("ngram") == "auto" and before["facts"].get("parallel", 1) == 1, before
    # nothing else moves (the budget is not in the key): the budget is sized by what this host measured, not by one
    # machine's speed (issue 82 item 4: 4 minutes on a slower 2-core machine left no room at 2 streams)
    budget = budget_for_streams(before, 2)
    run = deploy(labhost, profile, {**auto, "llama_server_parallel": 2, "llama_server_tune_budget": budget})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" not in run.text, run.text[-4000:]
    after = host_json(labhost, "tune.json")
    assert after["retuned_because"] == ["parallel"], after.get("retuned_because")
    assert after["facts"]["parallel"] == 2 and before["facts"].get("parallel", 1) != 2
    assert after["key"] != before["key"] and after["when"] != before["when"]
    assert "--parallel 2" in labhost.run(["systemctl", "cat", UNIT]).stdout
    at = after["streams"]
    assert at is not None, after["open"]
    assert at["n"] == 2 and at["streams_in_flight"] == {"speculative": 2, "plain": 2}, at
    assert at["blocks"] >= 2 and at["speedup"]["estimate"] > 0 and at["tokens_per_s"]["plain"] > 0, at
    assert at["latency_s"]["plain"]["total"]["p50"] > 0, at
    assert any(c["measured"] for c in after["candidates"])  # the one-stream figures beside it
    assert after["concurrency"].startswith("2 streams: "), after["concurrency"]
    assert "2 streams" in after["reason"], after["reason"]
    assert after["phases_s"]["streams"] > 0, after["phases_s"]
    print(f"\nAT N=2 | budget {budget} min | {at['candidate']} {at['measured']} | chosen {after['chosen']}: "
          f"{after['reason']}")


PRIVATE = "specops-private-prompt-7d41"  # in every prompt of the team's file: it must never show in the deploy's output


def test_the_teams_own_tasks_reach_the_host_for_root_only_and_the_record_names_them(tuned, labhost, profile,
                                                                                    tmp_path):
    """Issue 52 item 1: llama_server_tune_tasks (on the controller) reach the host readable by root only, next to a
    tune work dir that is root's alone; a file no longer listed is removed; the tune measures on them (its record and
    the speed gate's record name the file and the mix, never a prompt), and nothing prints a prompt."""
    team = tmp_path / "team-edits.jsonl"
    team.write_text("".join(json.dumps({"id": f"team-{i}", "workload": "edit", "messages": [{
        "role": "user", "content": f"Rename total to subtotal, change nothing else ({PRIVATE}):\n"
                                   f"def f(total):\n    total += {i}\n    return total\n"}]}) + "\n" for i in range(3)))
    labhost.run(["sh", "-c", f"mkdir -p {STATE}/tune-tasks && touch {STATE}/tune-tasks/left-by-an-old-deploy.jsonl"])
    run = deploy(labhost, profile, {"llama_server_tune_tasks": [str(team)], "llama_server_tune_mix": {"edit": 1}})
    assert run.rc == 0, run.output[-6000:]
    assert PRIVATE not in run.output
    modes = labhost.run(["stat", "-c", "%a %U %G %n", f"{STATE}/tune-tasks", f"{STATE}/tune-tasks/team-edits.jsonl",
                         f"{STATE}/tune-work"]).stdout.split("\n")
    assert modes[:3] == [f"700 root root {STATE}/tune-tasks", f"600 root root {STATE}/tune-tasks/team-edits.jsonl",
                         f"700 root root {STATE}/tune-work"], modes
    assert labhost.run(["ls", f"{STATE}/tune-tasks"]).stdout.split() == ["team-edits.jsonl"]
    rec = host_json(labhost, "tune.json")
    assert rec["task_source"] == f"team-edits.jsonl (sha256 {record.task_source([team]).split('sha256 ')[1]}", rec
    assert rec["mix"] == {"edit": 1.0} and rec["mix_how"].startswith("weighted by time for the mix edit 100%"), rec
    assert {"setting tasks", "setting mix"} <= set(rec["retuned_because"]), rec["retuned_because"]
    assert PRIVATE not in json.dumps(rec)
    gate = host_json(labhost, "speed-gate.json")
    assert gate["tune"]["tasks"] == rec["task_source"] and gate["tune"]["mix"] == "edit 100%", gate.get("tune")
