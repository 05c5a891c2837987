"""The test lab: build llama.cpp through the real role, fetch a real model, run real servers.

Everything is cached outside the repository under ``$SPECOPS_CACHE`` (default ~/.cache/specops):
the first run on a fresh machine builds llama.cpp (minutes); later runs take seconds.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specops.capabilities import Capabilities
from specops.fetch import catalog, fetch
from specops.paths import cache_dir
from specops_lab.labhost import LAB_BUILD_VARS

REPO = Path(__file__).resolve().parents[1]
LAB_INSTALL_ROOT = cache_dir() / "lab" / "opt" / "llama.cpp"


def controller_zipcache() -> dict[str, str]:
    """The environment under which the controller's own Pythons keep the code they compile from Ansible's module
    zips, as the lab hosts' python3 does (lab/specops_lab/zipcache.py, lab equipment): the modules the controller runs
    itself (the local connection: the specops commands, files and checks on the controller, every role's preflight)
    compile Ansible's module_utils on every import otherwise. zipcache.py becomes a ``sitecustomize`` in a directory
    of the cache put first on PYTHONPATH; its compiled code goes under the cache too. tests/conftest.py sets it for
    every process the suite starts."""
    site = cache_dir() / "lab" / "controller-site"
    site.mkdir(parents=True, exist_ok=True)
    source = (REPO / "lab" / "specops_lab" / "zipcache.py").read_bytes()
    hook = site / "sitecustomize.py"
    if not hook.is_file() or hook.read_bytes() != source:
        tmp = site / f".sitecustomize.{os.getpid()}.tmp"  # workers start at once: each writes whole, then renames
        tmp.write_bytes(source)
        os.replace(tmp, hook)
    path = [str(site), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(site)]]
    return {"PYTHONPATH": os.pathsep.join(path), "SPECOPS_LAB_PYC": str(cache_dir() / "lab" / "controller-pyc")}


@dataclass
class PlaybookRun:
    rc: int
    output: str

    @property
    def text(self) -> str:
        """The output with whitespace folded (the YAML callback wraps long messages)."""
        return " ".join(self.output.split())

    def recap(self, host: str = "localhost") -> dict[str, int]:
        match = re.search(rf"^{re.escape(host)}\s*:\s*(.*)$", self.output, re.M)
        if not match:
            return {}
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


def ansible_playbook(playbook: str, *args: str, inventory: str | None = None, timeout: int = 3600,
                     env: dict[str, str] | None = None,
                     on_line: Callable[[str], None] | None = None) -> PlaybookRun:
    """Run ansible-playbook from the repo root with the repo's ansible.cfg; ``on_line`` sees each line of its
    output as it comes (a test acting at a point of the run)."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    cmd = [str(exe), playbook, *args]
    if inventory:
        cmd[1:1] = ["-i", inventory]
    full_env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_NOCOLOR": "1", **(env or {})}
    if on_line is None:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env,
                              check=False)
        return PlaybookRun(proc.returncode, proc.stdout + proc.stderr)
    # unbuffered: through a pipe Ansible's lines would otherwise reach ``on_line`` kilobytes (or the whole run) late
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**full_env, "PYTHONUNBUFFERED": "1"}) as running:
        assert running.stdout is not None and running.stderr is not None
        err: list[str] = []
        reader = threading.Thread(target=lambda stream=running.stderr: err.append(stream.read()), daemon=True)
        reader.start()
        watchdog = threading.Timer(timeout, running.kill)  # as subprocess.run's timeout: the run is killed
        watchdog.start()
        try:
            out = []
            for line in running.stdout:
                out.append(line)
                on_line(line)
            rc = running.wait()
        finally:
            watchdog.cancel()
        reader.join(timeout=30)
    return PlaybookRun(rc, "".join(out) + "".join(err))


# the play of deploy.yml that installs, drains, restarts and proves (a test's traffic for the drain starts here)
SERVICE_PLAY = "PLAY [Deploy the speculative service]"


def clients_from(marker: str, run: Callable[[Callable[[str], None]], PlaybookRun], clients: Sequence[Stream],
                 stack: contextlib.ExitStack) -> PlaybookRun:
    """``run(on_line)`` (a playbook run) with ``clients`` starting once its output reaches a line that starts with
    ``marker`` (all at once: each waits for its first answer), to stop with ``stack``; the run's result. A client
    whose claim is about the drain need not spend a core of the lab's two beside the checks and the preflight
    before it."""
    reached = threading.Event()

    def watch(line: str) -> None:
        if line.startswith(marker):
            reached.set()

    with concurrent.futures.ThreadPoolExecutor(1 + len(clients)) as pool:
        running = pool.submit(run, watch)
        while not (reached.wait(0.5) or running.done()):
            pass
        if not reached.is_set():  # a renamed play would otherwise start the clients after the drain, unnoticed
            ended = running.result()
            raise AssertionError(f"the run ended (rc {ended.rc}) before a line starting {marker!r}: "
                                 f"{ended.output[-4000:]}")
        started = [pool.submit(client.__enter__) for client in clients]
        concurrent.futures.wait(started)
        for client, begun in zip(clients, started, strict=True):
            if begun.exception() is None:
                stack.push(client.__exit__)
        for begun in started:
            begun.result()
        return running.result()


