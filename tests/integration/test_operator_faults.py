"""Operators' faults on a live lab host (issue 40), each with a client streaming from the service throughout:
two deploys at once (the second waits, or refuses naming the first), a deploy killed outright (its lock is taken
over), a disk too small for the models and a context longer than the models were trained for (both refused in
the first play, before anything is built or copied), a speed-gate record that is not one (named and replaced),
and what the record says after a deploy with the gate off.

Every case prints a row (case | message | seconds | requests cut/failed) for the lead's note (run with -s).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import lab
from tests.integration.test_deploy import PROFILE, UNIT, main_pid
from tests.lab import Stream

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

LOCK = "/run/specops/deploy.lock"
KEY_DIR = "/etc/specops-faults-test"
KEY = "operator-faults-key-0123456789"
RECORD = "/etc/specops/speed-gate.json"
SMALL = "/srv/specops-small"
ROWS: list[tuple[str, str, float, str]] = []


def args(labhost, *extra: str) -> list[str]:
    return ["deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory), "-e", f"@{PROFILE}",
            "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}", "-e", "llama_server_speed_gate=off",
            *[a for x in extra for a in ("-e", x)]]


def deploy(labhost, *extra: str) -> tuple[lab.PlaybookRun, float]:
    t0 = time.monotonic()
    run = lab.ansible_playbook(*args(labhost, *extra))
    return run, time.monotonic() - t0


class Background:
    """ansible-playbook deploy.yml in the background (its own process group, output to a file)."""

    def __init__(self, labhost, *extra: str) -> None:
        self.out = tempfile.NamedTemporaryFile("w+", prefix="specops-deploy-", suffix=".log", delete=False)  # noqa: SIM115
        exe = Path(sys.executable).with_name("ansible-playbook")
        env = {**os.environ, "ANSIBLE_CONFIG": str(lab.REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
               "ANSIBLE_NOCOLOR": "1"}
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([str(exe), *args(labhost, *extra)], cwd=lab.REPO, stdout=self.out,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def finish(self, timeout: float = 900) -> tuple[lab.PlaybookRun, float]:
        rc = self.proc.wait(timeout=timeout)
        elapsed = time.monotonic() - self.t0
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        os.unlink(self.out.name)
        return lab.PlaybookRun(rc, text), elapsed

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        os.unlink(self.out.name)


def holder(labhost) -> dict | None:
    out = labhost.run(["cat", LOCK], check=False)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else None


def wait_for_holder(labhost, pid: int, timeout: float = 300) -> dict:
    """Wait until the run with ansible-playbook PID ``pid`` holds the host's deploy lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = holder(labhost)
        if h and h.get("pid") == pid:
            return h
        time.sleep(0.2)
    raise AssertionError(f"run {pid} did not take {LOCK} within {timeout} s (holder: {holder(labhost)})")


def ctx_in_unit(labhost) -> int:
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    m = re.search(r"--ctx-size (\d+)", unit)
    assert m, unit
    return int(m.group(1))


def row(case: str, message: str, seconds: float, stream: Stream, since: float) -> None:
    cut = [r for r in stream.cut if r["end"] >= since]
    failed = [r for r in stream.failures if r["end"] >= since]
    ROWS.append((case, message, seconds, f"{len(cut)} cut / {len(failed)} failed"))
    print(f"\nCASE | {case} | {message} | {seconds:.1f} s | {len(cut)} cut / {len(failed)} failed")


def first_play_only(run: lab.PlaybookRun) -> None:
    """Refused in the first play: nothing built, no preflight on the servers, nothing copied or restarted."""
    assert "PLAY [Build llama.cpp" not in run.output, run.output[-3000:]
    assert "Install the models" not in run.text and "Render the units into staging" not in run.text


