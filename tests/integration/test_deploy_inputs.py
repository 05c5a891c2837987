"""Deploy inputs against the lab host (issue 19): every bad input is refused in one line before anything
changes, while a client keeps streaming from the running service; values systemd must read literally
(spaces, %, $, quotes, non-ASCII) reach the process unchanged; a deploy from such a path serves and speculates.

Each refusal's message and its time to refusal are printed (run with -s to see the table).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import lab
from tests.integration.test_deploy import UNIT, completion, main_pid, n_restarts
from tests.integration.test_deploy import deploy as deploy_with_gate
from tests.lab import Stream

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

BASELINE = "llama-server-baseline"
TEST_DIR = "/etc/specops-inputs-test"
SQUAT_PORT = 8090
SQUAT = lab.squatter(SQUAT_PORT, "specops-squatter")  # (setup, teardown): the port taken by another unit


def deploy(labhost, *extra: str, on_line: Callable[[str], None] | None = None) -> lab.PlaybookRun:
    """test_deploy's deploy (the profile's gate: warn) with the speed gate off: nothing here is about it, and its
    two measurements per changed unit would only slow the module down (a later -e in ``extra`` still wins)."""
    return deploy_with_gate(labhost, "-e", "llama_server_speed_gate=off", *extra, on_line=on_line)


def host_state(labhost) -> dict:
    return {"unit": lab.file_sha(labhost, f"/etc/systemd/system/{UNIT}.service"),
            "baseline": lab.file_sha(labhost, f"/etc/systemd/system/{BASELINE}.service"),
            "pid": main_pid(labhost), "restarts": n_restarts(labhost),
            # names, types, sizes, modes, owners and mtimes under /srv; not `ls -l`, whose block totals can change
            # with no write at all (once, after a refusal, only that listing differed: most likely the filesystem
            # allocating the freshly copied model's blocks on write-back)
            "models": labhost.run(["sh", "-c", "find /srv -printf '%p %y %s %m %u %T@\\n' | sort"]).stdout}


def proof_line(text: str) -> str:
    match = re.search(r"(\S+ answers and speculates: .*?\(proof: [^)]*\))", text)
    assert match, text[-3000:]
    return match.group(1)


@pytest.fixture(scope="module")
def serving(labhost, llama_build):
    run = deploy(labhost)
    assert run.rc == 0, run.output[-6000:]
    labhost.run(["sh", "-c", f"rm -rf {TEST_DIR}; mkdir -p {TEST_DIR}; umask 022;"
                 f" echo secret-key > {TEST_DIR}/key-0644; chmod 0644 {TEST_DIR}/key-0644;"
                 f" echo secret-key > {TEST_DIR}/key-not-root;"
                 f" chown 1000:1000 {TEST_DIR}/key-not-root; chmod 0600 {TEST_DIR}/key-not-root"])
    yield run
    labhost.run(["rm", "-rf", TEST_DIR], check=False)


@dataclass
class Case:
    extra: list[str]
    variable: str
    fragment: str
    setup: Callable | None = None
    teardown: Callable | None = None
    absent: list[str] = field(default_factory=list)   # paths that must not appear on the host


def key_file(name: str, content: str) -> Callable:
    """Setup: a root-only key file in TEST_DIR holding ``content`` (printf format: \\r, \\357 ...)."""
    def setup(labhost) -> None:
        labhost.run(["sh", "-c", f'umask 077; printf "$1" > {TEST_DIR}/{name}', "sh", content])
    return setup


def remove(*paths: str) -> Callable:
    def teardown(labhost) -> None:
        labhost.run(["rm", "-rf", *paths], check=False)
    return teardown


MODEL_LINK = "/srv/specops-inputs-link.gguf"
CLOSED_DIR = "/srv/specops-inputs-closed"


def model_behind_root(labhost) -> None:
    """A readable model under /root, reached through a symlink in /srv: ProtectHome=yes hides it."""
    labhost.run(["sh", "-c", "mkdir -p /root/specops-inputs && echo GGUF > /root/specops-inputs/t.gguf &&"
                 f" chmod 0644 /root/specops-inputs/t.gguf && ln -sfn /root/specops-inputs/t.gguf {MODEL_LINK}"])


def model_in_closed_dir(labhost) -> None:
    labhost.run(["sh", "-c", f"mkdir -p {CLOSED_DIR} && echo GGUF > {CLOSED_DIR}/t.gguf && chmod 0644"
                 f" {CLOSED_DIR}/t.gguf && chmod 0700 {CLOSED_DIR}"])


def draft_not_readable(labhost) -> None:
    labhost.run(["sh", "-c", f"echo GGUF > {TEST_DIR}/draft-0600.gguf && chmod 0600 {TEST_DIR}/draft-0600.gguf"])


# Each refusal here goes through the real playbook on a live host. Settings checked by the argument specs alone
# (a negative draft length, a word where a number belongs, an unknown spec type, a privileged baseline port) are
# refused by the same task as "parallel 0": their one-line messages are tested in tests/unit/test_deploy_checks.py.
TUNE_TASKS = "/tmp/specops-inputs-tune"  # on the controller (the test's machine), where the role reads task files


def tune_tasks(name: str, lines: list[str]) -> Callable:
    """Setup: a task file ``name`` on the controller (the role reads llama_server_tune_tasks there)."""
    def setup(labhost) -> None:
        Path(TUNE_TASKS).mkdir(exist_ok=True)
        (Path(TUNE_TASKS) / name).write_text("\n".join(lines) + "\n")
    return setup


EDIT = json.dumps({"id": "e1", "workload": "edit", "messages": [{"role": "user", "content": "rename a to b: a = 1"}]})


CASES = {
    "relative models dir": Case(["specops_models_dir=srv/models"], "specops_models_dir", "not an absolute path"),
    "newline in path": Case(['{"specops_models_dir": "/srv/spec\\nops"}'], "specops_models_dir",
                            "contains a newline", absent=["/srv/spec"]),
    "missing API key file": Case([f"llama_server_api_key_file={TEST_DIR}/missing"], "llama_server_api_key_file",
                                 "no such file on"),
    "API key file is a directory": Case([f"llama_server_api_key_file={TEST_DIR}"], "llama_server_api_key_file",
                                        "a directory"),
    "API key file readable by others": Case([f"llama_server_api_key_file={TEST_DIR}/key-0644"],
                                            "llama_server_api_key_file", f"chmod 0600 {TEST_DIR}/key-0644"),
    "API key file not root's": Case([f"llama_server_api_key_file={TEST_DIR}/key-not-root"],
                                    "llama_server_api_key_file", f"chown root:root {TEST_DIR}/key-not-root"),
    "port taken by another process": Case([f"llama_server_port={SQUAT_PORT}"], "llama_server_port",
                                          f"port {SQUAT_PORT} is already taken", setup=SQUAT[0], teardown=SQUAT[1]),
    "parallel 0": Case(["llama_server_parallel=0"], "llama_server_parallel", "must be at least 1"),
    "public listen address without a key": Case(["llama_server_host=0.0.0.0"], "llama_server_host",
                                                "llama_server_allow_public_unauthenticated: true"),
    "privileged port": Case(["llama_server_port=80"], "llama_server_port", "llama_server_bind_privileged_port: true"),
    "model behind a symlink into /root": Case([f"llama_server_target_model={MODEL_LINK}"],
                                              "llama_server_target_model", "ProtectHome=yes",
                                              setup=model_behind_root,
                                              teardown=remove(MODEL_LINK, "/root/specops-inputs")),
    "model in a 0700 directory": Case([f"llama_server_target_model={CLOSED_DIR}/t.gguf"], "llama_server_target_model",
                                      f"{CLOSED_DIR} (mode 0700, owner root) does not let the service user",
                                      setup=model_in_closed_dir, teardown=remove(CLOSED_DIR)),
    "draft readable by root only": Case([f"llama_server_draft_model={TEST_DIR}/draft-0600.gguf"],
                                        "llama_server_draft_model", f"chmod o+r {TEST_DIR}/draft-0600.gguf",
                                        setup=draft_not_readable, teardown=remove(f"{TEST_DIR}/draft-0600.gguf")),
    "API key file with CRLF": Case([f"llama_server_api_key_file={TEST_DIR}/key-crlf"], "llama_server_api_key_file",
                                   "has CR characters (Windows line endings)",
                                   setup=key_file("key-crlf", "secret-key\\r\\n"),
                                   teardown=remove(f"{TEST_DIR}/key-crlf")),
    "API key with a trailing space": Case([f"llama_server_api_key_file={TEST_DIR}/key-space"],
                                          "llama_server_api_key_file", "starts or ends with a space or tab",
                                          setup=key_file("key-space", "secret-key \\n"),
                                          teardown=remove(f"{TEST_DIR}/key-space")),
    "API key file with comments only": Case([f"llama_server_api_key_file={TEST_DIR}/key-comments"],
                                            "llama_server_api_key_file", "serves without authentication",
                                            setup=key_file("key-comments", "# the key goes here\\n\\n"),
                                            teardown=remove(f"{TEST_DIR}/key-comments")),
    "API key with a byte-order mark": Case([f"llama_server_api_key_file={TEST_DIR}/key-bom"],
                                           "llama_server_api_key_file", "not printable ASCII",
                                           setup=key_file("key-bom", "\\357\\273\\277secret-key\\n"),
                                           teardown=remove(f"{TEST_DIR}/key-bom")),
    # issue 52: the tune's own traffic, read on the controller (file:line), refused whatever llama_server_tune says
    "tune task file not in the format": Case([json.dumps({"llama_server_tune_tasks": [f"{TUNE_TASKS}/bad.jsonl"]})],
                                             "llama_server_tune_tasks", "bad.jsonl:2: invalid JSON",
                                             setup=tune_tasks("bad.jsonl", [EDIT, "{not json"])),
    "tune mix with a negative share": Case([json.dumps({"llama_server_tune_tasks": [f"{TUNE_TASKS}/edits.jsonl"],
                                                        "llama_server_tune_mix": {"edit": -1}})],
                                           "llama_server_tune_mix", "edit's share is negative",
                                           setup=tune_tasks("edits.jsonl", [EDIT]),
                                           absent=["/etc/specops/tune-tasks/edits.jsonl"]),
}

@dataclass
class Refusal:
    run: lab.PlaybookRun
    elapsed: float
    before: dict
    after: dict
    window: tuple[float, float]   # epoch seconds: from this case's deploy to the next case's (or the stream's end)
    stream: Stream

    @property
    def failures(self) -> list[dict]:
        """The client's requests that failed while this case ran (up to the next one)."""
        start, stop = self.window
        return [r for r in self.stream.failures if start <= r["end"] < stop]


