"""The Python floor: an extender in Python that decides nothing, as the Go floor (bench/floor_extender).

Filter passes every node it is sent and prioritize scores every node 0, over mutual TLS with the
same certificates. Two servers, so that the throughput benchmark can tell what the language and
the HTTP layer cost from what tas-extender's own work costs:

  uvicorn   the stack `tas-extender serve` runs on (uvicorn on httptools and uvloop, uvicorn's TLS
            settings), with a plain ASGI app that reads the body, decodes the NodeNames with
            msgspec and writes the answer
  protocol  no HTTP framework: an asyncio protocol on uvloop that parses with httptools and
            answers from the protocol's callbacks, the least a Python server can do per request

Run as `python -m bench.floor_python --server uvicorn|protocol --port P --cert --key --cacert`;
bench.floor.FloorServer(certs, server) starts it as it starts the Go floor.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl

import msgspec


class Args(msgspec.Struct):
    """What the Go floor reads of ExtenderArgs: the names, or the Node objects handed back unread."""

    Nodes: msgspec.Raw | None = None
    NodeNames: list[str] | None = None


class _NodeMeta(msgspec.Struct):
    name: str


class _Node(msgspec.Struct):
    metadata: _NodeMeta


class _NodeList(msgspec.Struct):
    items: list[_Node]


_decode_args = msgspec.json.Decoder(Args).decode
_decode_nodes = msgspec.json.Decoder(_NodeList).decode
_encode = msgspec.json.Encoder().encode
filter_calls = 0


def answer(path: bytes, body: bytes) -> tuple[int, bytes]:
    """(status, body) of one call, as bench/floor_extender/main.go answers it."""
    global filter_calls
    if path not in (b"/scheduler/filter", b"/scheduler/prioritize"):
        if path == b"/readyz":
            return 200, b'{"status":"ready"}'
        if path == b"/metrics":
            return 200, f'floor_extender_requests_total{{verb="filter"}} {filter_calls}\n'.encode()
        return 404, b'{"Error":"not found"}'
    try:
        args = _decode_args(body)
        if path == b"/scheduler/filter":
            nodes = bytes(args.Nodes) if args.Nodes is not None else b"null"
            filter_calls += 1
            return 200, b'{"Nodes":' + nodes + b',"NodeNames":' + _encode(args.NodeNames) + \
                b',"FailedNodes":{},"Error":""}'
        names = args.NodeNames if args.NodeNames is not None else (
            [item.metadata.name for item in _decode_nodes(args.Nodes).items] if args.Nodes is not None else [])
        return 200, _encode([{"Host": name, "Score": 0} for name in names])
    except msgspec.DecodeError as error:
        return 400, _encode({"Error": str(error)})


async def asgi_app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
    """The uvicorn server's app: read the body, answer, nothing in between."""
    if scope["type"] != "http":
        return
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    status, answered = answer(scope["path"].encode(), bytes(body))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(answered)).encode())]})
    await send({"type": "http.response.body", "body": answered})


class FloorProtocol(asyncio.Protocol):
    """One connection of the protocol server: httptools parses, each complete request is answered
    at once from on_message_complete (kube-scheduler sends one request at a time per connection)."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        import httptools

        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        status, answered = answer(self.url.split(b"?", 1)[0], bytes(self.body))
        self.url, self.body = b"", bytearray()
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, len(answered), answered))


def server_context(cert: str, key: str, cacert: str) -> ssl.SSLContext:
    """Mutual TLS as tas-extender serve sets it: client certificates required, TLS 1.2 at least."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cacert)
    context.verify_mode = ssl.CERT_REQUIRED
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["uvicorn", "protocol"], required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--cacert", required=True)
    args = parser.parse_args(argv)
    import uvloop

    if args.server == "uvicorn":
        import uvicorn

        uvicorn.run(asgi_app, host=args.host, port=args.port, loop="uvloop", http="httptools", ws="none",
                    lifespan="off", log_level="warning", access_log=False, timeout_keep_alive=60,
                    ssl_certfile=args.cert, ssl_keyfile=args.key, ssl_ca_certs=args.cacert,
                    ssl_cert_reqs=ssl.CERT_REQUIRED)
        return

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(FloorProtocol, args.host, args.port,
                                          ssl=server_context(args.cert, args.key, args.cacert))
        await server.serve_forever()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
