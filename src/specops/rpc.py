"""llama.cpp's RPC devices: the ``ggml-rpc-server`` endpoints llama-server's ``--rpc`` takes (the knob ``rpc``).

A ``ggml-rpc-server`` process (tools/rpc, built with the llama_cpp role's ``llama_cpp_rpc``) offers its host's devices
over TCP; ``llama-server --rpc HOST:PORT[,HOST:PORT]`` adds them, named ``RPC0``, ``RPC1``, ... in the order given
in ``--list-devices`` and in the device lists (``device``, ``draft_device``; seen at 0c1e57098: ``RPC0:
127.0.0.1:50052``, ``RPC1: 127.0.0.1:50053``); its load log names each buffer after the server's own index and
endpoint instead (``RPC0[127.0.0.1:50053] model buffer size``). At the pinned
0c1e57098 the client splits each endpoint at its first ``:`` and connects over IPv4 only (ggml/src/ggml-rpc:
``parse_endpoint``, ``AF_INET``, ``gethostbyname``), so an endpoint is an IPv4 address or a host name, a ``:`` and a
port; an IPv6 address cannot be given.

``ggml-rpc-server`` has no authentication: whoever reaches its port can load tensors, run graphs on its device and read
its memory. :func:`rpc_problem` therefore refuses an endpoint beyond loopback unless the operator opts in
(``llama_server_rpc_remote``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

RPC_SERVER = "ggml-rpc-server"  # the binary (and CMake target) that serves a device
DEFAULT_PORT = 50052  # ggml-rpc-server's default port at 0c1e57098
REMOTE_VAR = "llama_server_rpc_remote"  # the role's opt-in to endpoints beyond loopback
_ENDPOINT = re.compile(r"(?P<host>[A-Za-z0-9._-]+):(?P<port>[0-9]+)\Z")
EXAMPLE = f"127.0.0.1:{DEFAULT_PORT},127.0.0.1:{DEFAULT_PORT + 1}"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    text: str  # as given: llama.cpp's load log names the buffers after it

    @property
    def loopback(self) -> bool:
        """On this host only: ``localhost`` or 127.0.0.0/8 (the client connects over IPv4: ::1 cannot be given)."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.IPv4Address(self.host).is_loopback
        except ValueError:
            return False


class RpcError(ValueError):
    """Why a ``--rpc`` value is no list of endpoints (text to follow the value)."""


def endpoints(value: object) -> tuple[Endpoint, ...]:
    """The endpoints of a ``--rpc`` value, in order (() when unset); RpcError naming the first bad one."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    if not isinstance(value, str):
        raise RpcError(f"not a comma-separated list of host:port (e.g. {EXAMPLE})")
    found: list[Endpoint] = []
    for item in value.split(","):
        if not item:
            raise RpcError(f"an empty endpoint (a stray comma); list host:port comma-separated (e.g. {EXAMPLE})")
        if "[" in item or item.count(":") > 1:
            raise RpcError(f"{item!r} is an IPv6 address, which llama.cpp's RPC client cannot reach (it connects over "
                           "IPv4 and splits host:port at the first ':'); give an IPv4 address or a host name "
                           f"(e.g. 127.0.0.1:{DEFAULT_PORT})")
        match = _ENDPOINT.match(item)
        port = int(match["port"]) if match else 0
        if not match or not 1 <= port <= 65535:
            raise RpcError(f"{item!r} is not host:port with a port of 1-65535 (no blanks); list the {RPC_SERVER} "
                           f"endpoints comma-separated (e.g. {EXAMPLE})")
        found.append(Endpoint(match["host"], port, item))
    return tuple(found)


def device_names(value: object) -> tuple[str, ...]:
    """The devices of a ``--rpc`` value as ``--list-devices`` and ``--device`` name them, one a server (``RPC0``,
    ``RPC1``; a server started with ``-d dev1,dev2`` offers more, numbered on); RpcError as :func:`endpoints`."""
    return tuple(f"RPC{i}" for i, _ in enumerate(endpoints(value)))


def remote_hosts(value: object) -> list[str]:
    """The hosts of a ``--rpc`` value beyond loopback (the unit's IP allow list must let llama-server reach them);
    [] when unset, when every endpoint is on this host, or for a value the first play refuses anyway."""
    try:
        return [e.host for e in endpoints(value) if not e.loopback]
    except RpcError:
        return []


def rpc_problem(value: object, allow_remote: bool = False, var: Callable[[str], str] = lambda name: name,
                remote_var: str = REMOTE_VAR) -> str | None:
    """The first problem with a ``--rpc`` value in one line, naming the setting as ``var`` spells the knob ``rpc``,
    or None: each endpoint host:port with a port of 1-65535, none twice, and none beyond loopback unless
    ``allow_remote`` (the operator set ``remote_var``)."""
    head = f"{var('rpc')}={value!r}"
    try:
        found = endpoints(value)
    except RpcError as exc:
        return f"{head}: {exc}"
    seen: set[tuple[str, int]] = set()
    for e in found:
        key = (e.host.lower(), e.port)
        if key in seen:
            return (f"{head}: {e.host}:{e.port} is listed twice; name each {RPC_SERVER} once (start one per device, "
                    "each on its own port)")
        seen.add(key)
    remote = [e for e in found if not e.loopback]
    if remote and not allow_remote:
        e = remote[0]
        return (f"{head}: {e.text} is beyond loopback, and {RPC_SERVER} has no authentication: anyone who can reach "
                f"{e.text} can run work on that device and read its memory; keep the servers on 127.0.0.1 (reach a "
                f"remote one through an SSH tunnel), or set {remote_var}: true to accept that (a network you trust, "
                "the port firewalled to this host)")
    return None
