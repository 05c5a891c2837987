"""Throwaway systemd hosts for end-to-end tests: debootstrap + systemd-nspawn in a private network namespace.

A lab host is a Debian rootfs booted with ``systemd-nspawn -b`` (systemd is PID 1 inside), living in its own
network namespace joined to the machine by one veth pair on a private /30. Ansible reaches it over SSH with a
per-host key; ``labhost inventory NAME`` prints the inventory path. Nothing inside can reach anything but the
host end of its veth: no default route, forwarding disabled on the veth. A host created with ``--peers`` (a fleet
behind a load balancer) also reaches the other peered lab hosts: a route to the lab network through the host end
of its veth, and forwarding on for that veth only (the machine's own ip_forward stays as it is, so nothing inside
reaches beyond the lab network).

Everything lives under ``$SPECOPS_CACHE`` (default ``~/.cache/specops``)::

    rootfs/<suite>-<hash>.tar.zst     cached debootstrap result (hash of suite, variant, packages, recipe)
    hosts/<NAME>/rootfs/              the host's own copy, unpacked from the tarball
    hosts/<NAME>/state.json           addresses, netns and veth names
    hosts/<NAME>/inventory.yml        Ansible inventory (groups llama_servers and monitoring)
    hosts/<NAME>/id_ed25519[.pub]     per-host SSH key for root
    hosts/<NAME>/nspawn.log           console and systemd-nspawn output
    hosts/<NAME>/nspawn.pid           pid and start time of the running systemd-nspawn

Environment: ``SPECOPS_LAB_SUITE`` (bookworm), ``SPECOPS_LAB_MIRROR`` (http://deb.debian.org/debian),
``SPECOPS_LAB_NET`` (10.231.0.0/16, carved into /30s), ``SPECOPS_LAB_EXTRA_PACKAGES`` (comma separated).

Needs root, Linux, and the tools in :data:`HOST_TOOLS` (installed with apt-get when missing).
Only the Python standard library is used so ``scripts/labhost`` runs before any venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_NET = "10.231.0.0/16"
VARIANT = "minbase"
# libgomp1: llama.cpp CPU builds link OpenMP. python3: Ansible. sudo/procps: what roles and tests expect.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "openssh-server",
    "iproute2",
    "libgomp1",
    "ca-certificates",
    "sudo",
    "procps",
    # the watching half of the product: the exporter's DynamicUser must resolve for dbus (libnss-systemd), and
    # Prometheus is the Debian package the monitoring role configures (the lab host has no package mirror)
    "libnss-systemd",
    "prometheus",
    # the load balancer in front of the servers (roles/loadbalancer, tests/integration/test_fleet.py)
    "haproxy",
)
# Bump when the post-debootstrap recipe changes so cached tarballs are rebuilt.
RECIPE_VERSION = "2"

# command -> Debian package providing it
HOST_TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "zstd": "zstd",
    "nsenter": "util-linux",
    "tar": "tar",
}

DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
CONTAINER_IF = "host0"
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SSH_OPTIONS = (
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR",
    "-o", "BatchMode=yes",
    "-o", "ConnectTimeout=10",
)  # fmt: skip

BOOT_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


class LabError(Exception):
    """Something the user has to act on; the message says what."""

# the builder's settings for every lab run (the inventory's all.vars): see _write_inventory
LAB_BUILD_VARS: dict[str, object] = {"llama_cpp_rpc": True}


def log(msg: str) -> None:
    print(f"labhost: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Config:
    cache: Path
    suite: str = DEFAULT_SUITE
    mirror: str = DEFAULT_MIRROR
    net: str = DEFAULT_NET
    extra_packages: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Config:
        env = dict(os.environ if env is None else env)
        cache = Path(env.get("SPECOPS_CACHE") or Path.home() / ".cache" / "specops").expanduser()
        extra = tuple(p.strip() for p in env.get("SPECOPS_LAB_EXTRA_PACKAGES", "").split(",") if p.strip())
        return cls(
            cache=cache,
            suite=env.get("SPECOPS_LAB_SUITE") or DEFAULT_SUITE,
            mirror=env.get("SPECOPS_LAB_MIRROR") or DEFAULT_MIRROR,
            net=env.get("SPECOPS_LAB_NET") or DEFAULT_NET,
            extra_packages=extra,
        )

    @property
    def packages(self) -> list[str]:
        return sorted(set(PACKAGES) | set(self.extra_packages))

    @property
    def rootfs_key(self) -> str:
        text = "\n".join([self.suite, VARIANT, RECIPE_VERSION, *self.packages])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def tarball(self) -> Path:
        return self.cache / "rootfs" / f"{self.suite}-{self.rootfs_key}.tar.zst"

    @property
    def hosts_dir(self) -> Path:
        return self.cache / "hosts"


def validate_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise LabError(
            f"invalid host name {name!r}: use 1-32 lowercase letters, digits and '-', starting with a letter"
        )
    return name


def short_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def netns_name(name: str) -> str:
    return f"specops-{name}"


def veth_name(name: str) -> str:
    # Interface names are limited to 15 characters: derive a stable short one.
    return f"slab{short_hash(name)}"


def subnet_slots(net: str) -> list[ipaddress.IPv4Network]:
    network = ipaddress.IPv4Network(net)
    if network.prefixlen > 30:
        raise LabError(f"SPECOPS_LAB_NET={net} is too small: it must hold at least one /30")
    return list(network.subnets(new_prefix=30))


def pick_subnet(
    name: str, net: str, taken: set[ipaddress.IPv4Network], busy: Sequence[ipaddress.IPv4Network] = ()
) -> ipaddress.IPv4Network:
    """Deterministic /30 for ``name``: hash into the range, then probe past subnets in use.

    ``taken`` are other lab hosts' subnets, ``busy`` are networks already routed or addressed on this machine.
    """
    slots = subnet_slots(net)
    start = int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(slots)
    for i in range(len(slots)):
        cand = slots[(start + i) % len(slots)]
        if cand in taken or any(cand.overlaps(b) for b in busy):
            continue
        return cand
    raise LabError(f"no free /30 left in {net}: destroy some lab hosts or set SPECOPS_LAB_NET")


# --------------------------------------------------------------------------------------------- helpers


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    capture: bool = True,
    timeout: float | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
    what: str | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = [os.fspath(c) for c in cmd]
    try:
        proc = subprocess.run(
            argv,
            check=False,
            text=True,
            input=input,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            stdin=None if input is not None else subprocess.DEVNULL,
            timeout=timeout,
            env=env,
        )
    except FileNotFoundError as e:
        raise LabError(f"{argv[0]} not found: install it (see `labhost --help`)") from e
    except subprocess.TimeoutExpired as e:
        raise LabError(f"{what or argv[0]} timed out after {timeout:.0f} s: {' '.join(argv)}") from e
    if check and proc.returncode != 0:
        err = (proc.stderr or "").strip() or (proc.stdout or "").strip()
        raise LabError(f"{what or ' '.join(argv)} failed (exit {proc.returncode}): {err[-2000:]}")
    return proc


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "labhost needs root (network namespaces, systemd-nspawn, debootstrap): run it with sudo"
        )
    if sys.platform != "linux":
        raise LabError("labhost needs Linux (systemd-nspawn and network namespaces)")


def missing_tools() -> dict[str, str]:
    missing = {cmd: pkg for cmd, pkg in HOST_TOOLS.items() if shutil.which(cmd) is None}
    if not Path(DEBIAN_KEYRING).exists():  # Ubuntu: debootstrap of a Debian suite needs Debian's keys
        missing[DEBIAN_KEYRING] = "debian-archive-keyring"
    return missing


def host_runs_systemd() -> bool:
    return Path("/run/systemd/system").is_dir()


def ensure_host_tools(install: bool = True) -> None:
    """Install the tools labhost needs with apt-get when any is missing (no-op otherwise)."""
    missing = missing_tools()
    if not missing:
        return
    pkgs = sorted(set(missing.values()))
    if not install or shutil.which("apt-get") is None:
        raise LabError(f"missing {', '.join(sorted(missing))}: install the packages {' '.join(pkgs)}")
    log(f"installing {' '.join(pkgs)} with apt-get (missing: {', '.join(sorted(missing))})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "install", "-y", "--no-install-recommends", *pkgs]
    if run(apt, check=False, capture=False, env=env).returncode != 0:
        run(["apt-get", "update"], capture=False, env=env, what="apt-get update")
        run(apt, capture=False, env=env, what=f"apt-get install {' '.join(pkgs)}")
    still = missing_tools()
    if still:
        raise LabError(f"still missing after apt-get install: {', '.join(sorted(still))}")


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def proc_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of ``pid``, or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap our own child
        return None
    return int(fields[19])


def children_of(pid: int) -> list[int]:
    kids: list[int] = []
    for tdir in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            kids += [int(p) for p in (tdir / "children").read_text().split()]
    return kids


def ns_pids(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    return []


def find_leader(nspawn_pid: int) -> int | None:
    """The container's PID 1 (systemd): the descendant of systemd-nspawn that is pid 1 in a child pid ns."""
    todo, seen = [nspawn_pid], set()
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        for kid in children_of(pid):
            nsp = ns_pids(kid)
            if len(nsp) >= 2 and nsp[-1] == 1:
                return kid
            todo.append(kid)
    return None