@pytest.fixture(scope="module")
def refusals(serving, labhost) -> dict[str, Refusal]:
    """Every bad input deployed one after the other while one client streams from the service throughout (one
    stream for all cases: starting and draining one per case cost ~5 s each; paced, as live traffic); the client
    must complete a request after the last refusal, and none may fail while any case runs."""
    runs: dict[str, tuple[lab.PlaybookRun, float, dict, dict, float]] = {}
    with Stream(labhost, tokens=32, pause=lab.PACED) as stream:
        for name, case in CASES.items():
            if case.setup:
                case.setup(labhost)
            try:
                before = host_state(labhost)
                started, t0 = time.time(), time.monotonic()
                run = deploy(labhost, *[a for x in case.extra for a in ("-e", x)])
                elapsed = time.monotonic() - t0
                after = host_state(labhost)
            finally:
                if case.teardown:
                    case.teardown(labhost)
            runs[name] = (run, elapsed, before, after, started)
        stream.wait_for_requests(1, after=time.time())   # the service still answers after the last refusal
    starts = [started for *_, started in runs.values()] + [float("inf")]
    return {name: Refusal(run, elapsed, before, after, (started, starts[i + 1]), stream)
            for i, (name, (run, elapsed, before, after, started)) in enumerate(runs.items())}


