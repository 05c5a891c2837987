"""The throwaway systemd host (scripts/labhost): pure logic here, a real booted host under ``-m systemd``."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from specops_lab import labhost as lh

# Same module object as when tests/conftest.py lists it: pytest registers a plugin once by name.
pytest_plugins = ["tests.labhost_fixture"]

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------- pure logic


def test_subnet_is_deterministic_and_in_range() -> None:
    a = lh.pick_subnet("alpha", "10.231.0.0/16", set())
    assert a == lh.pick_subnet("alpha", "10.231.0.0/16", set())
    assert a.prefixlen == 30 and a.subnet_of(ipaddress.IPv4Network("10.231.0.0/16"))
    assert a != lh.pick_subnet("beta", "10.231.0.0/16", set())


def test_subnet_skips_taken_and_busy() -> None:
    first = lh.pick_subnet("alpha", "10.231.0.0/16", set())
    second = lh.pick_subnet("alpha", "10.231.0.0/16", {first})
    assert second != first
    busy = [ipaddress.IPv4Network(f"{first.network_address}/24", strict=False)]
    third = lh.pick_subnet("alpha", "10.231.0.0/16", set(), busy)
    assert not third.overlaps(busy[0])
    with pytest.raises(lh.LabError, match="no free /30"):
        lh.pick_subnet("alpha", "10.231.0.0/30", {ipaddress.IPv4Network("10.231.0.0/30")})


@pytest.mark.parametrize("bad", ["", "A", "1abc", "a_b", "a-", "x" * 40, "../etc"])
def test_bad_names_rejected(bad: str) -> None:
    with pytest.raises(lh.LabError, match="invalid host name"):
        lh.validate_name(bad)


def test_interface_names_fit_the_kernel_limit() -> None:
    assert len(lh.veth_name("a" * 32)) <= 15
    assert lh.veth_name("one") != lh.veth_name("two")


def test_rootfs_key_follows_package_list(tmp_path: Path) -> None:
    base = lh.Config(cache=tmp_path)
    more = lh.Config(cache=tmp_path, extra_packages=("curl",))
    assert base.tarball.name.startswith("bookworm-") and base.tarball.name.endswith(".tar.zst")
    assert base.rootfs_key != more.rootfs_key
    assert lh.Config(cache=tmp_path, mirror="http://example.invalid/debian").rootfs_key == base.rootfs_key


def test_inventory_groups_and_vars(tmp_path: Path) -> None:
    host = lh.LabHost("inv-test", lh.Config(cache=tmp_path))
    host.dir.mkdir(parents=True)
    state = lh.State("inv-test", "10.231.7.4/30", "10.231.7.5", "10.231.7.6", "specops-inv-test", "slabx",
                     "t.tar.zst", 0.0)  # fmt: skip
    host._write_inventory(state)
    inv = yaml.safe_load(host.inventory.read_text())
    hv = inv["all"]["children"]["llama_servers"]["hosts"]["inv-test"]
    assert hv["ansible_host"] == "10.231.7.6"
    assert hv["ansible_user"] == "root"
    assert hv["ansible_ssh_private_key_file"] == str(host.key)
    assert "StrictHostKeyChecking=no" in hv["ansible_ssh_common_args"]
    assert "UserKnownHostsFile=/dev/null" in hv["ansible_ssh_common_args"]
    assert hv["ansible_python_interpreter"] == "/usr/bin/python3"
    assert "inv-test" in inv["all"]["children"]["monitoring"]["hosts"]


def test_cli_refuses_non_root_clearly(tmp_path: Path) -> None:
    cmd = [str(REPO / "scripts" / "labhost"), "create", "x"]
    if os.geteuid() == 0:  # drop to nobody to see what a non-root user gets
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    env = {**os.environ, "SPECOPS_CACHE": str(tmp_path)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/")
    assert proc.returncode == 1, proc.stderr
    assert "needs root" in proc.stderr and "sudo" in proc.stderr


def test_status_of_absent_host(tmp_path: Path) -> None:
    # lab/ is on pytest's sys.path (pyproject), not on a child's: pass it as scripts/labhost does
    path = os.pathsep.join(p for p in (str(REPO / "lab"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "SPECOPS_CACHE": str(tmp_path), "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-m", "specops_lab.labhost", "status", "nothing-here"],
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert proc.returncode == 4 and "absent" in proc.stdout


# ------------------------------------------------------------------------------------- real host


@pytest.mark.systemd
def test_boots_to_running(labhost) -> None:
    state = labhost.run(["systemctl", "is-system-running"], check=False).stdout.strip()
    failed = labhost.run("systemctl list-units --failed --plain --no-legend", check=False).stdout
    assert state == "running", f"system state {state!r}; failed units:\n{failed}"
    assert labhost.run("cat /proc/1/comm").stdout.strip() == "systemd"
    assert labhost.run("hostname").stdout.strip() == labhost.name


@pytest.mark.systemd
def test_ansible_reaches_it_over_ssh(labhost) -> None:
    assert labhost.ssh("systemctl is-system-running").stdout.strip() == "running"
    ping = labhost.ansible("all", "-m", "ping")
    assert re.search(r'ping"?: "?pong', ping.stdout), ping.stdout
    facts = labhost.ansible("llama_servers", "-m", "setup", "-a", "filter=ansible_service_mgr")
    assert re.search(r'ansible_service_mgr"?: "?systemd', facts.stdout), facts.stdout
    # the modules' code, compiled from their zips, is kept (lab/specops_lab/zipcache.py): the ping and the
    # setup module filled the cache, and python3 on the host starts with the hook and prints nothing
    kept = labhost.run(["sh", "-c", "ls /var/cache/specops-lab-pyc/*/ | wc -l"]).stdout
    assert int(kept) > 10, kept
    hook = labhost.run(["python3", "-c", "import zipimport; print(zipimport._compile_source.__module__)"])
    assert (hook.stdout, hook.stderr) == ("specops_lab_zipcache\n", ""), hook


@pytest.mark.systemd
def test_hardened_dynamic_user_unit_runs(labhost) -> None:
    unit = f"specops-hardened-{uuid.uuid4().hex[:8]}"
    script = (
        "id -u; touch /usr/specops-probe 2>/dev/null && echo USR_WRITABLE || echo USR_READONLY; "
        "touch $STATE_DIRECTORY/ok && echo STATE_OK"
    )
    props = [
        "DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
        "NoNewPrivileges=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "RestrictNamespaces=yes", "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes", "SystemCallArchitectures=native", "SystemCallFilter=@system-service",
        "CapabilityBoundingSet=", "StateDirectory=" + unit, "MemoryMax=1G",
    ]  # fmt: skip
    cmd = ["systemd-run", "--wait", "--pipe", "--quiet", f"--unit={unit}"]
    cmd += [f"--property={p}" for p in props]
    proc = labhost.run([*cmd, "/bin/sh", "-c", script], check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = proc.stdout.split()
    assert 61184 <= int(lines[0]) <= 65519, f"not a dynamic uid: {lines[0]}"
    assert "USR_READONLY" in lines and "STATE_OK" in lines


@pytest.mark.systemd
def test_kill_9_is_restarted(labhost) -> None:
    unit = f"specops-crashy-{uuid.uuid4().hex[:8]}.service"
    labhost.run(
        ["systemd-run", f"--unit={unit}", "--property=Restart=on-failure", "--property=RestartSec=200ms",
         "/bin/sleep", "infinity"]
    )  # fmt: skip
    try:
        first = labhost.wait_for(lambda: int(labhost.show(unit, "MainPID")), what="a main pid")
        assert labhost.show(unit, "NRestarts") == "0"
        labhost.run(["kill", "-9", str(first)])
        labhost.wait_for(lambda: int(labhost.show(unit, "NRestarts")) >= 1, what="NRestarts to grow")
        second = labhost.wait_for(lambda: int(labhost.show(unit, "MainPID")), what="a new main pid")
        assert second != first
        assert labhost.show(unit, "ActiveState") == "active"
    finally:
        labhost.systemctl("stop", unit, check=False)


@pytest.mark.systemd
def test_no_route_beyond_its_link(labhost) -> None:
    routes = labhost.run(["ip", "-4", "route"]).stdout
    assert "default" not in routes, routes
    # A route lookup sends nothing: anything beyond the /30 is simply unreachable.
    lookup = labhost.run(["ip", "route", "get", "192.0.2.1"], check=False)
    assert lookup.returncode != 0 and "unreachable" in lookup.stderr.lower(), lookup.stdout + lookup.stderr
    state = labhost.host.state()
    assert re.search(rf"^{re.escape(state.subnet)} dev host0", routes, re.M), routes
    assert labhost.run(["ip", "-4", "-o", "addr", "show", "host0"]).stdout.count("inet ") == 1
    forwarding = Path(f"/proc/sys/net/ipv4/conf/{state.veth}/forwarding").read_text().strip()
    assert forwarding == "0"


@pytest.mark.systemd
def test_lifecycle_is_idempotent_and_destroy_leaves_nothing(labhost) -> None:
    # `labhost` first, so that a cold rootfs build is paid once and this test only restores the tarball.
    from tests.labhost_fixture import bring_up

    lab = bring_up(f"{labhost.name}-lc", fresh=True)
    host = lab.host
    st = host.state()
    try:
        assert host.create() is False  # no-op on an existing host
        pid = host.nspawn_pid()
        assert lab.boot_state == "running" and pid
        assert host.start() == "running" and host.nspawn_pid() == pid  # no-op when running
        host.stop()
        assert host.nspawn_pid() is None and not Path("/proc", str(pid)).exists()
        assert host.system_state() == "stopped"
        assert host.start() == "running"
        pid = host.nspawn_pid()
        leader = host.leader_pid()
        host.pidfile.unlink()  # destroy must still find and end it
    finally:
        host.destroy()
    host.destroy()  # twice is fine
    assert not host.dir.exists()
    assert not Path("/run/netns", st.netns).exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert st.veth not in links
    for p in (pid, leader):
        assert not Path("/proc", str(p)).exists() or lh.proc_start_time(p) is None
    leftovers = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(host.rootfs).encode() in cmdline.read_bytes():
                leftovers.append(cmdline.parent.name)
        except OSError:
            continue
    assert not leftovers, f"processes still using {host.rootfs}: {leftovers}"
