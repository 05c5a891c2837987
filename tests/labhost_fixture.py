"""Pytest plugin: a session-scoped throwaway systemd host (``scripts/labhost``) for end-to-end tests.

Register it once from ``tests/conftest.py``::

    pytest_plugins = ["tests.labhost_fixture"]

or import the fixture into a test module / conftest (``from tests.labhost_fixture import labhost``).
Both ways give the same host: it is created once per process, however often the fixture is defined.

The ``labhost`` fixture yields a :class:`Lab` with ``name``, ``ip``, ``inventory`` (path of the Ansible
inventory: groups ``llama_servers`` and ``monitoring``), and helpers ``run(cmd)`` (nsenter, as root inside),
``ssh(cmd)``, ``systemctl(...)``, ``show(unit, prop)`` and ``ansible(...)`` / ``ansible_playbook(...)``.

Environment:
  ``SPECOPS_LAB_TEST_NAME``  host name (default ``specops-test``; under xdist the worker's id is appended,
                             ``specops-test-gw1``: each worker that runs systemd modules has a host of its own)
  ``SPECOPS_LAB_KEEP=1``     reuse an existing host and keep it after the session (default: fresh, destroyed)
  ``SPECOPS_CACHE``          where rootfs tarballs and hosts live (default ``~/.cache/specops``)
Needs root; skips otherwise. The first run ever builds the rootfs with debootstrap (a few minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from specops_lab.labhost import LabError, LabHost

DEFAULT_NAME = "specops-test"
T = TypeVar("T")


@dataclass
class Lab:
    host: LabHost
    boot_state: str = "running"
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def ip(self) -> str:
        return self.host.ip

    @property
    def inventory(self) -> Path:
        return self.host.inventory

    @property
    def leader_pid(self) -> int | None:
        return self.host.leader_pid()

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = 120,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` as root inside the host via nsenter (a string goes through ``sh -c``)."""
        return self.host.exec(cmd, check=check, timeout=timeout, input=input)

    def ssh(self, cmd: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` over SSH as root (the way Ansible gets in)."""
        proc = subprocess.run(
            self.host.ssh_argv([cmd]),
            text=True,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            out = proc.stderr + proc.stdout
            raise AssertionError(f"ssh {self.name} {cmd!r} failed ({proc.returncode}): {out}")
        return proc

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["systemctl", *args], check=check)

    def show(self, unit: str, prop: str) -> str:
        return self.run(["systemctl", "show", "-p", prop, "--value", unit]).stdout.strip()

    def wait_for(
        self, predicate: Callable[[], T], timeout: float = 15, interval: float = 0.2, what: str = "condition"
    ) -> T:
        """Poll ``predicate`` until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: timed out after {timeout} s waiting for {what}")
            time.sleep(interval)

    def ansible(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``ansible -i INVENTORY ...`` from the running interpreter's environment."""
        return _ansible_tool("ansible", self.inventory, args, timeout, check)

    def ansible_playbook(
        self, *args: str, timeout: float = 1800, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return _ansible_tool("ansible-playbook", self.inventory, args, timeout, check)


def find_tool(name: str) -> str:
    """A console script next to the running interpreter (the venv) first, then on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        raise pytest.UsageError(f"{name} not found: install ansible-core into this environment")
    return found


def _ansible_tool(
    tool: str, inventory: Path, args: Sequence[str], timeout: float, check: bool
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
    }
    cmd = [find_tool(tool), "-i", str(inventory), *args]
    proc = subprocess.run(
        cmd, text=True, capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        out = f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out}")
    return proc


_LABS: dict[str, Lab] = {}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "yes", "true", "on")


def bring_up(name: str, *, fresh: bool, peers: bool = False) -> Lab:
    """Create and boot ``name`` (destroying a leftover first when ``fresh``); ``peers``: routed to the other
    peered lab hosts (a fleet)."""
    host = LabHost(name)
    if fresh and host.dir.exists():
        host.destroy()
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    host.create(peers=peers)
    timings["create"] = time.monotonic() - t0
    t0 = time.monotonic()
    state = host.start()
    timings["start"] = time.monotonic() - t0
    return Lab(host=host, boot_state=state, timings=timings)


@pytest.fixture(scope="session")
def labhost() -> Iterator[Lab]:
    """A booted throwaway systemd host, shared by the whole session."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the lab host needs root on Linux (systemd-nspawn, network namespaces)")
    name = os.environ.get("SPECOPS_LAB_TEST_NAME", DEFAULT_NAME)
    if worker := os.environ.get("PYTEST_XDIST_WORKER"):
        name = f"{name}-{worker}"
    keep = _env_flag("SPECOPS_LAB_KEEP")
    lab = _LABS.get(name)
    if lab is None:
        try:
            lab = bring_up(name, fresh=not keep)
        except LabError as e:
            pytest.fail(f"could not bring up lab host {name!r}: {e}", pytrace=False)
        _LABS[name] = lab
        owner = True
    else:
        owner = False
    try:
        yield lab
    finally:
        if owner:
            _LABS.pop(name, None)
            if not keep:
                lab.host.destroy()
