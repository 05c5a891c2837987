"""specops.host.wait_healthy: a failed start is reported with the journal lines that say why (one
line), the journal is that of the runs it watched, and a rollback polls the host and port of the unit it restored."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specops.host import wait_healthy as wh
from specops.knobs import knob

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "llama-server-0c1e57098"
UNIT = "llama-server-speculative"


# the spellings the role passes from the knob table (--host-flag / --port-flag)
FLAGS = (list(knob("host").own_spellings), list(knob("port").own_spellings))
CLI_FLAGS = [f"--host-flag={f}" for f in FLAGS[0]] + [f"--port-flag={f}" for f in FLAGS[1]]

# `journalctl -o cat` of one start: llama-server's startup (a GGUF key named unknown_token_id is not a cause),
# then the unreadable model, then systemd's own lines about the run
STARTUP = [
    "build: 6985 (0c1e5709) with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu",
    "system info: n_threads = 8, n_threads_batch = 8, total_threads = 16",
    "main: binding port with default address family",
    "main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 15",
    "main: loading model",
    "srv    load_model: loading model '/srv/specops/models/qwen.gguf'",
    "llama_model_loader: - kv  24:            tokenizer.ggml.unknown_token_id u32              = 0",
]
PERMISSION = [
    *STARTUP[:6],
    "gguf_init_from_file: failed to open GGUF file '/srv/specops/models/qwen.gguf' (Permission denied)",
    "llama_model_load: error loading model: llama_model_loader: failed to load model from "
    "/srv/specops/models/qwen.gguf",
    "llama_model_load_from_file_impl: failed to load model",
    "common_init_from_params: failed to load model '/srv/specops/models/qwen.gguf', try reducing --n-gpu-layers "
    "if you're running out of VRAM",
    "srv    load_model: failed to load model, '/srv/specops/models/qwen.gguf'",
    "srv    operator(): operator(): cleaning up before exit...",
    "main: exiting due to model loading error",
    f"{UNIT}.service: Main process exited, code=exited, status=1/FAILURE",
    f"{UNIT}.service: Failed with result 'exit-code'.",
]
PORT_80 = [
    *STARTUP[:3],
    "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 80",
    "main: exiting due to HTTP server error",
    f"{UNIT}.service: Main process exited, code=exited, status=1/FAILURE",
    f"{UNIT}.service: Failed with result 'exit-code'.",
    f"{UNIT}.service: Scheduled restart job, restart counter is at 1.",
]
EXITED = {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "ExecMainCode": "1",
          "ExecMainStatus": "1"}


def test_an_unreadable_model_is_named_in_the_reason() -> None:
    cause = wh.select_cause(PERMISSION)
    assert len(cause) == 5
    assert cause[0] == PERMISSION[6]                      # the innermost error, kept though more lines matched
    assert cause[-1] == "main: exiting due to model loading error"
    assert not any("Failed with result" in c for c in cause)  # restates "(exit-code 1)" only
    reason = wh.reason_line(f"{UNIT} exited ({wh.exit_text(EXITED)})", cause)
    assert reason.startswith(f"{UNIT} exited (exit-code 1): failed to open GGUF file "
                             "'/srv/specops/models/qwen.gguf' (Permission denied); ")
    assert reason.endswith("; exiting due to model loading error")
    assert "\n" not in reason


def test_a_refused_port_is_named() -> None:
    cause = wh.select_cause(PORT_80)
    assert cause == ["couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 80",
                     "main: exiting due to HTTP server error"]
    assert wh.reason_line(f"{UNIT} exited (exit-code 1)", cause) == (
        f"{UNIT} exited (exit-code 1): couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 80; "
        "exiting due to HTTP server error")


def test_a_removed_or_unknown_flag_is_named() -> None:
    removed = (FIX / "removed_flag_draft_max.txt").read_text().splitlines()  # what this build prints
    assert wh.select_cause(removed) == [removed[0]]
    assert wh.short(removed[0]).startswith('error while handling argument "--draft-max": the argument has been '
                                           "removed")
    assert wh.select_cause(["error: invalid argument: --draft-maxx", "usage:"]) == [
        "error: invalid argument: --draft-maxx"]
    assert wh.short("error: invalid argument: --draft-maxx") == "error: invalid argument: --draft-maxx"


@pytest.mark.parametrize("line,short", [
    ("E srv    load_model: failed to load model, '/x.gguf'", "failed to load model, '/x.gguf'"),  # --log-prefix
    ("0.00.334.051 E gguf_init_from_file: failed to open GGUF file '/x' (No such file or directory)",
     "failed to open GGUF file '/x' (No such file or directory)"),
    ("terminate called after throwing an instance of 'std::runtime_error'",
     "terminate called after throwing an instance of 'std::runtime_error'"),
    (f"{UNIT}.service: Failed at step EXEC spawning /opt/llama.cpp/current/bin/llama-server: Permission denied",
     "Failed at step EXEC spawning /opt/llama.cpp/current/bin/llama-server: Permission denied"),
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on device 0: cudaMalloc failed: out of "
     "memory", "allocating 9216.00 MiB on device 0: cudaMalloc failed: out of memory"),
])
def test_each_kind_of_cause_line_is_picked_and_shortened(line: str, short: str) -> None:
    assert wh.select_cause([*STARTUP, line]) == [line]
    assert wh.short(line) == short


def test_no_cause_a_restart_and_systemd_only() -> None:
    assert wh.select_cause(STARTUP) == []
    assert wh.reason_line("x exited (signal 9, oom-kill)", []) == (
        "x exited (signal 9, oom-kill); the journal names no cause")
    # systemd's restating lines are the cause when the service said nothing
    only_systemd = [f"{UNIT}.service: A process of this unit has been killed by the OOM killer.",
                    f"{UNIT}.service: Failed with result 'oom-kill'."]
    assert wh.select_cause(only_systemd) == [only_systemd[1]]
    # two runs that failed alike: each line once, in order
    assert wh.select_cause(PORT_80 + PORT_80[3:]) == wh.select_cause(PORT_80)
    assert len(wh.select_cause([f"failed {i}" for i in range(9)], limit=3)) == 3


@pytest.mark.parametrize("state,text", [
    (EXITED, "exit-code 1"),
    ({"ExecMainCode": "2", "ExecMainStatus": "9", "Result": "oom-kill"}, "signal 9, oom-kill"),
    ({"ExecMainCode": "3", "ExecMainStatus": "6", "Result": "core-dump"}, "core-dump, signal 6"),
    ({"ExecMainCode": "1", "ExecMainStatus": "1", "Result": "start-limit-hit"}, "exit-code 1, start-limit-hit"),
    ({"ExecMainCode": "0", "ExecMainStatus": "0", "Result": "success"}, ""),  # the next run already started
])
def test_exit_text(state: dict[str, str], text: str) -> None:
    assert wh.exit_text(state) == text


def test_the_journal_is_that_of_the_runs_watched() -> None:
    argv = wh.journal_argv(UNIT, ["a1", "b2"], "-10min")
    assert argv[:6] == ["journalctl", "--no-pager", "-o", "cat", "-n", "300"]
    assert argv[6:] == ["_SYSTEMD_INVOCATION_ID=a1", "_SYSTEMD_INVOCATION_ID=b2", "+", "INVOCATION_ID=a1",
                        "INVOCATION_ID=b2"]
    assert wh.journal_argv(UNIT, [], "-10min")[6:] == ["-u", UNIT, "--since", "-10min"]


def test_the_committed_unit_is_polled_on_its_own_port() -> None:
    text = (REPO / "configs" / "llama-server-speculative.service").read_text()
    assert wh.unit_url(text, *FLAGS) == "http://127.0.0.1:8080"
    assert wh.unit_url((REPO / "configs" / "llama-server-baseline.service").read_text(), *FLAGS) == "http://127.0.0.1:8081"


@pytest.mark.parametrize("execstart,url", [
    ("/bin/llama-server --model /m.gguf --host 0.0.0.0 --port 9000", "http://127.0.0.1:9000"),
    ("/bin/llama-server \\\n    --host :: \\\n    # a comment inside the command\n    --port 8090", "http://127.0.0.1:8090"),
    ("/bin/llama-server --host localhost --port=8091", "http://127.0.0.1:8091"),
    ("/bin/llama-server --host=10.0.0.5 --port 8092", "http://10.0.0.5:8092"),
    ('/bin/llama-server --alias "a b" --host ::1 --port 8093', "http://[::1]:8093"),
    ("/bin/llama-server --model /m.gguf --port 8094", "http://127.0.0.1:8094"),  # llama-server's default host
])
def test_unit_url(execstart: str, url: str) -> None:
    assert wh.unit_url(f"[Service]\nType=exec\nExecStart={execstart}\nRestart=on-failure\n", *FLAGS) == url


@pytest.mark.parametrize("text,message", [
    ("[Service]\nType=exec\n", "no ExecStart"),
    ("[Service]\nExecStart=/bin/llama-server --port http\n", "not a number"),
    ("[Service]\nExecStart=/bin/llama-server --model /m.gguf\n", "no port"),
    ("[Service]\nExecStart=/bin/llama-server --host /run/llama.sock\n", "unix socket"),
    ('[Service]\nExecStart=/bin/llama-server --alias "open\n', "quotation"),
])
def test_unit_url_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wh.unit_url(text, *FLAGS)


# ---------------------------------------------------------------------------------- main(), systemd faked


class FakeHost:
    """systemctl show answers from a script of states; journalctl records its argv and answers ``lines``."""

    def __init__(self, states: list[dict[str, str]], lines: list[str]) -> None:
        self.states, self.lines = states, lines
        self.journal_calls: list[list[str]] = []
        self.synced_before_read = False

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv == ["journalctl", "--sync"]:
            self.synced_before_read = self.synced_before_read or not self.journal_calls
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0] == "systemctl":
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return subprocess.CompletedProcess(argv, 0, "".join(f"{k}={v}\n" for k, v in state.items()), "")
        self.journal_calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "\n".join(self.lines) + "\n", "")


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], host: FakeHost,
          *args: str) -> tuple[int, dict[str, Any]]:
    monkeypatch.setattr(wh.subprocess, "run", host.run)
    monkeypatch.setattr(wh.time, "sleep", lambda _s: None)
    monkeypatch.setattr("sys.argv", ["wait_healthy.py", "--unit", UNIT, *args])
    rc = wh.main()
    return rc, json.loads(capsys.readouterr().out)


def test_a_crash_seen_after_systemd_restarted_it_reads_the_run_that_failed(monkeypatch, capsys) -> None:
    running = {"ActiveState": "activating", "NRestarts": "0", "InvocationID": "aaa", "ExecMainCode": "0"}
    # the next poll sees the restart counter up and already the next run (bbb): its ExecMain* are reset
    next_run = {"ActiveState": "activating", "NRestarts": "1", "InvocationID": "bbb", "ExecMainCode": "0",
                "ExecMainStatus": "0", "Result": "success"}
    host = FakeHost([running, running, next_run], PERMISSION)
    rc, out = _main(monkeypatch, capsys, host, "--url", "http://127.0.0.1:9", "--timeout", "30")
    assert rc == 1 and out["ok"] is False
    assert out["reason"].startswith(f"{UNIT} exited (systemd restarted it): failed to open GGUF file ")
    assert out["cause"][0].endswith("(Permission denied)")
    assert out["journal"].splitlines()[-1] == PERMISSION[-1]
    assert host.journal_calls[0][6:] == ["_SYSTEMD_INVOCATION_ID=aaa", "_SYSTEMD_INVOCATION_ID=bbb", "+",
                                         "INVOCATION_ID=aaa", "INVOCATION_ID=bbb"]
    assert host.synced_before_read   # journalctl --sync first: the dying process's last line is stored


def test_a_journal_without_invocation_tags_falls_back_to_the_unit(monkeypatch, capsys) -> None:
    failed = {**EXITED, "ActiveState": "failed", "NRestarts": "0", "InvocationID": "aaa"}
    host = FakeHost([failed], [])
    rc, out = _main(monkeypatch, capsys, host, "--url", "http://127.0.0.1:9", "--timeout", "30")
    assert rc == 1 and out["reason"] == f"{UNIT} exited (exit-code 1); the journal names no cause"
    assert [call[6:8] for call in host.journal_calls[:3]] == [
        ["_SYSTEMD_INVOCATION_ID=aaa", "+"], ["-u", UNIT], ["-u", UNIT]]
    assert host.journal_calls[1][8:] == ["--since", "-10min"]
    assert host.journal_calls[2][8] == "--since" and host.journal_calls[2][9].startswith("@")
    # no cause of its own: read again a bounded number of times, then systemd's word is all there is
    assert len(host.journal_calls) == 3 * (wh.SETTLE_LOOKS + 1)


def _failed_with(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                 run: Callable[..., subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    """main() against ``run`` as the host's commands: it fails, and this is what it printed."""
    monkeypatch.setattr(wh.subprocess, "run", run)
    monkeypatch.setattr(wh.time, "sleep", lambda _s: None)
    monkeypatch.setattr("sys.argv", ["wait_healthy.py", "--unit", UNIT, "--url", "http://127.0.0.1:9"])
    assert wh.main() == 1
    return json.loads(capsys.readouterr().out)