@pytest.fixture(scope="module")
def serving(labhost, llama_build):
    labhost.run(["sh", "-c", f"umount {SMALL} 2>/dev/null; rm -rf {SMALL}"], check=False)
    run, _ = deploy(labhost, "llama_server_ctx_size=2048")
    assert run.rc == 0, run.output[-6000:]
    assert holder(labhost) is None, "a finished deploy released its lock"
    # the client sends the key the auth case sets (a server without one ignores it)
    with Stream(labhost, tokens=32, pause=lab.PACED, headers={"Authorization": f"Bearer {KEY}"}) as stream:
        yield stream
    for r in ROWS:
        print(f"| {r[0]} | `{r[1]}` | {r[2]:.1f} s | {r[3]} |")


def test_two_deploys_at_once_the_second_waits_or_refuses_naming_the_first(serving, labhost):
    """Deploy A (ctx 3072) holds the lock; B (ctx 2048, a 3 s wait) is refused naming A; C (ctx 2048, the default
    wait) waits for A and then applies its own setting: the host ends with C's 2048, and no run reports success for
    a setting it did not apply."""
    since = time.time()
    a = Background(labhost, "llama_server_ctx_size=3072")
    held = wait_for_holder(labhost, a.proc.pid)
    assert held["controller"] and held["started"] and held["run_id"].endswith(held["pid_start"])
    c = Background(labhost, "llama_server_ctx_size=2048")
    b, b_s = deploy(labhost, "llama_server_ctx_size=2048", "specops_deploy_lock_timeout=3")
    assert b.rc != 0
    line = lab.refusal_line(b.text, "another deploy holds")
    assert f"pid {a.proc.pid} on controller {held['controller']}" in line and f"started {held['started']}" in line
    assert "specops_deploy_lock_timeout=3" in line and "Nothing was changed" in line
    first_play_only(b)
    row("second deploy, 3 s wait", line, b_s, serving, since)
    a_run, _ = a.finish()
    assert a_run.rc == 0, a_run.output[-6000:]
    c_run, c_s = c.finish()
    assert c_run.rc == 0, c_run.output[-6000:]
    waited = re.search(r"deploy lock on \S+: waited ([\d.]+) s for run (\S+) \(pid (\d+)", c_run.text)
    assert waited and int(waited.group(3)) == a.proc.pid, c_run.text[-3000:]
    assert ctx_in_unit(labhost) == 2048   # C's setting, applied after A's
    assert holder(labhost) is None
    row("third deploy, default wait", f"waited {waited.group(1)} s for run {waited.group(2)}, then applied "
        "ctx 2048", c_s, serving, since)
    assert [r for r in serving.cut if r["end"] >= since] == []


def test_a_killed_deploy_leaves_a_lock_the_next_deploy_takes_over(serving, labhost):
    since = time.time()
    d = Background(labhost)
    held = wait_for_holder(labhost, d.proc.pid)
    d.kill()
    assert holder(labhost) == {**held}, "a SIGKILLed run cannot release its lock"
    e, e_s = deploy(labhost, "specops_deploy_lock_timeout=5")
    assert e.rc == 0, e.output[-6000:]
    m = re.search(r"(deploy lock on \S+: took over the lock of run (\S+) .*?: its run is no longer running on its "
                  r"controller)", e.text)
    assert m and m.group(2) == held["run_id"], e.text[-3000:]
    assert holder(labhost) is None
    row("deploy killed (SIGKILL) holding the lock, then a deploy", m.group(1), e_s, serving, since)


