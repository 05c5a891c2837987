"""Restart (or stop) a llama-server unit without cutting a request it is writing (standard library only).

llama-server stops generating the moment it is told to stop: a stream in flight is cut. So the drain keeps every new
request from it from its first moment, waits (at most ``--timeout`` seconds) until the requests already in flight
have finished, signals it, restarts it and gives the new server the requests it held, once the new one answers
/health. Prints JSON: {"began" (epoch s), "held" (how: "listener", "socket filters", "frozen look"), "drained",
"waited_s", "in_flight", "busy_at_restart", "open_at_signal", "stop_hung", "stop_s", "restart_s", "released_s",
"released", "requests": {"held", "refused", "cut"}}; when the start fails, "start_failed" (systemd's result and exit
status, the unit's journal since the start) instead of "restart_s", the same line on stderr, and exit status 1.

- ``"held": "listener"`` (the default where it can be): llama-server listens with SO_REUSEPORT (``--reuse-port``,
  which the role's unit gives it), so the drain opens a listener of its own on the same address and port and has
  the kernel give it every new connection (a classic BPF program on the group, ``Hold``). A client connects and
  sends its request at once; the request waits in the drain's accept queue. The old server keeps only what it is
  already answering; a new request on one of its kept-alive connections gets no answer (socket filters where they
  can be attached, ``Doors``; elsewhere the old server answers it and the drain waits for it too, and a kept-alive
  connection open past 7 s with every slot idle at two looks is taken to be idle: the signal then goes while the
  process is stopped, as the frozen look's does). When it has no client connection left (or at the deadline:
  ``busy_at_restart`` answers still running are cut, and said), the drain signals it and starts the unit again;
  the new server joins the drain's group, and once it answers /health every new connection goes to it and the
  queue the drain holds moves to it whole when the drain closes its listener (net.ipv4.tcp_migrate_req, Linux 5.14+:
  set for that moment, as it was after). Its loading window is held too: no client sees its 503 "Loading model".
  Where the queue cannot move (an older kernel, /proc/sys read-only: a container), and for requests held longer than
  ``--hold-limit`` s, the drain answers them itself: 503 with ``Retry-After: --retry-after``. An upgrade (another
  build, ``--free-port``), ``--action stop``, a new process of another owner, a failed start or a new server not
  healthy in ``--health-timeout`` s: what it holds is answered so too. ``requests`` says how many it handed to the
  new server (held), answered 503 (refused) and cut.
- Where the drain cannot join (a llama-server without --reuse-port, ``no_hold`` says why) or ``--hold``
  says otherwise, the hold after an idle look below: it waits for a moment when no slot is processing (polling
  /slots every ``--interval`` s), then keeps new requests away, and signals once no client connection is left.
  Under steady traffic that moment may not come before the deadline (the issue-63 trial: 4 streams cut).

A look at /slots cannot be the last word: a request that llama-server has accepted but not yet handed to a slot
(it tokenizes in the HTTP thread, and /slots jumps the task queue) or one that arrives just after the look is not
in it, and SIGTERM cuts such a request after its first token (seen on the lab host: "1 cut after its first
token"). So the hold after an idle look keeps new requests from the server, and the signal goes only when it has
no client connection left (the reasons, from llama.cpp's source, are beside ``hold_then_stop``):

- ``"held": "socket filters"``: the drain takes llama-server's own sockets (pidfd_getfd, root, Linux 5.6+) and
  attaches a socket filter to them: the listening socket drops every new connection's packets (a client's
  connect waits in SYN retries, and is answered by the new process or refused once the old one is gone), each
  open connection drops any packet that carries data (a new request on a kept-alive connection goes unanswered;
  the answers in flight, whose client sends only ACKs, go on). Then it waits until no client connection is left
  (an answer in flight ends; llama-server closes an idle kept-alive connection after 5 s) and signals. The
  filters go with the process; a drain interrupted before its signal takes them off again.
- ``"held": "frozen look"`` where a filter cannot be attached (an older kernel, no ptrace rights, a container's
  seccomp filter; the reason follows): the drain stops the process (SIGSTOP), reads its connections from the
  kernel, and only when there are none sends SIGTERM while it is still stopped, then SIGCONT: the signal is
  taken as the process resumes, before a connection that reached the kernel meanwhile can become a task. With a
  connection open it lets the process go on, waits for idle slots again, and looks again. It cannot tell an idle
  kept-alive connection (a client's pool, the exporter's) from one that carries a request not yet in a slot: one
  that stays open 7 s with idle slots at every look is taken to be idle, and the signal goes at the next frozen
  instant after an idle look (a request sent on it in the milliseconds between that look and the freeze is the
  one case left: it holds the process open, and the JSON says so).

The waits are bounded by the drain's deadline (at least 7 s after the idle look: a kept-alive connection's 5 s);
past it the signal goes anyway and ``open_at_signal`` says how many client connections were still open (an
answer begun on one of them was cut when the process does not exit: ``stop_hung``). ``--hold filters`` or
``freeze`` picks one of these ways (``filters``: filters where they can be attached, else the frozen look);
``--pause-after-look`` waits that long between the idle look and the hold, so that a test can start a request in
that gap on purpose.

The signal goes to the unit's main process through a pidfd, from this process (no systemctl, D-Bus or PID 1
between the decision and the signal), then ``systemctl stop`` once it has exited. When the process has not exited
``--grace`` seconds after the signal, ``systemctl stop`` sends the second SIGTERM (llama-server exits at once on a
second signal) and the JSON says ``"stop_hung": true``: a request held it open (with ``open_at_signal`` 0, one
that arrived as it stopped, never begun), and the outage is ``--grace`` seconds, not the unit's stop timeout.

The modules, one job each: ``cli`` (the options and the run, ``python3 ZIP drain`` or ``python -m
specops.host.drain``), ``listener`` (the drain's own listener in the SO_REUSEPORT group, ``Hold``), ``restart`` (the
restart with it), ``afterlook`` (the hold after an idle look, and why a look is not enough), ``filters`` (socket
filters on the server's sockets, ``Doors``), ``freeze`` (the frozen look), ``bpf`` (the classic BPF programs),
``connections`` (the server's sockets from /proc), ``slots`` (the look at /slots), ``process`` (pidfds, the drain's
own signals), ``systemd`` (the unit's stop, start and owner), ``report`` (the JSON line).
"""

from __future__ import annotations

from specops.host.drain.afterlook import hold_then_stop
from specops.host.drain.bpf import steer
from specops.host.drain.cli import main
from specops.host.drain.connections import client_connections, sockets_on_port, wait_port_free
from specops.host.drain.filters import Doors
from specops.host.drain.freeze import all_stopped, freeze, thaw
from specops.host.drain.listener import MIGRATE, Hold, can_migrate
from specops.host.drain.process import Interrupted
from specops.host.drain.restart import restart_held
from specops.host.drain.slots import look

# what it shares with the other host scripts (tests/unit/test_keyfile.py: hostlib's, not copies)
from specops.host.hostlib import auth_headers, busy_slots, tcp_rows

__all__ = ["MIGRATE", "Doors", "Hold", "Interrupted", "all_stopped", "auth_headers", "busy_slots", "can_migrate",
           "client_connections", "freeze", "hold_then_stop", "look", "main", "restart_held", "sockets_on_port",
           "steer", "tcp_rows", "thaw", "wait_port_free"]
