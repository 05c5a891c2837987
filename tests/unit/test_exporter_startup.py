"""Issue 13 (4) and (7): bad arguments and startup failures end in one line on stderr and exit status 2.

Run as the unit runs it (``python -m specops.exporter``) and through ``specops exporter``, in a subprocess:
the claim is about what an operator sees, tracebacks included.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specops.server import free_port

SRC = Path(__file__).resolve().parents[2] / "src"
ENTRY_POINTS = {"module": ["-m", "specops.exporter"], "specops": ["-m", "specops.cli", "exporter"]}


def run_exporter(entry: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "SPECOPS_LOG_LEVEL": "INFO"}
    try:
        return subprocess.run([sys.executable, *ENTRY_POINTS[entry], *args], capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:  # it started serving instead of refusing
        raise AssertionError(f"still running after {timeout}s: {exc.stderr!r}") from exc


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(("args", "word"), [
    (["--interval", "0"], "--interval"),
    (["--interval", "-1"], "--interval"),
    (["--interval", "0.5"], "--interval"),
    (["--interval", "nan"], "--interval"),
    (["--interval", "five"], "--interval"),
    (["--interval", "1e9"], "--interval"),
    (["--interval", "inf"], "--interval"),
    (["--listen-port", "70000"], "--listen-port"),
    (["--listen-port", "0"], "--listen-port"),
    (["--server-url", "ftp://127.0.0.1:8080"], "--server-url"),
    (["--server-url", "127.0.0.1:8080"], "--server-url"),
    (["--server-url", "http://"], "--server-url"),
    (["--timeout", "0"], "--timeout"),
    (["--window", "-5"], "--window"),
    (["--window", "2"], "--window"),  # shorter than the interval (5): never two passes in it
    (["--max-body-bytes", "10"], "--max-body-bytes"),
    (["--pid", "0"], "--pid"),
    (["--gpu-interval", "0"], "--gpu-interval"),
    (["--log-level", "LOUD"], "--log-level"),
])
def test_bad_arguments_are_refused_in_one_line(args, word):
    # --once: the old code would otherwise serve forever; with it, it scraped once and said nothing
    proc = run_exporter("module", "--server-url", closed_url(), "--once", *args)
    assert_one_line_exit_2(proc, word)


@pytest.mark.parametrize("args", [["--interval", "0"], ["--interval", "abc"], ["--listen-port", "70000"]])
def test_bad_arguments_through_specops_exporter(args):
    proc = run_exporter("specops", "--server-url", closed_url(), "--once", *args)
    assert_one_line_exit_2(proc, args[0])


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_port_in_use_is_one_line_and_exit_2(entry, busy_port):
    proc = run_exporter(entry, "--server-url", closed_url(), "--listen-port", str(busy_port))
    assert_one_line_exit_2(proc, str(busy_port))


def test_port_out_of_range_without_once_is_one_line():
    proc = run_exporter("module", "--server-url", closed_url(), "--listen-port", "70000")
    assert_one_line_exit_2(proc, "--listen-port", "70000")


def test_unreadable_api_key_file_is_one_line(tmp_path):
    proc = run_exporter("module", "--server-url", closed_url(), "--once",
                        "--api-key-file", str(tmp_path / "missing"))
    assert_one_line_exit_2(proc, "missing")


def test_good_arguments_still_work_once():
    proc = run_exporter("module", "--server-url", closed_url(), "--once", "--interval", "1")
    assert proc.returncode == 0, proc.stderr
    assert "llamacpp_up 0.0" in proc.stdout


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("args", "word"), [
    (["--bogus"], "--bogus"),  # reported by the top-level parser of `specops`: its usage used to come first
    (["--unit", "x.service", "--pid", "3"], "--pid"),  # a mutually exclusive group
    (["--listen-address"], "--listen-address"),  # an option without its value
])
def test_argparse_usage_errors_are_one_line(entry, args, word):
    proc = run_exporter(entry, "--server-url", closed_url(), "--once", *args)
    assert_one_line_exit_2(proc, word, "--help")
    assert "usage:" not in proc.stderr


def test_other_commands_keep_argparse_usage():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-m", "specops.cli", "fit", "--bogus"], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: specops fit"), proc.stderr