REFUSALS: list[tuple[str, str, float]] = []


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_in_one_line_and_changes_nothing(refusals, labhost, name):
    case, refusal = CASES[name], refusals[name]
    run = refusal.run
    assert run.rc != 0, run.output[-3000:]
    line = lab.refusal_line(run.text, case.fragment)
    REFUSALS.append((name, line, refusal.elapsed))
    print(f"\nREFUSAL | {name} | {refusal.elapsed:.1f} s | {line}")
    assert f"{case.variable}=" in line, line
    assert "Traceback" not in run.text and "stderr_lines" not in run.text
    # refused in preflight: nothing was copied, rendered into place or restarted
    assert "Install the models" not in run.text and "Render the units into staging" not in run.text
    assert refusal.after == refusal.before, (refusal.before, refusal.after)
    assert refusal.failures == [], refusal.failures
    for path in case.absent:
        assert labhost.run(["test", "-e", path], check=False).returncode != 0, path


def test_refusal_table(serving):
    """Prints the table collected above (input, message, time to refusal) for the lead's note."""
    for name, line, elapsed in REFUSALS:
        print(f"| {name} | `{line}` | {elapsed:.1f} s |")
    assert all(elapsed > 0 for _, _, elapsed in REFUSALS)


HOSTILE_DIR = "/srv/spec ops/mödels %/"
ECHO = """#!/usr/bin/python3
import json, os, sys
cred = os.environ.get("CREDENTIALS_DIRECTORY", "")
key = open(os.path.join(cred, "llama-server-api-key")).read() if cred else None
print("SPECOPS-ECHO " + json.dumps({"argv": sys.argv, "env": os.environ.get("SPECOPS_HOSTILE"), "key": key}))
"""