def test_a_context_longer_than_training_is_refused_in_the_first_play_and_the_lock_released(serving, labhost):
    from specops.room import trained

    train = trained("target", lab.model_path("smollm2-135m")).context_length
    assert train > 0
    before = (lab.file_sha(labhost, f"/etc/systemd/system/{UNIT}.service"), main_pid(labhost))
    since = time.time()
    run, s = deploy(labhost, f"llama_server_ctx_size={2 * train}")
    assert run.rc != 0
    line = lab.refusal_line(run.text, f"was trained for {train}")
    assert line.startswith(f"llama_server_ctx_size={2 * train}:") and "llama_server_allow_ctx_beyond_training" in line
    first_play_only(run)
    assert (lab.file_sha(labhost, f"/etc/systemd/system/{UNIT}.service"), main_pid(labhost)) == before
    # the run took the lock before the check and stopped there: the callback released it
    assert re.search(rf"deploy lock {LOCK} released on {re.escape(labhost.name)}", run.text), run.text[-2000:]
    assert holder(labhost) is None
    row("ctx twice the training context", line, s, serving, since)


def test_a_disk_too_small_for_the_models_is_refused_before_anything_is_copied(serving, labhost):
    labhost.run(["sh", "-c", f"mkdir -p {SMALL} && mount -t tmpfs -o size=48m specops-small {SMALL}"])
    try:
        since = time.time()
        run, s = deploy(labhost, f"specops_models_dir={SMALL}/models")
        assert run.rc != 0
        line = lab.refusal_line(run.text, "not enough disk")
        assert line.startswith("specops_models_dir: not enough disk") and f"filesystem at {SMALL} has" in line
        assert "model smollm2-135m 94 MiB" in line, line
        first_play_only(run)
        assert labhost.run(["find", SMALL, "-mindepth", "1"]).stdout == ""   # nothing copied, not even a dir
        assert holder(labhost) is None
        row("models dir on a 48 MiB filesystem", line, s, serving, since)
    finally:
        labhost.run(["sh", "-c", f"umount {SMALL}; rmdir {SMALL}"], check=False)


def test_an_invalid_speed_gate_record_is_named_and_replaced_by_one_for_the_running_unit(serving, labhost):
    labhost.run(["sh", "-c", f"printf '{{\"verdict\": \"pays\", ' > {RECORD}"])
    since = time.time()
    run, s = deploy(labhost)
    assert run.rc == 0, run.output[-6000:]
    m = re.search(rf"(WARNING: {RECORD} is not valid JSON [^:]*): its verdict cannot be used", run.text)
    assert m, run.text[-3000:]
    record = json.loads(labhost.run(["cat", RECORD]).stdout)
    unit_sha = lab.file_sha(labhost, f"/etc/systemd/system/{UNIT}.service")
    assert record["verdict"] == "not_measured" and record["action"] == "off"
    assert record["unit_file"] == f"/etc/systemd/system/{UNIT}.service"
    assert record["installed_unit_sha256"] == unit_sha
    assert record["serving"] == "speculative" and record["spec_type"] == "draft-simple"
    # a rerun with nothing to change leaves it as it is (and changes nothing at all)
    again, _ = deploy(labhost)
    assert again.rc == 0 and again.recap(labhost.name).get("changed") == 0, again.output[-4000:]
    assert json.loads(labhost.run(["cat", RECORD]).stdout) == record
    row("speed-gate record cut short", m.group(1), s, serving, since)


def exporter_metrics(labhost) -> str:
    code = ("import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9840/metrics',timeout=20)"
            ".read().decode())")
    return labhost.run(["python3", "-c", code], timeout=60).stdout


def record_state(labhost) -> str:
    """The exporter's one-hot specops_speed_gate_record_state, read from the exporter the deploy installed."""
    text = exporter_metrics(labhost)
    on = re.findall(r'^specops_speed_gate_record_state\{[^}]*state="(\w+)"[^}]*\} 1(?:\.0)?$', text, re.M)
    assert len(on) == 1, [ln for ln in text.splitlines() if "speed_gate" in ln]
    return on[0]


def wait_state(labhost, want: str, timeout: float = 60) -> float:
    t0 = time.monotonic()
    while (got := record_state(labhost)) != want:
        assert time.monotonic() - t0 < timeout, f"the exporter still says {got!r}, not {want!r}, after {timeout} s"
        time.sleep(0.5)
    return time.monotonic() - t0


