"""The two verbs answered in the HTTP protocol's own callbacks, with no ASGI cycle in between.

kube-scheduler calls the extender twice per pod and waits for each answer, so every microsecond
of a call is scheduling time. Through ASGI, uvicorn makes each request a cycle object, an
asyncio.Event and a task, and the answer goes out through three awaited messages: that cost
more CPU per call than the decision. Here, for a POST to a verb with a small JSON body of a
declared length (api.Verbs.direct_path), the body is gathered as httptools hands it over,
decided in on_message_complete and the answer written to the transport at once, as uvicorn
would have written it. Anything else (other paths and methods, chunked or large
bodies, a pipelined request behind one still answering, the access log on, HTTP/1.0) goes the
ASGI way unchanged.
"""

from __future__ import annotations

import time

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class DirectVerbsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering api.Verbs' calls itself where it can."""

    _direct: tuple[str, bytearray, float] | None = None  # (the verb's path, body so far, head's time)
    _close_after = False  # shut down while a direct call was being read: close once answered

    def on_headers_complete(self) -> None:
        verbs = getattr(self.app, "verbs", None)
        busy = self.cycle is not None and not self.cycle.response_complete
        full = self.limit_concurrency is not None and (len(self.connections) >= self.limit_concurrency
                                                       or len(self.tasks) >= self.limit_concurrency)
        path = None if verbs is None else verbs.direct_path(self.url.split(b"?", 1)[0], self.headers)
        if (path is None or busy or full or self.access_log or self.expect_100_continue
                or self.parser.get_method() != b"POST" or self.parser.get_http_version() != "1.1"
                or self.parser.should_upgrade()):
            super().on_headers_complete()
            return
        self._direct = (path, bytearray(), time.perf_counter())

    def on_body(self, body: bytes) -> None:
        if self._direct is None:
            super().on_body(body)
        else:
            self._direct[1].extend(body)

    def on_message_complete(self) -> None:
        if self._direct is None:
            super().on_message_complete()
            return
        path, body, start = self._direct
        self._direct = None
        verbs = self.app.verbs
        status, answer = verbs.answer_for(path, body)
        head = [STATUS_LINE[status]]
        head += [b"%s: %s\r\n" % pair for pair in self.server_state.default_headers]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(answer))
        self.transport.write(b"".join(head) + answer)
        if status == 200:
            verbs.record_latency(path, start)
        if self._close_after or not self.parser.should_keep_alive():
            self.transport.close()
        self.on_response_complete()

    def shutdown(self) -> None:
        if self._direct is None:
            super().shutdown()
        else:
            self._close_after = True