def test_systemd_reads_hostile_values_back_unchanged(serving, labhost, tmp_path):
    """The template's quoting, read by the host's systemd: a stand-in binary at a hostile path prints the argv,
    the environment value and the credential it was given."""
    from tests.unit.test_unit_quoting import render

    alias, env_value = "it's 100% \"$HOME\" back\\slash; ö", 'x "%d" $PATH \\n ö'
    bin_dir, models = "/opt/spec ops $x %d/bin", "/srv/spec ops/q'uote\" mödels %n $y"
    key_dir = "/etc/spec ops %/keys"
    unit = render(tmp_path, _P(models), _P(bin_dir + "/llama-server"), _P(key_dir + "/api-key"), alias, env_value,
                  "probe of 100% quoting")
    name = "specops-quoting-probe"
    labhost.run(["mkdir", "-p", bin_dir, models, key_dir])
    labhost.run(["sh", "-c", 'cat > "$1" && chmod 0755 "$1"', "sh", bin_dir + "/llama-server"], input=ECHO)
    labhost.run(["sh", "-c", 'umask 077; printf "k-123\\n" > "$1"', "sh", key_dir + "/api-key"])
    labhost.run(["sh", "-c", f"cat > /etc/systemd/system/{name}.service && systemctl daemon-reload"],
                input=unit.read_text())
    try:
        labhost.run(["systemctl", "start", name])
        labhost.wait_for(lambda: "SPECOPS-ECHO" in labhost.run(["journalctl", "-u", name, "-o", "cat"]).stdout,
                         timeout=60)
        line = next(ln for ln in labhost.run(["journalctl", "-u", name, "-o", "cat"]).stdout.splitlines()
                    if ln.startswith("SPECOPS-ECHO "))
        seen = json.loads(line.split(" ", 1)[1])
        assert seen["argv"][1:6] == ["--model", models + "/model.gguf", "--alias", alias, "--api-key-file"]
        assert seen["argv"][6].endswith("/llama-server-api-key") and "%" not in seen["argv"][6]
        assert seen["env"] == env_value and seen["key"] == "k-123\n"
        shown = dict(line.split("=", 1) for line in labhost.run(
            ["systemctl", "show", "-p", "ReadOnlyPaths", "-p", "Description", name]).stdout.splitlines())
        # systemctl prints the path re-quoted, with \$ for $
        assert [p.replace("\\$", "$") for p in shlex.split(shown["ReadOnlyPaths"])] == [models], shown
        assert shown["Description"] == "probe of 100% quoting", shown
    finally:
        labhost.run(["sh", "-c", f"systemctl stop {name}; rm -f /etc/systemd/system/{name}.service;"
                     " systemctl daemon-reload"], check=False)
        labhost.run(["rm", "-rf", "/opt/spec ops $x %d", models, "/etc/spec ops %"], check=False)


def _P(path: str):
    from pathlib import PurePosixPath
    return PurePosixPath(path)


def test_no_op_deploy_on_a_busy_host_is_proven_by_its_traffic(serving, labhost):
    """Nothing changed, a client keeps the only slot busy: the deploy changes nothing (the suite's one no-change
    deploy of a single host: the fleet's and the monitoring's have their own) and proves speculation from the
    traffic (the speculation counters of the same process moved) instead of queueing a probe behind it."""
    pid = main_pid(labhost)
    with contextlib.ExitStack() as stack:
        stream = Stream(labhost, tokens=32)  # from the play that proves (lab.clients_from): the checks before it idle
        t0 = time.monotonic()
        run = lab.clients_from(lab.SERVICE_PLAY, lambda on_line: deploy(labhost, on_line=on_line), [stream], stack)
        elapsed = time.monotonic() - t0
        stream.wait_for_requests(1, after=time.time())
    assert run.rc == 0, run.output[-4000:]
    # nothing changed anywhere: the host, and the controller (build, models)
    assert run.recap(labhost.name).get("changed") == 0, run.output[-4000:]
    assert run.recap("localhost").get("changed") == 0, run.output[-4000:]
    line = proof_line(run.text)
    print(f"\nNO-OP ON A BUSY HOST | {elapsed:.1f} s | {line}")
    assert "(proof: traffic" in line and "answers and speculates" in line, line
    assert main_pid(labhost) == pid and stream.failures == [], stream.failures


