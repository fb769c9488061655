"""The extender's app called in process, through httpx's ASGI transport: no port, no server."""

from __future__ import annotations

import asyncio

import httpx


class AsgiClient:
    """Synchronous calls into the ASGI app through httpx; a crash shows as a 500, not an exception."""

    def __init__(self, app) -> None:
        self.transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    def request(self, method: str, url: str, **kwargs) -> httpx.Response:
        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=self.transport, base_url="http://extender") as client:
                return await client.request(method, url, **kwargs)
        return asyncio.run(call())

    def get(self, url: str, **kwargs) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs) -> httpx.Response:
        return self.request("POST", url, **kwargs)