def test_the_exporter_says_whether_the_record_belongs_to_the_running_unit(serving, labhost):
    """ok for the record the deploy wrote; missing, invalid, stale (another unit's checksum) when it is broken on
    the host -- never the series of a record that does not describe what runs."""
    run, _ = deploy(labhost, "specops_exporter_enabled=true")
    assert run.rc == 0, run.output[-6000:]
    good = labhost.run(["cat", RECORD]).stdout
    since = time.time()
    try:
        wait_state(labhost, "ok")
        labhost.run(["rm", RECORD])
        s = wait_state(labhost, "missing")
        row("record deleted on the host", 'specops_speed_gate_record_state{state="missing"} 1', s, serving, since)
        labhost.run(["sh", "-c", f"echo '{{not json' > {RECORD}"])
        s = wait_state(labhost, "invalid")
        row("record overwritten with garbage", 'specops_speed_gate_record_state{state="invalid"} 1', s, serving, since)
        other = {**json.loads(good), "installed_unit_sha256": "0" * 64, "verdict": "loses", "ratio": 0.6,
                 "plain_tps": 10.0, "speculative_tps": 6.0, "serving": "plain", "action": "fallback"}
        labhost.run(["sh", "-c", f"cat > {RECORD}"], input=json.dumps(other))
        s = wait_state(labhost, "stale")
        text = exporter_metrics(labhost)
        assert "specops_speed_gate_info" not in text and "specops_speed_gate_ratio" not in text, text
        row("record of another unit (serving plain, fallback)", 'specops_speed_gate_record_state{state="stale"} 1, '
            "no specops_speed_gate_info", s, serving, since)
    finally:
        labhost.run(["sh", "-c", f"cat > {RECORD}"], input=good)
    wait_state(labhost, "ok")


def sample(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} ([-+\deE.naif]+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_a_wrong_key_in_the_exporter_reads_as_auth_not_down(serving, labhost):
    """A keyed server and an exporter holding another key: the errors are kind auth, llamacpp_up 0 while
    llamacpp_healthy is 1 and llamacpp_exporter_auth_refused is 1 -- the input of SpecopsExporterCannotAuthenticate,
    and LlamaServerDown's exception (both rules tested with promtool, configs/prometheus/tests)."""
    labhost.run(["sh", "-c", f'mkdir -p {KEY_DIR}; umask 077; printf "%s\\n" "$1" > {KEY_DIR}/server-key;'
                 f' printf "%s\\n" wrong-key > {KEY_DIR}/exporter-key', "sh", KEY])
    since = time.time()
    run, s = deploy(labhost, "specops_exporter_enabled=true", f"llama_server_api_key_file={KEY_DIR}/server-key",
                    f"exporter_api_key_file={KEY_DIR}/exporter-key")
    assert run.rc == 0, run.output[-6000:]
    deadline = time.monotonic() + 120
    while True:
        text = exporter_metrics(labhost)
        auth = sample(text, 'specops_exporter_scrape_errors_total{endpoint="metrics",kind="auth"}')
        if auth and auth > 0 and sample(text, "llamacpp_exporter_auth_refused") == 1:
            break
        assert time.monotonic() < deadline, [ln for ln in text.splitlines() if "auth" in ln or "_up" in ln]
        time.sleep(1)
    assert sample(text, "llamacpp_up") == 0 and sample(text, "llamacpp_healthy") == 1, text
    row("exporter holding a wrong API key", f"kind=auth errors {auth:g}, llamacpp_exporter_auth_refused 1, "
        "llamacpp_up 0, llamacpp_healthy 1", s, serving, since)
    # the client holds the right key: the server's restart for its new key cuts no answer (a request that comes
    # while it restarts may be answered 503 with Retry-After: the lab's /proc/sys is read-only, so the drain cannot
    # hand what it holds to the new server)
    assert [r for r in serving.cut if r["end"] >= since] == []
