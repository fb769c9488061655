"""The verbs answered in the HTTP protocol's callbacks (tas_extender/serve/fastpath.py) answer as the ASGI way does.

A POST to a verb with a JSON body of a declared length is answered directly; the same request
sent with a chunked body has no declared length and goes the ASGI way (api.Verbs). Both, on one
real mutual-TLS server, must give the same status and the same bytes, for good requests and bad
ones. Then what the direct way must keep of HTTP: keep-alive, pipelined requests answered in
order, `Connection: close`, and the request counted in /metrics.
"""

from __future__ import annotations

import pathlib
import re
import socket
from urllib.parse import urlsplit

import httpx
import pytest

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "scheduler-requests"
BODIES = {
    "node-names": (FIXTURES / "filter-node-names-k8s1.36.json").read_bytes(),
    "full-nodes": (FIXTURES / "filter-full-nodes-k8s1.36.json").read_bytes(),
    "not json": b"{not json",
    "no Pod": b'{"NodeNames": ["node-1"]}',
    "NodeNames not a list": b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "node-1"}',
}


def _head(verb: str, extra: bytes) -> bytes:
    return (b"POST /scheduler/%s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n%s\r\n"
            % (verb.encode(), extra))


def declared(verb: str, body: bytes, extra: bytes = b"") -> bytes:
    """The request with Content-Length: answered directly."""
    return _head(verb, b"Content-Length: %d\r\n%s" % (len(body), extra)) + body


def chunked(verb: str, body: bytes) -> bytes:
    """The request with a chunked body: no declared length, so answered the ASGI way."""
    return _head(verb, b"Transfer-Encoding: chunked\r\n") + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


class Connection:
    """One TLS connection to the server, reading whole HTTP/1.1 answers (Content-Length framed)."""

    def __init__(self, url: str, context):
        parts = urlsplit(url)
        raw = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"connection closed before a whole answer head: {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            assert self._fill(), "connection closed before the whole answer body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def closed_by_server(self) -> bool:
        return self.buffer == b"" and not self._fill()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def connection(tls_server, pki):
    opened = Connection(tls_server, pki.client_context())
    yield opened
    opened.close()


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("name", list(BODIES))
def test_direct_and_asgi_answers_are_the_same(connection, verb, name):
    body = BODIES[name]
    connection.send(declared(verb, body))
    direct_status, direct_headers, direct = connection.answer()
    connection.send(chunked(verb, body))
    asgi_status, asgi_headers, by_asgi = connection.answer()
    assert (direct_status, direct) == (asgi_status, by_asgi)
    assert direct_headers["content-type"] == asgi_headers["content-type"] == "application/json"
    if name in ("node-names", "full-nodes"):
        assert direct_status == 200 and direct
    else:
        assert direct_status == 400, direct


def test_keep_alive_and_pipelined_requests_answered_in_order(connection):
    """Three requests in one write (filter, prioritize, filter again): three answers, in order."""
    body = BODIES["node-names"]
    connection.send(declared("filter", body) + declared("prioritize", body) + declared("filter", body))
    answers = [connection.answer() for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert answers[0][2].startswith(b'{"Nodes"') and answers[2][2] == answers[0][2]
    assert answers[1][2].startswith(b'[{"Host"')
    connection.send(declared("prioritize", body))  # the connection is still usable
    assert connection.answer()[2] == answers[1][2]


def test_connection_close_is_kept(connection):
    connection.send(declared("filter", BODIES["node-names"], b"Connection: close\r\n"))
    status, _, _ = connection.answer()
    assert status == 200
    assert connection.closed_by_server()


def test_direct_answers_are_counted(tls_server, pki, connection):
    def count() -> float:
        text = httpx.get(f"{tls_server}/metrics", verify=pki.client_context(), timeout=10).text
        found = re.search(r'^tas_extender_request_duration_seconds_count\{verb="prioritize"\} (\S+)$', text, re.M)
        return float(found.group(1)) if found else 0.0

    before = count()
    for _ in range(5):
        connection.send(declared("prioritize", BODIES["node-names"]))
        assert connection.answer()[0] == 200
    assert count() - before == 5