def test_a_cause_stored_without_its_run_tag_is_read_from_the_units_lines_since_the_wait(monkeypatch, capsys) -> None:
    """journald tags a line with its run from the run's cgroup: one it stores after the run is gone has no tag, so
    the run's own lines hold only systemd's echo; the unit's lines since just before the wait began hold the cause."""
    failed = {**EXITED, "ActiveState": "failed", "NRestarts": "0", "InvocationID": "aaa"}
    echo = [f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", f"{UNIT}: Failed with result 'exit-code'."]
    untagged = "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge"
    host = FakeHost([failed], echo)
    plain_run = host.run

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if argv[0] == "journalctl" and "--since" in argv and argv[argv.index("--since") + 1].startswith("@"):
            host.lines = [untagged, *echo]
        else:
            host.lines = echo
        return plain_run(argv, **kw)

    out = _failed_with(monkeypatch, capsys, run)
    assert out["cause"] == [untagged], out
    assert out["reason"] == f"{UNIT} exited (exit-code 1): {untagged}", out


def test_a_cause_that_reaches_the_journal_late_is_still_named(monkeypatch, capsys) -> None:
    """The process's last line can land in the journal after systemd's own: the first read sees only "Failed with
    result", a later one the traceback's last line, which is the reason."""
    failed = {**EXITED, "ActiveState": "failed", "NRestarts": "0", "InvocationID": "aaa"}
    echo = [f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", f"{UNIT}: Failed with result 'exit-code'."]
    host = FakeHost([failed], echo)
    late = "gguf_init_from_file: failed to open GGUF file '/srv/m.gguf' (Permission denied)"
    reads = iter([echo, echo, [late, *echo]])
    plain_run = host.run

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if argv[0] == "journalctl" and argv != ["journalctl", "--sync"]:
            host.lines = next(reads, host.lines)
        return plain_run(argv, **kw)

    out = _failed_with(monkeypatch, capsys, run)
    assert out["cause"] == [late], out
    assert "Failed with result" not in out["reason"], out["reason"]


@pytest.fixture
def health_server() -> Iterator[int]:
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            self.wfile.write(b'{"status":"ok"}')

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()


def test_the_rollback_polls_the_port_of_the_unit_it_restored(monkeypatch, capsys, tmp_path, health_server) -> None:
    unit = tmp_path / f"{UNIT}.service"
    unit.write_text(f"[Service]\nExecStart=/bin/llama-server \\\n    --host 0.0.0.0 \\\n    --port {health_server}\n")
    active = {"ActiveState": "active", "NRestarts": "0", "InvocationID": "ccc"}
    rc, out = _main(monkeypatch, capsys, FakeHost([active], []), "--unit-file", str(unit), "--timeout", "30",
                    *CLI_FLAGS)
    assert rc == 0 and out["url"] == f"http://127.0.0.1:{health_server}"


def test_an_unreadable_unit_file_fails_at_once(monkeypatch, capsys, tmp_path) -> None:
    rc, out = _main(monkeypatch, capsys, FakeHost([{}], []), "--unit-file", str(tmp_path / "missing.service"),
                    *CLI_FLAGS)
    assert rc == 1 and out["reason"].startswith(f"cannot tell where {UNIT} listens: ")


def test_a_timeout_names_the_url_and_what_the_journal_says(monkeypatch, capsys) -> None:
    loading = {"ActiveState": "active", "NRestarts": "0", "InvocationID": "ddd"}
    host = FakeHost([loading], [*STARTUP, "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device"])
    rc, out = _main(monkeypatch, capsys, host, "--url", "http://127.0.0.1:9", "--timeout", "0")
    assert rc == 1
    assert out["reason"] == (f"{UNIT} gave no healthy answer on http://127.0.0.1:9 within 0s: failed to "
                             "initialize CUDA: no CUDA-capable device")