def busy_networks(exclude_dev: set[str]) -> list[ipaddress.IPv4Network]:
    """IPv4 networks addressed or routed on this machine (except our own veths and the default route)."""
    nets: list[ipaddress.IPv4Network] = []
    with contextlib.suppress(LabError, ValueError):
        for link in json.loads(run(["ip", "-j", "-4", "addr"]).stdout or "[]"):
            if link.get("ifname") in exclude_dev:
                continue
            for a in link.get("addr_info", []):
                nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
        for r in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
            dst = r.get("dst", "")
            if (
                r.get("dev") in exclude_dev
                or dst in ("default", "")
                or r.get("type") in ("local", "broadcast")
            ):
                continue
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)


def yaml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid double-quoted YAML scalar


# --------------------------------------------------------------------------------------------- rootfs


def ensure_rootfs_tarball(cfg: Config) -> Path:
    """Build ``cfg.tarball`` with debootstrap unless it is cached."""
    tarball = cfg.tarball
    if tarball.exists():
        return tarball
    with file_lock(tarball.with_name(f".{tarball.name}.lock")):
        if tarball.exists():
            return tarball
        tarball.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".build-{cfg.suite}-", dir=tarball.parent))
        try:
            root = work / "rootfs"
            debs = cfg.cache / "rootfs" / "debs"  # downloaded .debs, reused when the package list changes
            debs.mkdir(parents=True, exist_ok=True)
            cmd = [
                "debootstrap",
                f"--variant={VARIANT}",
                f"--include={','.join(cfg.packages)}",
                f"--cache-dir={debs}",
                cfg.suite,
                str(root),
                cfg.mirror,
            ]
            log(f"debootstrap {cfg.suite} from {cfg.mirror} (cold: a few minutes; cached afterwards) ...")
            t0 = time.monotonic()
            proc = run(cmd, check=False, what="debootstrap")
            if proc.returncode != 0:
                logfile = root / "debootstrap" / "debootstrap.log"
                detail = logfile.read_text()[-1500:] if logfile.exists() else (proc.stderr or "")[-1500:]
                raise LabError(
                    f"debootstrap failed (exit {proc.returncode}); check that {cfg.mirror} is reachable and "
                    f"that suite {cfg.suite!r} and packages {','.join(cfg.packages)} exist.\n{detail}"
                )
            log(f"timing: debootstrap (cold) {time.monotonic() - t0:.1f} s")
            prepare_rootfs(root)
            t0 = time.monotonic()
            part = tarball.with_name(f".{tarball.name}.part")
            run(
                ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls",
                 "-I", "zstd -T0 -3", "-C", str(root), "-cf", str(part), "."],
                what="tar rootfs",
            )  # fmt: skip
            part.replace(tarball)
            size = tarball.stat().st_size / 2**20
            log(f"timing: rootfs tarball {time.monotonic() - t0:.1f} s ({size:.0f} MiB) -> {tarball}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tarball


def prepare_rootfs(root: Path) -> None:
    """Host-independent cleanup of a fresh debootstrap, before it is cached."""
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()  # each host gets its own host keys
    write_text(root / "etc" / "machine-id", "")  # each host gets its own machine id
    with contextlib.suppress(FileNotFoundError):
        (root / "var" / "lib" / "dbus" / "machine-id").unlink()
    for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "ssh.service"
    if not link.is_symlink():
        link.symlink_to("/lib/systemd/system/ssh.service")
    # Prometheus runs where the monitoring role puts it, not on every lab host: its package enables it at boot.
    for unit in ("prometheus.service", "prometheus-node-exporter.service"):
        (wants / unit).unlink(missing_ok=True)
    # No network management inside: the address is configured from outside, in the namespace.
    dropin = root / "etc" / "ssh" / "sshd_config.d"
    dropin.mkdir(parents=True, exist_ok=True)
    write_text(dropin / "specops-lab.conf", "PermitRootLogin prohibit-password\nUseDNS no\n")


# --------------------------------------------------------------------------------------------- hosts


@dataclass
class State:
    name: str
    subnet: str
    host_ip: str
    container_ip: str
    netns: str
    veth: str
    rootfs_tarball: str
    created: float
    peers: bool = False  # routed to the other peered lab hosts (a fleet); otherwise the controller only


class LabHost:
    """One throwaway host. Methods are idempotent; all of them except the read-only ones need root."""

    def __init__(self, name: str, cfg: Config | None = None):
        self.name = validate_name(name)
        self.cfg = cfg or Config.from_env()
        self.dir = self.cfg.hosts_dir / name
        self.rootfs = self.dir / "rootfs"
        self.state_file = self.dir / "state.json"
        self.inventory = self.dir / "inventory.yml"
        self.ssh_config = self.dir / "ssh_config"
        self.key = self.dir / "id_ed25519"
        self.logfile = self.dir / "nspawn.log"
        self.pidfile = self.dir / "nspawn.pid"
        self.lockfile = self.cfg.hosts_dir / ".locks" / f"{name}.lock"

    # ---- state

    def exists(self) -> bool:
        return self.state_file.exists() and self.rootfs.is_dir()

    def state(self) -> State:
        try:
            return State(**json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            raise LabError(
                f"lab host {self.name!r} does not exist: run `labhost create {self.name}`"
            ) from None

    @property
    def ip(self) -> str:
        return self.state().container_ip

    def nspawn_pid(self) -> int | None:
        try:
            pid_s, start_s = self.pidfile.read_text().split()
            pid, start = int(pid_s), int(start_s)
        except (OSError, ValueError):
            return None
        return pid if proc_start_time(pid) == start else None

    def leader_pid(self) -> int | None:
        pid = self.nspawn_pid()
        return find_leader(pid) if pid else None

    def is_running(self) -> bool:
        return self.nspawn_pid() is not None

    def system_state(self) -> str:
        """``systemctl is-system-running`` inside, or 'stopped' / 'absent' / 'booting'."""
        if not self.exists():
            return "absent"
        if not self.is_running():
            return "stopped"
        leader = self.leader_pid()
        if leader is None:
            return "booting"
        proc = run(self.nsenter_argv(["systemctl", "is-system-running"], leader), check=False, timeout=15)
        return (proc.stdout or "").strip() or "booting"

    def failed_units(self) -> list[str]:
        proc = self.exec(["systemctl", "list-units", "--failed", "--plain", "--no-legend"], check=False)
        return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]

    # ---- create

    def create(self, peers: bool = False) -> bool:
        """Unpack a fresh rootfs, key it and write the inventory. Returns False when it already existed.
        ``peers``: the host also reaches the other peered lab hosts (a fleet behind a load balancer)."""
        require_root()
        ensure_host_tools()
        with file_lock(self.lockfile):
            if self.exists():
                log(f"{self.name}: exists ({self.dir}); nothing to do")
                return False
            if self.dir.exists():
                log(f"{self.name}: removing a half-created host at {self.dir}")
                self._remove_dir()
            tarball = ensure_rootfs_tarball(self.cfg)
            self.dir.mkdir(parents=True)
            t0 = time.monotonic()
            tmp = self.dir / "rootfs.partial"
            tmp.mkdir()
            run(
                ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls",
                 "-I", "zstd -T0", "-C", str(tmp), "-xf", str(tarball)],
                what="unpack rootfs",
            )  # fmt: skip
            tmp.rename(self.rootfs)
            log(f"timing: rootfs restore (warm) {time.monotonic() - t0:.1f} s")
            self._personalize()
            with file_lock(self.cfg.hosts_dir / ".locks" / "subnets.lock"):
                state = self._allocate(tarball, peers)
                write_text(self.state_file, json.dumps(asdict(state), indent=2) + "\n")
            self._write_inventory(state)
            log(f"{self.name}: created, {state.container_ip} (host side {state.host_ip}), {self.inventory}")
        return True

    def _personalize(self) -> None:
        root = self.rootfs
        write_text(root / "etc" / "hostname", f"{self.name}\n")
        write_text(
            root / "etc" / "hosts",
            f"127.0.0.1\tlocalhost\n127.0.1.1\t{self.name}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        )
        write_text(root / "etc" / "machine-id", uuid.uuid4().hex + "\n", 0o444)
        run(["ssh-keygen", "-A", "-f", str(root)], what="ssh-keygen -A (host keys)")
        if not self.key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"specops-lab-{self.name}",
                 "-f", str(self.key)], what="ssh-keygen (lab key)")  # fmt: skip
        ssh_dir = root / "root" / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        ssh_dir.chmod(0o700)
        write_text(ssh_dir / "authorized_keys", self.key.with_suffix(".pub").read_text(), 0o600)
        # Ansible's modules run from zips, which Python compiles on every import: zipcache.py keeps the code
        site = root / "usr" / "lib" / "python3" / "dist-packages"
        write_text(site / "specops_lab_zipcache.py", (Path(__file__).parent / "zipcache.py").read_text())
        write_text(site / "zz-specops-lab-zipcache.pth", "import specops_lab_zipcache\n")

    def _allocate(self, tarball: Path, peers: bool) -> State:
        taken: set[ipaddress.IPv4Network] = set()
        ours: set[str] = set()
        for other in self.cfg.hosts_dir.glob("*/state.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                data = json.loads(other.read_text())
                taken.add(ipaddress.IPv4Network(data["subnet"]))
                ours.add(data["veth"])
        subnet = pick_subnet(self.name, self.cfg.net, taken, busy_networks(ours))
        hosts = list(subnet.hosts())
        return State(
            name=self.name,
            subnet=str(subnet),
            host_ip=str(hosts[0]),
            container_ip=str(hosts[1]),
            netns=netns_name(self.name),
            veth=veth_name(self.name),
            rootfs_tarball=str(tarball),
            created=time.time(),
            peers=peers,
        )

    def _write_inventory(self, state: State) -> None:
        common = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
        hostvars = {
            "ansible_host": state.container_ip,
            "ansible_user": "root",
            "ansible_connection": "ssh",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": common,
            # Ansible's own ssh_args less -C: compression is for slow links; on the host's veth it only costs CPU
            # (the suite's ssh masters and sshd: 1.5 CPU-minutes a run, compressing zips already compressed)
            "ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=60s",
            "ansible_python_interpreter": "/usr/bin/python3",
            # no package mirror in here: the exporter's libnss-systemd and Prometheus come with the rootfs
            "exporter_install_packages": False,
            "monitoring_install_packages": False,
            "loadbalancer_install_packages": False,
        }
        lines = [
            f"# specops lab host {self.name}: written by scripts/labhost, regenerated on create",
            "all:",
            "  children:",
            "    llama_servers:",
            "      hosts:",
            f"        {self.name}:",
            *(f"          {k}: {yaml_str(v)}" for k, v in hostvars.items()),
            "    monitoring:",
            "      hosts:",
            f"        {self.name}: {{}}",
            # every host of a run with this inventory, the builder included: the lab's one llama.cpp build carries
            # the RPC backend and ggml-rpc-server (issue 81: two devices of one CPU machine); tests/lab.py builds
            # the suite's with the same setting, so a lab deploy never compiles another
            "  vars:",
            *(f"    {k}: {yaml_str(v)}" for k, v in LAB_BUILD_VARS.items()),
            "",
        ]
        write_text(self.inventory, "\n".join(lines))
        write_text(
            self.ssh_config,
            f"Host {self.name}\n  HostName {state.container_ip}\n  User root\n  IdentityFile {self.key}\n"
            "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n",
        )

    # ---- network

    def _netns_path(self, state: State) -> Path:
        return Path("/run/netns") / state.netns

    def _link_exists(self, dev: str, netns: str | None = None) -> bool:
        cmd = ["ip", *(["-n", netns] if netns else []), "link", "show", "dev", dev]
        return run(cmd, check=False).returncode == 0

    def network_up(self) -> None:
        st = self.state()
        if not self._netns_path(st).exists():
            proc = run(["ip", "netns", "add", st.netns], check=False)
            if proc.returncode != 0:
                raise LabError(
                    f"cannot create network namespace {st.netns}: {proc.stderr.strip()} "
                    "(labhost needs root with CAP_SYS_ADMIN/CAP_NET_ADMIN, e.g. a privileged container)"
                )
        if not self._link_exists(st.veth):
            if self._link_exists(CONTAINER_IF, st.netns):
                run(["ip", "-n", st.netns, "link", "del", CONTAINER_IF])
            proc = run(["ip", "link", "add", st.veth, "type", "veth", "peer", "name", CONTAINER_IF,
                        "netns", st.netns], check=False)  # fmt: skip
            if proc.returncode != 0:
                raise LabError(
                    f"cannot create veth pair {st.veth}: {proc.stderr.strip()} (veth module missing?)"
                )
        # The container reaches only the host end of its /30: no forwarding from the veth, no IPv6. A peered host
        # reaches the other peered hosts too: forwarding from its veth (per device; ip_forward stays as it is) and,
        # inside, a route to the lab network and nothing else.
        for knob, value in (
            (f"ipv4/conf/{st.veth}/forwarding", "1" if st.peers else "0"),
            (f"ipv6/conf/{st.veth}/disable_ipv6", "1"),
        ):
            with contextlib.suppress(OSError):
                Path(f"/proc/sys/net/{knob}").write_text(value)
        run(["ip", "addr", "replace", f"{st.host_ip}/30", "dev", st.veth])
        run(["ip", "link", "set", st.veth, "up"])
        run(["ip", "-n", st.netns, "addr", "replace", f"{st.container_ip}/30", "dev", CONTAINER_IF])
        run(["ip", "-n", st.netns, "link", "set", CONTAINER_IF, "up"])
        run(["ip", "-n", st.netns, "link", "set", "lo", "up"])
        if st.peers:
            run(["ip", "-n", st.netns, "route", "replace", self.cfg.net, "via", st.host_ip])

    def network_down(self) -> None:
        try:
            st = self.state()
            veth, ns = st.veth, st.netns
        except LabError:
            veth, ns = veth_name(self.name), netns_name(self.name)
        if self._link_exists(veth):
            run(["ip", "link", "del", veth], check=False)
        if Path("/run/netns", ns).exists():
            run(["ip", "netns", "del", ns], what=f"ip netns del {ns}")

    # ---- start / stop

    def start(self, timeout: float = BOOT_TIMEOUT) -> str:
        """Boot the host and wait for systemd. Returns 'running' or 'degraded'. No-op when already up."""
        require_root()
        ensure_host_tools()
        with file_lock(self.lockfile):
            st = self.state()
            if not self.rootfs.is_dir():
                raise LabError(f"{self.rootfs} is missing: run `labhost destroy {self.name}`, then create")
            if self.is_running():
                result = self.wait_ready(timeout)
                log(f"{self.name}: already running ({result}); nothing to do")
                return result
            self.network_up()
            cmd = [
                "systemd-nspawn",
                "-D", str(self.rootfs),
                "-M", self.name,
                "-b",
                "--register=no",
                "--keep-unit",
                "--console=read-only",
                f"--network-namespace-path={self._netns_path(st)}",
            ]  # fmt: skip
            if host_runs_systemd():
                # --keep-unit wants a unit of its own to keep: a transient scope with a delegated cgroup.
                # systemd-run --scope execs systemd-nspawn in place, so the recorded pid stays right.
                scope = ["systemd-run", "--scope", "--quiet", "--collect", f"--unit=specops-lab-{self.name}",
                         "--property=Delegate=yes"]  # fmt: skip
                cmd = scope + cmd
            t0 = time.monotonic()
            with open(self.logfile, "ab") as logfh:
                logfh.write(f"\n=== labhost start {time.ctime()}: {' '.join(cmd)}\n".encode())
                logfh.flush()
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=logfh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            # Our Popen object is dropped: the process lives on in its own session and is tracked by pidfile.
            start = proc_start_time(proc.pid)
            write_text(self.pidfile, f"{proc.pid} {start}\n")
            result = self.wait_ready(timeout)
            log(f"timing: boot to {result} {time.monotonic() - t0:.2f} s")
            return result

    def wait_ready(self, timeout: float = BOOT_TIMEOUT) -> str:
        st = self.state()
        deadline = time.monotonic() + timeout
        last = "booting"
        while time.monotonic() < deadline:
            if not self.is_running():
                raise LabError(f"{self.name}: systemd-nspawn exited during boot:\n{self._log_tail()}")
            last = self.system_state()
            if last in ("running", "degraded"):
                break
            if last in ("maintenance", "stopping"):
                raise LabError(f"{self.name}: system state {last!r}; see {self.logfile}:\n{self._log_tail()}")
            time.sleep(0.1)
        else:
            raise LabError(f"{self.name}: not up after {timeout:.0f} s (state {last!r}):\n{self._log_tail()}")
        while not tcp_open(st.container_ip, 22):
            if time.monotonic() > deadline:
                raise LabError(
                    f"{self.name}: sshd not listening on {st.container_ip}:22 after {timeout:.0f} s"
                )
            time.sleep(0.1)
        if last == "degraded":
            log(f"{self.name}: degraded; failed units: {', '.join(self.failed_units()) or '?'}")
        return last

    def _log_tail(self, n: int = 30) -> str:
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()[-n:]
            return "\n".join([*lines, f"(full log: {self.logfile})"])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Power off cleanly (SIGRTMIN+4 to systemd), kill after ``timeout``; then drop the network."""
        require_root()
        with file_lock(self.lockfile):
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        pid = self.nspawn_pid()
        if pid is not None:
            t0 = time.monotonic()
            leader = find_leader(pid)
            if leader is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leader, signal.SIGRTMIN + 4)  # systemd: poweroff
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)  # nspawn forwards as a clean shutdown
            if not wait_gone(pid, timeout):
                log(f"{self.name}: no clean poweroff within {timeout:.0f} s; killing")
                leader = find_leader(pid)
                for victim in (leader, pid):
                    if victim is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(victim, signal.SIGKILL)
                if not wait_gone(pid, 10):
                    raise LabError(f"{self.name}: systemd-nspawn (pid {pid}) survived SIGKILL")
            else:
                log(f"{self.name}: powered off in {time.monotonic() - t0:.1f} s")
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()
        self.network_down()

    def destroy(self) -> None:
        """Stop (or kill), remove netns, veth and every file of the host. Safe to call twice."""
        require_root()
        validate_name(self.name)
        with file_lock(self.lockfile):
            if self.nspawn_pid() is None:
                self._kill_strays()
            self._stop(timeout=15)
            if self.dir.exists():
                t0 = time.monotonic()
                self._remove_dir()
                log(f"timing: removed {self.dir} in {time.monotonic() - t0:.1f} s")
        with contextlib.suppress(FileNotFoundError):
            self.lockfile.unlink()
        log(f"{self.name}: destroyed")

    def _kill_strays(self) -> None:
        """Kill any systemd-nspawn still booted from this rootfs (say, its pidfile was lost)."""
        needle = f"\0-D\0{self.rootfs}\0".encode()
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                data = b"\0" + cmdline.read_bytes()
            except OSError:
                continue
            if needle in data and b"systemd-nspawn\0" in data:
                pid = int(cmdline.parent.name)
                log(f"{self.name}: killing stray systemd-nspawn {pid} and its container")
                for victim in (find_leader(pid), pid):
                    if victim is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(victim, signal.SIGKILL)
                wait_gone(pid, 10)

    def _remove_dir(self) -> None:
        if not self.dir.exists():
            return
        prefix = str(self.dir.resolve()) + "/"
        mounts = [
            line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
            if (line.split()[1] + "/").startswith(prefix)
        ]  # fmt: skip
        for m in sorted(mounts, key=len, reverse=True):
            run(["umount", "-l", m], check=False)
        shutil.rmtree(self.dir)

    # ---- inside

    def nsenter_argv(self, cmd: Sequence[str], leader: int | None = None) -> list[str]:
        leader = leader or self.leader_pid()
        if leader is None:
            raise LabError(f"lab host {self.name!r} is not running: run `labhost start {self.name}`")
        term = os.environ.get("TERM", "dumb")
        env = ["/usr/bin/env", "-i", f"PATH={CONTAINER_PATH}", "HOME=/root", f"TERM={term}", "LANG=C.UTF-8"]
        return ["nsenter", "-t", str(leader), "-a", "--wdns=/", "--", *env, *cmd]

    def exec(self, cmd: Sequence[str] | str, *, check: bool = True, timeout: float | None = 120,
             input: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run ``cmd`` inside (a string goes through ``sh -c``) and capture its output."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return run(self.nsenter_argv(argv), check=check, timeout=timeout, input=input,
                   what=f"[{self.name}] {cmd if isinstance(cmd, str) else ' '.join(cmd)}")  # fmt: skip

    def ssh_argv(self, cmd: Sequence[str] = ()) -> list[str]:
        return ["ssh", *SSH_OPTIONS, "-i", str(self.key), f"root@{self.ip}", *cmd]

    def describe(self) -> dict[str, object]:
        info: dict[str, object] = {"name": self.name, "state": self.system_state(), "dir": str(self.dir)}
        if self.state_file.exists():
            st = self.state()
            info.update(ip=st.container_ip, host_ip=st.host_ip, netns=st.netns, veth=st.veth, peers=st.peers,
                        inventory=str(self.inventory), nspawn_pid=self.nspawn_pid(),
                        leader_pid=self.leader_pid())  # fmt: skip
        return info


def wait_gone(pid: int, timeout: float) -> bool:
    start = proc_start_time(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = proc_start_time(pid)
        if now is None or now != start:
            return True
        time.sleep(0.1)
    return proc_start_time(pid) is None


def tcp_open(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=1):
            return True
    except OSError:
        return False


def list_hosts(cfg: Config | None = None) -> list[LabHost]:
    cfg = cfg or Config.from_env()
    if not cfg.hosts_dir.is_dir():
        return []
    dirs = sorted(p for p in cfg.hosts_dir.iterdir() if p.is_dir() and NAME_RE.match(p.name))
    return [LabHost(p.name, cfg) for p in dirs]


# --------------------------------------------------------------------------------------------- cli


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="labhost",
        description="Throwaway systemd hosts (debootstrap + systemd-nspawn, private network namespace) "
        "for end-to-end tests. Needs root. Files under $SPECOPS_CACHE/hosts/NAME.",
        epilog="Typical: labhost create lab1 && labhost start lab1 && "
        "ansible -i $(labhost inventory lab1) all -m ping",
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    def add(cmd: str, help: str, with_name: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(cmd, help=help, description=help)
        if with_name:
            sp.add_argument("name", metavar="NAME")
        return sp

    peers_help = "route it to the other lab hosts created with --peers (a fleet); default: the controller only"
    sp = add("create", "unpack a fresh rootfs (debootstrap on first use), key it, write its inventory")
    sp.add_argument("--peers", action="store_true", help=peers_help)
    sp = add("start", "boot the host (creating it first if needed) and wait until systemd is running")
    sp.add_argument("--peers", action="store_true", help=f"when it creates the host: {peers_help}")
    sp.add_argument("--timeout", type=float, default=BOOT_TIMEOUT)
    sp = add("stop", "power off cleanly (kill after --timeout) and remove its network")
    sp.add_argument("--timeout", type=float, default=STOP_TIMEOUT)
    add("destroy", "stop and delete everything of the host (safe to repeat)")
    sp = add("status", "show state, addresses and pids (exit 0 up, 3 stopped, 4 absent)")
    sp.add_argument("--json", action="store_true")
    add("inventory", "print the path of the host's Ansible inventory")
    sp = add("ssh", "ssh into the host as root (optionally run CMD)")
    sp.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD")
    sp = add("exec", "run CMD inside via nsenter (default: an interactive shell)")
    sp.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD")
    sp = add("list", "list lab hosts and their state", with_name=False)
    sp.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except LabError as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.cmd == "list":
        rows = [h.describe() for h in list_hosts()]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(f"{r['name']:<24} {r['state']:<10} {r.get('ip', '-'):<16} {r.get('inventory', '')}")
        return 0
    host = LabHost(args.name)
    if args.cmd == "create":
        host.create(peers=args.peers)
        print(host.inventory)
    elif args.cmd == "start":
        if not host.exists():
            host.create(peers=args.peers)
        host.start(timeout=args.timeout)
        print(host.inventory)
    elif args.cmd == "stop":
        host.stop(timeout=args.timeout)
    elif args.cmd == "destroy":
        host.destroy()
    elif args.cmd == "status":
        info = host.describe()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            for k, v in info.items():
                print(f"{k + ':':<12} {v}")
        return {"running": 0, "degraded": 0, "stopped": 3, "absent": 4}.get(str(info["state"]), 1)
    elif args.cmd == "inventory":
        host.state()  # raises when absent
        print(host.inventory)
    elif args.cmd == "ssh":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        os.execvp("ssh", host.ssh_argv(cmd))
    elif args.cmd == "exec":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        os.execvp("nsenter", host.nsenter_argv(cmd or ["/bin/bash", "-l"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
