"""specops.host.drain's wait for a free port (an upgrade: the new build binds only when the old
build's connections have left the port), against real sockets of this machine."""

import socket
import threading
import time

from specops.host import drain


def test_a_listening_socket_and_its_connections_are_seen_and_the_port_is_free_once_they_are_gone():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    assert "LISTEN" in drain.sockets_on_port(port) and "ESTABLISHED" in drain.sockets_on_port(port)
    for s in (server, client):
        s.close()

    def close_later() -> None:
        time.sleep(0.5)
        accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        accepted.close()

    threading.Thread(target=close_later).start()
    waited, first = drain.wait_port_free(port, timeout=10, interval=0.05)
    assert drain.sockets_on_port(port) == [] and 0.3 < waited < 10
    assert "ESTABLISHED" in first or "CLOSE_WAIT" in first, first


def test_the_wait_is_bounded():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        waited, first = drain.wait_port_free(server.getsockname()[1], timeout=0.3, interval=0.05)
        assert 0.3 <= waited < 2 and first == ["LISTEN"]
    finally:
        server.close()
