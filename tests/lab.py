"""The test lab: build llama.cpp through the real role, fetch a real model, run real servers.

Everything is cached outside the repository under ``$SPECOPS_CACHE`` (default ~/.cache/specops):
the first run on a fresh machine builds llama.cpp (minutes); later runs take seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specops.capabilities import Capabilities
from specops.fetch import catalog, fetch
from specops.paths import cache_dir

REPO = Path(__file__).resolve().parents[1]
LAB_INSTALL_ROOT = cache_dir() / "lab" / "opt" / "llama.cpp"


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
                     env: dict[str, str] | None = None) -> PlaybookRun:
    """Run ansible-playbook from the repo root with the repo's ansible.cfg."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    cmd = [str(exe), playbook, *args]
    if inventory:
        cmd[1:1] = ["-i", inventory]
    full_env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_NOCOLOR": "1", **(env or {})}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env,
                          check=False)
    return PlaybookRun(proc.returncode, proc.stdout + proc.stderr)


def build_llama_cpp(*extra: str, root: Path = LAB_INSTALL_ROOT, timeout: int = 3600) -> PlaybookRun:
    """Build through the real role; a lock keeps parallel test sessions from building at once."""
    LAB_INSTALL_ROOT.parent.mkdir(parents=True, exist_ok=True)
    with (LAB_INSTALL_ROOT.parent / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return ansible_playbook("playbooks/build.yml", "-e", f"llama_cpp_install_root={root}", *extra,
                                timeout=timeout)


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
    spec = catalog()[name]
    return fetch(spec, cache_dir() / "models", cache_dir(), progress=False)


# ---- shared by the lab tests of both engines' deploys (bad inputs, rollbacks) ----------------------------
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
