"""Slow clients against the real server, on the mutual-TLS port and the plain health port.

A slowloris client opens connections and sends its request a byte at a time, so that each stays
open as long as it likes and counts against the connection cap. Each must be closed once its
head or body is late (the fixture's deadlines are 2 s; a test waits far longer before calling a
connection never closed), and a normal client answered meanwhile.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest

from tas_extender.cli.serve import HEALTH_MAX_CONNECTIONS

CLOSE_WITHIN = 30  # seconds a slow connection may stay open before the test calls it never closed
DRIBBLE_EVERY = 0.2  # seconds between a slow client's bytes
SLOWLORIS_CONNECTIONS = 20
PORTS = ["health", "tls"]
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"


def _post_head(length: int) -> bytes:
    return (b"POST /scheduler/filter HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


SLOW = [  # (behaviour, what the client sends first, then sends again every DRIBBLE_EVERY seconds)
    ("connects and sends nothing", b"", b""),
    ("sends its request head a byte at a time", b"GET /healthz HTTP/1.1\r\nX-Padding: ", b"a"),
    ("stalls in its request body", _post_head(1000) + b'{"Pod": ', b""),
    ("sends its request body a byte at a time", _post_head(100_000) + b'{"Pod": ', b" "),
]


def _connect(guarded, pki, port: str) -> socket.socket:
    """A connection to `port`; on the TLS one, with the handshake done with a valid client certificate."""
    if port == "health":
        return socket.create_connection(("127.0.0.1", guarded.health_port), timeout=10)
    parts = urlsplit(guarded.served.url)
    raw = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return pki.client_context().wrap_socket(raw, server_hostname="localhost")


def _healthz(guarded, pki, port: str) -> int:
    """A normal client's GET /healthz on a new connection: its status."""
    if port == "health":
        return httpx.get(f"http://127.0.0.1:{guarded.health_port}/healthz", timeout=10).status_code
    return httpx.get(f"{guarded.served.url}/healthz", verify=pki.client_context(), timeout=10).status_code


def _healthz_on(sock: socket.socket) -> int:
    """GET /healthz on an open connection, reading the whole answer so the connection can be reused."""
    sock.sendall(HEALTHZ)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(4096)
    return int(head.split()[1])


def _dribble_until_closed(sock: socket.socket, first: bytes, more: bytes, deadline: float) -> bool:
    """Send `first`, then `more` every DRIBBLE_EVERY seconds, reading whatever is answered; True
    once the server closes the connection, False if it is still open at `deadline`."""
    sock.settimeout(DRIBBLE_EVERY)
    try:
        sock.sendall(first)
        while time.monotonic() < deadline:
            try:
                if sock.recv(4096) == b"":
                    return True
            except TimeoutError:
                sock.sendall(more)
    except OSError:  # reset, broken pipe, TLS closed under it: the server closed the connection
        return True
    return False


@pytest.mark.parametrize("port", PORTS)
@pytest.mark.parametrize(("behaviour", "first", "more"), SLOW, ids=[case[0] for case in SLOW])
def test_a_slow_client_is_closed_although_it_keeps_sending(guarded_server, pki, port, behaviour, first, more):
    with _connect(guarded_server, pki, port) as sock:
        assert _dribble_until_closed(sock, first, more, time.monotonic() + CLOSE_WITHIN), (
            f"a client that {behaviour} was still connected after {CLOSE_WITHIN} s")
    # a body cut short is no error of the server's
    assert "Exception in ASGI application" not in guarded_server.served.output()


@pytest.mark.parametrize("port", PORTS)
def test_a_slowloris_does_not_stop_a_normal_client_and_all_its_connections_are_closed(guarded_server, pki, port):
    _, first, more = SLOW[1]
    deadline = time.monotonic() + CLOSE_WITHIN
    slow = [_connect(guarded_server, pki, port) for _ in range(SLOWLORIS_CONNECTIONS)]
    try:
        with ThreadPoolExecutor(len(slow)) as pool:
            closed = [pool.submit(_dribble_until_closed, sock, first, more, deadline) for sock in slow]
            assert _healthz(guarded_server, pki, port) == 200
            assert all(f.result() for f in closed), (
                f"{sum(not f.result() for f in closed)} of {len(slow)} slow connections still open "
                f"after {CLOSE_WITHIN} s")
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.parametrize("port", PORTS)
def test_a_kept_alive_connection_idle_longer_than_the_header_timeout_is_still_served(guarded_server, pki, port):
    # kube-scheduler reuses its connections: only a request begun and left unfinished is cut.
    with _connect(guarded_server, pki, port) as sock:
        assert _healthz_on(sock) == 200
        time.sleep(2 * guarded_server.timeout)  # idle on purpose, within the 60 s keep-alive
        assert _healthz_on(sock) == 200


@pytest.mark.parametrize("port", PORTS)
def test_requests_beyond_the_connection_cap_get_503_until_connections_close(guarded_server, pki, port):
    cap = guarded_server.max_connections if port == "tls" else HEALTH_MAX_CONNECTIONS
    held: list[socket.socket] = []
    try:
        answers = []
        for _ in range(cap):  # each kept alive after its answer, so each keeps counting
            held.append(_connect(guarded_server, pki, port))
            answers.append(_healthz_on(held[-1]))
        assert answers[0] == 200
        assert answers[-1] == 503, f"{cap} connections open, and still {answers[-1]}"
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + CLOSE_WITHIN
    while (status := _healthz(guarded_server, pki, port)) != 200:
        assert time.monotonic() < deadline, f"still {status} {CLOSE_WITHIN} s after the connections closed"
        time.sleep(0.2)
