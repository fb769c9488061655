"""The HTTP edge: kube-scheduler extender verbs, health, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from tas_extender import __version__
from tas_extender.decide import wire
from tas_extender.decide.decision import AuditReport, Decider
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.mode import LoadAware
from tas_extender.decide.telemetry import Telemetry

JSON = "application/json"
LARGE_BODY = 1 << 20  # bytes: a full-Nodes request of more than about 250 nodes
SEND_PIECE = 1 << 20  # bytes
log = logging.getLogger("tas_extender.extender")


# OpenAPI description of the verbs, for readers and schema-based fuzzing. The routes read the raw
# body and check only what they use (wire.parse): a pydantic model per request costs too much.
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT_META = {"type": "object", "properties": {
    "name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STRINGS}}
_NODE_LIST = {"type": "object", "required": ["items"], "properties": {"items": {
    "type": "array", "items": {"type": "object", "required": ["metadata"], "properties": {
        "metadata": {**_OBJECT_META, "required": ["name"]}}}}}}
EXTENDER_ARGS = {
    "type": "object", "required": ["Pod"],
    "description": "kube-scheduler's ExtenderArgs: the pod and its candidates, as Nodes or as NodeNames",
    "properties": {
        "Pod": {"type": "object", "properties": {"metadata": _OBJECT_META}},
        "Nodes": {"anyOf": [_NODE_LIST, {"type": "null"}]},
        "NodeNames": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    },
}
_ERROR = {"type": "object", "required": ["Error"], "properties": {"Error": {"type": "string"}}}
EXTENDER_FILTER_RESULT = {
    "type": "object", "required": ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"],
    "properties": {
        "Nodes": {"anyOf": [_NODE_LIST, {"type": "null"}]},
        "NodeNames": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "FailedNodes": _STRINGS, "FailedAndUnresolvableNodes": _STRINGS, "Error": {"type": "string"},
    },
}
_FILTER_ERROR = {**EXTENDER_FILTER_RESULT, "required": ["Error"]}  # a refused filter still has the result's shape
HOST_PRIORITY_LIST = {"type": "array", "items": {
    "type": "object", "required": ["Host", "Score"],
    "properties": {"Host": {"type": "string"}, "Score": {"type": "integer", "minimum": 0, "maximum": 10}}}}


def _verb_openapi(result: dict, error: dict, verb: str) -> dict:
    errors = {str(status): {"description": reason, "content": {JSON: {"schema": error}}}
              for status, reason in ((400, "ExtenderArgs unusable"), (413, "body too large"),
                                     (415, "not application/json"))}
    return {"operationId": verb,
            "requestBody": {"required": True, "content": {JSON: {"schema": EXTENDER_ARGS}}},
            "responses": {"200": {"description": "decision", "content": {JSON: {"schema": result}}}, **errors}}


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


class Verbs:
    """kube-scheduler's verbs (filter, prioritize and the load entry's two) as a plain ASGI app,
    in front of FastAPI's stack.

    Each call passes through about twenty layers of FastAPI and Starlette middleware (error
    pages, telemetry hooks, exit stacks, routing, dependency solving), which cost more than the
    decision itself, twice per pod. Here the body is read, the decision asked and
    the answer written with nothing in between; everything else (health, metrics, 404s, 405s)
    goes on to FastAPI. The document of the verbs stays in ExtenderApp.openapi(). Most calls do
    not come here at all: fastpath.py answers a small JSON POST from the HTTP protocol's callbacks,
    with the same `answer_for`.

    A large body (full Node objects, tens of MB in a large cluster) is read, decided and answered
    one at a time: the process has one core to decide with anyway, and several of them at once
    held many times the memory of one.
    The others wait unread (uvicorn stops reading a connection whose body is not taken), and a
    NodeNames request, a few KB, never waits behind them.
    """

    def __init__(self, decider: Decider, telemetry: Telemetry, limit: int):
        self.decider, self.telemetry, self.limit = decider, telemetry, limit
        # path -> (the verb, the Decider's method that answers it)
        # (load-filter and load-prioritize: load-aware mode's second extender entry, every pod's load)
        self.routes = {"/scheduler/filter": ("filter", decider.filter),
                       "/scheduler/prioritize": ("prioritize", decider.prioritize),
                       "/scheduler/load-filter": ("load-filter", decider.load_filter),
                       "/scheduler/load-prioritize": ("load-prioritize", decider.load_prioritize)}
        # The histogram's children looked up once (none without telemetry: an app made only for its document)
        self._latency = ({path: telemetry.latency.labels(verb) for path, (verb, _) in self.routes.items()}
                         if telemetry else {})
        self._by_raw_path = {path.encode(): path for path in self.routes}  # for fastpath.py
        self._one_large = asyncio.Lock()

    def handles(self, scope: Scope) -> bool:
        return scope["type"] == "http" and scope["path"] in self.routes

    def direct_path(self, raw_path: bytes, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The verb's path when a POST to `raw_path` with `headers` can be answered in the HTTP
        protocol's own callbacks (fastpath.py): a JSON body of a declared length, small enough to
        decide at once. None: the ASGI way, which refuses what must be refused."""
        path = self._by_raw_path.get(raw_path)
        found = dict(headers)
        declared = found.get(b"content-length", b"")
        if (path is None or found.get(b"content-type", b"").split(b";")[0].strip().lower() != JSON.encode()
                or not declared.isdigit() or int(declared) > min(LARGE_BODY, self.limit)):
            return None
        return path

    def answer_for(self, path: str, body: bytes | bytearray) -> tuple[int, bytes]:
        """(status, body) of the answer to a verb's request whose body has been read."""
        verb, decide = self.routes[path]
        try:
            return 200, decide(wire.parse(body, self.decider.known_names))
        except wire.BadRequest as refused:
            return self._refused(verb, refused)
        except Exception:
            return self._failed(verb)

    def record_latency(self, path: str, start: float) -> None:
        """Count a call answered 200 (`start`: when its head was read) in the latency histogram."""
        self._latency[path].observe(time.perf_counter() - start)

    def _refused(self, verb: str, refused: wire.BadRequest) -> tuple[int, bytes]:
        self.telemetry.bad_requests.labels(verb, str(refused.status)).inc()
        return refused.status, _refusal(verb, refused.message)

    @staticmethod
    def _failed(verb: str) -> tuple[int, bytes]:
        log.exception("%s failed", verb)
        return 500, _refusal(verb, f"tas-extender failed to answer {verb}; its log says why")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        verb = self.routes[path][0]
        if scope["method"] != "POST":
            await send_answer(send, 405, _refusal(verb, f"{verb} takes POST, not {scope['method']}"),
                              [(b"allow", b"POST")])
            return
        start = time.perf_counter()
        try:
            length = self._length(scope)
            if length is not None and length <= LARGE_BODY:
                sent = await self._read_decide_write(path, receive, send)
            else:
                async with self._one_large:
                    sent = await self._read_decide_write(path, receive, send)
        except wire.BadRequest as refused:
            await send_answer(send, *self._refused(verb, refused))
            return
        except Exception:
            await send_answer(send, *self._failed(verb))
            return
        if sent:
            self.record_latency(path, start)

    def _length(self, scope: Scope) -> int | None:
        """The body's declared length (None: not declared, chunked), once the headers allow it."""
        headers = dict(scope["headers"])  # names are lower case in ASGI
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower().decode("latin-1")
        if content_type != JSON:
            raise wire.BadRequest(415, f"Content-Type must be {JSON}, got {content_type or 'nothing'}")
        declared = headers.get(b"content-length", b"")
        if not declared.isdigit():
            return None
        if int(declared) > self.limit:
            raise wire.BadRequest(413, f"request body of {int(declared)} bytes exceeds the limit of {self.limit} bytes")
        return int(declared)

    async def _read_decide_write(self, path: str, receive: Receive, send: Send) -> bool:
        """Read, decide, write; True when the decision was sent. False also when the client left
        (or was too slow, deadlines.py) before its body was read: no one would read an answer."""
        body = await self._read_body(receive)
        if body is None:
            return False
        status, answer = self.answer_for(path, body)
        await send_answer(send, status, answer)
        return status == 200

    async def _read_body(self, receive: Receive) -> bytearray | None:
        """The whole body, None if the client left first. One buffer grown in place: at a full-Nodes
        body's size a list of chunks joined at the end, or a buffer zeroed first, costs another copy."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.limit:
                raise wire.BadRequest(413, f"request body exceeds the limit of {self.limit} bytes")
            if not message.get("more_body", False):
                return body


def _refusal(verb: str, message: str) -> bytes:
    """The body of a refused call: a filter refusal keeps the ExtenderFilterResult's shape."""
    if verb in ("filter", "load-filter"):
        return wire.filter_error(message)
    return orjson.dumps({"Error": message})