def build_llama_cpp(*extra: str, root: Path = LAB_INSTALL_ROOT, timeout: int = 3600) -> PlaybookRun:
    """Build through the real role; a lock keeps parallel test sessions from building at once."""
    LAB_INSTALL_ROOT.parent.mkdir(parents=True, exist_ok=True)
    with (LAB_INSTALL_ROOT.parent / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # the lab hosts' inventories carry the same settings (specops_lab.labhost.LAB_BUILD_VARS: the RPC backend),
        # so every lab deploy finds this build and compiles nothing
        return ansible_playbook("playbooks/build.yml", "-e", f"llama_cpp_install_root={root}",
                                "-e", json.dumps(LAB_BUILD_VARS), *extra, timeout=timeout)


def backend_root(backend: str) -> Path:
    """Install root of the lab's GPU-backend builds (kept apart from the CPU build the suite uses)."""
    return cache_dir() / "lab" / "backends" / backend


@dataclass
class LlamaBuild:
    prefix: Path
    server: Path
    caps: Capabilities
    info: dict

    def bin(self, name: str) -> Path:
        return self.prefix / "bin" / name


def build_at(prefix: Path) -> LlamaBuild:
    """The install at ``prefix`` (a build-id directory or a ``current`` link)."""
    prefix = prefix.resolve()
    info = prefix / "build-info.json"
    return LlamaBuild(prefix=prefix, server=prefix / "bin" / "llama-server",
                      caps=Capabilities.load(prefix / "capabilities.json"),
                      info=json.loads(info.read_text()) if info.exists() else {})


def installed_build(root: Path = LAB_INSTALL_ROOT) -> LlamaBuild:
    return build_at(root / "current")


def model_path(name: str) -> Path:
    """The cached, verified model; a lock keeps parallel workers from fetching it into the same file at once."""
    spec = catalog()[name]
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / "models.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return fetch(spec, cache_dir() / "models", cache_dir(), progress=False)


# ---- shared by the lab tests of both engines' deploys (bad inputs, rollbacks) ----------------------------
def ship_host_scripts(labhost, where: str = "/run/specops-host-scripts.pyz") -> str:
    """The host scripts (specops.host) zipped as the deploy ships them (specops.hostzip, roles/llama_server/tasks/
    host_scripts.yml: the scripts with the modules they share), written to ``where`` on the lab host; run one there
    with ``python3 WHERE SCRIPT ARGS``."""
    from tests.unit.hostcode import zip_bytes

    labhost.run(["sh", "-c", f"base64 -d > {where}"], input=base64.b64encode(zip_bytes()).decode())
    return where


def file_sha(labhost, path: str) -> str:
    """sha256 of a file on the lab host, or "absent": what a refused deploy must leave unchanged."""
    out = labhost.run(["cat", path], check=False)
    return hashlib.sha256(out.stdout.encode()).hexdigest() if out.returncode == 0 else "absent"


def refusal_line(text: str, fragment: str) -> str:
    """The message of the last failed task (``text``: whitespace-folded output; a rescued failure comes before the
    one that ends the play), which must hold ``fragment``."""
    found = re.findall(r"FAILED! => .*?\bmsg: (.*?) (?=PLAY RECAP|TASK \[|NO MORE HOSTS|RUNNING HANDLER)", text)
    assert found, text[-3000:]
    message = found[-1].strip()
    if message.startswith("'") and message.endswith("'"):
        message = message[1:-1].replace("''", "'")
    assert fragment in message, message
    return message


def squatter(port: int, unit: str) -> tuple[Callable, Callable]:
    """(setup, teardown) of a transient unit on the lab host that holds ``port`` (a port taken by somebody else)."""
    def setup(labhost) -> None:
        labhost.run(["systemd-run", f"--unit={unit}", "--property=Type=exec", "python3", "-m", "http.server",
                     str(port), "--bind", "127.0.0.1"])
        labhost.wait_for(lambda: labhost.run(["python3", "-c", "import urllib.request;urllib.request.urlopen("
                                              f"'http://127.0.0.1:{port}/',timeout=2)"], check=False).returncode == 0,
                         timeout=60)

    def teardown(labhost) -> None:
        labhost.run(["systemctl", "stop", unit], check=False)

    return setup, teardown


# ---- a client on the lab host: completions one after the other until stopped, one record per request -----
# the rest between requests of a client that only needs live traffic (Stream's ``pause``)
PACED = 3.0

# Each request is one of a real client's: the same prompt, ``tokens`` tokens (ignore_eos: a known length), streamed
# or not, a pause between requests (``pause``). A record: whether the answer ended whole, how many streamed pieces it
# got before it ended, the HTTP status of a refusal and its Retry-After, start and end (epoch s).
CLIENT = r"""
import json, os, sys, time, urllib.error, urllib.request
opts = json.loads(sys.argv[1])
while not os.path.exists(opts["stop"]):
    t0, pieces, status, retry_after = time.time(), 0, None, None
    try:
        body = json.dumps({"prompt": "Write a long story about a lighthouse keeper and the sea:",
                           "n_predict": opts["tokens"], "stream": opts["stream"], "temperature": 0,
                           "cache_prompt": False, "ignore_eos": True}).encode()
        req = urllib.request.Request(opts["url"], data=body,
                                     headers={"Content-Type": "application/json", **opts["headers"]})
        done = False
        with urllib.request.urlopen(req, timeout=300) as resp:
            if opts["stream"]:
                for line in resp:
                    if line.startswith(b"data: "):
                        pieces += 1
                        done = done or bool(json.loads(line[6:]).get("stop"))
            else:
                answer = json.loads(resp.read())
                pieces = answer.get("tokens_predicted", 0)
                done = bool(answer.get("stop")) and pieces == opts["tokens"]
        print(json.dumps({"ok": done, "pieces": pieces, "start": t0, "end": time.time()}), flush=True)
    except Exception as exc:
        if isinstance(exc, urllib.error.HTTPError):
            status, retry_after = exc.code, exc.headers.get("Retry-After")
        print(json.dumps({"ok": False, "pieces": pieces, "status": status, "retry_after": retry_after,
                          "error": repr(exc)[:200], "start": t0, "end": time.time()}), flush=True)
        time.sleep(0.3)  # a failing loop stays a client's pace (the failure itself is what a test reports)
    time.sleep(opts["pause"])
"""


class Stream:
    """A client inside a lab host requesting completions one after the other until stopped (streamed by default),
    sorting what happened to each request: ``records``, ``failures``, ``cut`` (answers begun and cut before their
    end), ``refused`` (no answer at all), ``window()`` (the longest run of refusals).

    ``pause`` is the client's rest between requests: the default (0.2 s) keeps the server's slot busy nearly all
    the time, for tests whose claim is about a busy service (an answer in flight when the deploy drains, the speed
    gate under load). A test that only needs live traffic (the service keeps answering throughout) paces it
    (``PACED``: a request every ~4 s with 32-48 tokens): on this 2-core machine every busy lab server takes a core
    from the deploys under test."""

    def __init__(self, labhost, tokens: int = 96, url: str = "http://127.0.0.1:8080/completion", *,
                 stream: bool = True, headers: dict[str, str] | None = None, name: str = "stream",
                 pause: float = 0.2) -> None:
        self.labhost = labhost
        self.opts = {"tokens": tokens, "url": url, "stream": stream, "headers": headers or {},
                     "stop": f"/run/specops-client-{name}.stop", "pause": pause}
        self.records: list[dict] = []
        self._cond = threading.Condition()

    def __enter__(self) -> Stream:
        self.labhost.run(["rm", "-f", self.opts["stop"]])
        self.proc = subprocess.Popen(self.labhost.host.nsenter_argv(["python3", "-c", CLIENT, json.dumps(self.opts)]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_ok(1, after=0)
        return self

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:  # the client itself failed: a failure, not a lost line
                now = time.time()
                record = {"ok": False, "pieces": 0, "error": line.strip()[:200], "start": now, "end": now}
            with self._cond:
                self.records.append(record)
                self._cond.notify_all()

    def _wait(self, what: str, count: int, after: float, ok: bool, timeout: float) -> None:
        with self._cond:
            done = self._cond.wait_for(
                lambda: len([r for r in self.records if r["start"] >= after and (r["ok"] or not ok)]) >= count,
                timeout=timeout)
        assert done, f"the client {what} {count} in {timeout} s: {self.records[-3:]}"

    def wait_ok(self, count: int, after: float, timeout: float = 300) -> None:
        """Wait until ``count`` answers that started after ``after`` (epoch s) ended whole."""
        self._wait("completed no whole answer of", count, after, True, timeout)

    def wait_for_requests(self, count: int, after: float = 0.0, timeout: float = 300) -> None:
        """Wait until ``count`` requests that started after ``after`` (epoch s) have ended, however."""
        self._wait("finished fewer requests than", count, after, False, timeout)

    def __exit__(self, *exc: object) -> None:
        self.labhost.run(["touch", self.opts["stop"]])
        try:
            self.proc.wait(timeout=300)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.records if not r["ok"]]

    @property
    def cut(self) -> list[dict]:
        """Answers that had begun and were cut before their end."""
        return [r for r in self.records if not r["ok"] and r["pieces"] > 0]

    @property
    def refused(self) -> list[dict]:
        """Requests that got no answer at all (the server was stopping, loading, or not listening)."""
        return [r for r in self.records if not r["ok"] and r["pieces"] == 0]

    def window(self) -> float:
        """The longest outage: seconds from the start of the first of a run of refused requests (one after the
        other, no answer between them) to the end of its last (0 when none)."""
        longest, run = 0.0, []
        for record in [*self.records, {"ok": True, "pieces": 1}]:
            if not record["ok"] and record["pieces"] == 0:
                run.append(record)
                continue
            if run:
                longest = max(longest, run[-1]["end"] - run[0]["start"])
            run = []
        return round(longest, 1)