def test_deploy_from_a_path_with_spaces_and_percent_serves_and_speculates(serving, labhost):
    run = deploy(labhost, "-e", json.dumps({"specops_models_dir": HOSTILE_DIR}))
    try:
        assert run.rc == 0, run.output[-4000:]
        line = proof_line(run.text)
        print(f"\nHOSTILE PATH DEPLOY | {line}")
        assert "(proof: probe" in line, line            # a changed unit proves itself with its own probe
        unit = labhost.run(["cat", f"/etc/systemd/system/{UNIT}.service"]).stdout
        assert 'ReadOnlyPaths="/srv/spec ops/mödels %%/"' in unit, unit
        assert labhost.run(["test", "-f", HOSTILE_DIR + "SmolLM2-135M-Instruct.Q4_1.gguf"], check=False).returncode == 0
        out = completion(labhost)
        assert out["content"].strip() and out["timings"]["draft_n"] > 0
    finally:
        # no restore: the next test deploys its own settings; the service stops, as its model directory goes
        labhost.run(["systemctl", "stop", UNIT], check=False)
        labhost.run(["rm", "-rf", "/srv/spec ops"], check=False)


KEY = "sk-specops-4f1d2c9e7b"


def test_api_key_never_leaks(serving, labhost):
    """A root-only key file reaches llama-server and the exporter through LoadCredential=; the key itself
    appears in no argv, /proc/*/cmdline, unit, journal, Ansible output or exporter label."""
    key_file = f"{TEST_DIR}/api-key"
    labhost.run(["sh", "-c", f'umask 077; printf "%s\\n" "$1" > {key_file}', "sh", KEY])
    try:
        run = deploy(labhost, "-e", f"llama_server_api_key_file={key_file}", "-e", "specops_exporter_enabled=true")
        assert run.rc == 0, run.output[-4000:]
        code = ("import sys,urllib.request,urllib.error;r=urllib.request.Request('http://127.0.0.1:8080/v1/models',"
                "headers={'Authorization':'Bearer '+sys.argv[1]} if sys.argv[1] else {})\n"
                "try: print(urllib.request.urlopen(r,timeout=30).status)\n"
                "except urllib.error.HTTPError as e: print(e.code)")
        assert labhost.run(["python3", "-c", code, KEY]).stdout.strip() == "200"
        assert labhost.run(["python3", "-c", code, ""]).stdout.strip() == "401"
        unit = labhost.run(["systemctl", "cat", UNIT]).stdout
        assert "LoadCredential=llama-server-api-key:" in unit and "--api-key-file %d/llama-server-api-key" in unit
        exporter = labhost.run(["python3", "-c", "import urllib.request;print(urllib.request.urlopen("
                                "'http://127.0.0.1:9840/metrics',timeout=30).read().decode())"]).stdout
        assert "specops_exporter_scrape_cycles_total" in exporter
        places = {
            "ansible output": run.output,
            "argv (ps)": labhost.run(["ps", "-eo", "args"]).stdout,
            "/proc/*/cmdline": labhost.run(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
                                           check=False).stdout,
            "journal": labhost.run(["journalctl", "--no-pager", "-o", "cat"]).stdout,
            "units": labhost.run(["sh", "-c", "cat /etc/systemd/system/*.service"]).stdout,
            "exporter": exporter,
            "state dir": labhost.run(["sh", "-c", "cat /etc/specops/*.json"], check=False).stdout,
        }
        leaks = [where for where, text in places.items() if KEY in text]
        assert leaks == [], leaks
    finally:
        # the module's last test: no restore (the next module deploys its own state), only the exporter goes
        labhost.run(["systemctl", "disable", "--now", "specops-exporter"], check=False)
