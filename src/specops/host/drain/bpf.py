"""The classic BPF programs the drain attaches: the socket filters on the server's own sockets (drop a new
connection, drop a new request) and the program that steers a SO_REUSEPORT group's new connections."""

from __future__ import annotations

SKF_NET_OFF = -0x100000      # classic BPF: a load relative to the IP header

# the listening socket: drop every packet (a new client's SYN, the last ACK of a handshake begun before)
DROP_ALL = ((0x06, 0, 0, 0),)          # ret #0
# a connection: drop a segment that carries data (a new request), keep the others (ACKs of an answer in flight,
# FIN). A TCP socket's filter sees the segment from its TCP header on: data = length - 4 * data offset.
DROP_DATA = (
    (0x30, 0, 0, 12),            # ldb [12]      data offset, high nibble
    (0x74, 0, 0, 2),             # rsh #2
    (0x54, 0, 0, 0x3C),          # and #0x3c     header length in bytes
    (0x07, 0, 0, 0),             # tax
    (0x80, 0, 0, 0),             # ld len
    (0x2D, 1, 0, 0),             # jgt x, drop
    (0x06, 0, 0, 0xFFFFFFFF),    # ret -1        keep
    (0x06, 0, 0, 0),             # drop: ret #0
)
_KEEP: list = []   # the instruction arrays the programs' bytes point into


def program(insns: tuple[tuple[int, int, int, int], ...]) -> bytes:
    """A classic BPF socket filter as setsockopt(SO_ATTACH_FILTER) takes it (struct sock_fprog)."""
    import ctypes  # here: a python3 without ctypes still drains, with the frozen look

    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]

    code = (Insn * len(insns))(*(Insn(c, jt, jf, k & 0xFFFFFFFF) for c, jt, jf, k in insns))
    _KEEP.append(code)
    return bytes(Prog(len(insns), ctypes.cast(code, ctypes.POINTER(Insn))))


def steer(mine: int, other: int, probe: int = 0) -> bytes:
    """The group's program: every new connection to index ``mine``, one from source port ``probe`` to ``other``
    (IPv4 without options or IPv6, as the drain's own connections are)."""
    return program((
        (0x30, 0, 0, SKF_NET_OFF),           # ldb [ip]        version, header length
        (0x15, 0, 2, 0x45),                  # jeq #0x45       IPv4, 20 bytes
        (0x28, 0, 0, SKF_NET_OFF + 20),      # ldh [ip + 20]   its TCP source port
        (0x05, 0, 0, 3),                     # ja port
        (0x74, 0, 0, 4),                     # rsh #4
        (0x15, 0, 3, 6),                     # jeq #6          IPv6
        (0x28, 0, 0, SKF_NET_OFF + 40),      # ldh [ip + 40]   its TCP source port
        (0x15, 0, 1, probe),                 # port: jeq #probe
        (0x06, 0, 0, other),                 # ret #other
        (0x06, 0, 0, mine),                  # ret #mine
    ))
