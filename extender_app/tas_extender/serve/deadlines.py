"""Deadlines for a request's head and body, which uvicorn's httptools protocol does not keep.

uvicorn closes a kept-alive connection that stays idle (`timeout_keep_alive`), but waits without
end for a client that connects and sends nothing, or sends its head or body a byte at a time
(slowloris). Each such connection holds a socket and counts against `limit_concurrency`, so a
few hundred of them would turn every other caller, kube-scheduler and the kubelet's probes
included, away with 503.
"""

from __future__ import annotations

import asyncio
import logging

from tas_extender.serve.fastpath import DirectVerbsProtocol

log = logging.getLogger(__name__)


class DeadlineProtocol(DirectVerbsProtocol):
    """Closes a connection whose request head is not complete `header_timeout` seconds after the
    connection opened (or, on a kept-alive one, after the head began), or whose body is not
    complete `body_timeout` seconds after its head. `with_deadlines` sets both."""

    header_timeout = 10.0
    body_timeout = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout, "request head")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a later request on a kept-alive connection
            self._arm(self.header_timeout, "request head")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout, "request body")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, seconds: float, part: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire, seconds, part)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, seconds: float, part: str) -> None:
        self._deadline = None
        # debug: a flood of slow clients must not flood the log as well
        log.debug("%s:%s: closing the connection, its %s took over %g s", *(self.client or ("?", "?")), part, seconds)
        self.transport.close()


def with_deadlines(header_timeout: float, body_timeout: float) -> type[DeadlineProtocol]:
    """The protocol class to give uvicorn.Config(http=...): it makes one per connection."""
    return type("DeadlineProtocol", (DeadlineProtocol,),
                {"header_timeout": header_timeout, "body_timeout": body_timeout})