async def send_answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a JSON answer through ASGI's `send`, in pieces of SEND_PIECE bytes: uvicorn writes each
    once the connection has taken the last, so a full-Nodes answer is not encrypted and buffered
    whole a second time."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    start = 0
    while len(body) - start > SEND_PIECE:
        await send({"type": "http.response.body", "body": body[start:start + SEND_PIECE], "more_body": True})
        start += SEND_PIECE
    await send({"type": "http.response.body", "body": body[start:]})


class ExtenderApp(FastAPI):
    """FastAPI for everything but the two verbs, which `verbs` answers directly."""

    verbs: Verbs | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.verbs is not None and self.verbs.handles(scope):
            await self.verbs(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        """FastAPI's document of its own routes, with the two verbs added."""
        if self.openapi_schema is None:
            document = super().openapi()
            document.setdefault("paths", {}).update({
                "/scheduler/filter": {"post": _verb_openapi(EXTENDER_FILTER_RESULT, _FILTER_ERROR, "filter")},
                "/scheduler/prioritize": {"post": _verb_openapi(HOST_PRIORITY_LIST, _ERROR, "prioritize")},
                "/scheduler/load-filter": {"post": _verb_openapi(EXTENDER_FILTER_RESULT, _FILTER_ERROR, "load-filter")},
                "/scheduler/load-prioritize": {"post": _verb_openapi(HOST_PRIORITY_LIST, _ERROR, "load-prioritize")}})
            self.openapi_schema = document
        return self.openapi_schema


def add_health_routes(app: FastAPI, engine: Engine, readiness: Callable[[], list[str]]) -> None:
    """GET /healthz (the process answers) and GET /readyz (it can decide) on `app`."""

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        waiting = readiness()
        if waiting:
            return _json({"status": "not ready", "waiting": waiting}, 503)
        # A metric source that fails after the first sync does not make the extender unready:
        # it still decides (the missing-metric policy applies), and taking it out of service
        # would stall scheduling. The body says what is degraded.
        cache = engine.cache
        if not cache.source_up and engine.store.metric_names():
            return _json({"status": "ready", "degraded": [
                f"metric source {cache.source.name} down: {cache.last_error or 'no answer'}"]})
        return _json({"status": "ready"})


def create_health_app(engine: Engine, readiness: Callable[[], list[str]]) -> FastAPI:
    """Only /healthz and /readyz, for a plain-HTTP port the kubelet's probes can reach
    without a client certificate; nothing there reveals or decides anything."""
    app = FastAPI(title="tas-extender health", docs_url=None, redoc_url=None, openapi_url=None)
    add_health_routes(app, engine, readiness)
    return app


def create_app(engine: Engine, telemetry: Telemetry, max_body_bytes: int,
               readiness: Callable[[], list[str]],
               on_shutdown: Callable[[], None] | None = None,
               load: LoadAware | None = None, load_weight: float = 1.0,
               decided: Callable[[], bool] = lambda: True, audit_events: AuditReport | None = None) -> ExtenderApp:
    """The ASGI app; `readiness` returns what is not ready yet (empty when ready); `decided`
    says whether the decisions stand on the policies and their metrics yet (see filter);
    `audit_events` is told what each audit-mode policy would have filtered.

    `on_shutdown` runs when the server stops (uvicorn re-raises SIGTERM after that, so code
    after the server's run() would never run).
    """
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            await asyncio.to_thread(on_shutdown)

    # The OpenAPI description stays in the app (app.openapi(), for the fuzzing tests) but is not
    # served: a caller with a client certificate needs no map of the routes.
    app = ExtenderApp(title="tas-extender", version=__version__, docs_url=None, redoc_url=None, openapi_url=None,
                      lifespan=lifespan)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _json({"Error": str(exc.detail)}, exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _json({"Error": str(exc)}, 400)

    app.verbs = Verbs(Decider(engine, telemetry, load.state if load is not None else None, load_weight, decided,
                              audit_events), telemetry, max_body_bytes)

    add_health_routes(app, engine, readiness)

    @app.get("/metrics")
    async def metrics() -> Response:
        # Only the metrics a live policy uses now: a metric no longer fetched leaves no frozen age.
        ages = engine.cache.ages(time.time())
        telemetry.metric_age.clear()
        for metric, age in ages.items():
            telemetry.metric_age.labels(metric).set(age)
        telemetry.source_up.labels(engine.cache.source.name).set(1 if engine.cache.source_up else 0)
        telemetry.policies.labels("valid").set(len(engine.store.policies()))
        telemetry.policies.labels("invalid").set(len(engine.store.invalid()))
        return Response(generate_latest(telemetry.registry), media_type=CONTENT_TYPE_LATEST)

    return app
