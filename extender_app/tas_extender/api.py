"""The HTTP edge: kube-scheduler extender verbs, health, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from tas_extender import wire
from tas_extender.decision import AuditReport, Decider
from tas_extender.engine import Engine
from tas_extender.load.mode import LoadAware
from tas_extender.telemetry import Telemetry

JSON = "application/json"


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


def _verb_openapi(result: dict, error: dict) -> dict:
    errors = {str(status): {"description": reason, "content": {JSON: {"schema": error}}}
              for status, reason in ((400, "ExtenderArgs unusable"), (413, "body too large"),
                                     (415, "not application/json"))}
    return {"requestBody": {"required": True, "content": {JSON: {"schema": EXTENDER_ARGS}}},
            "responses": {"200": {"description": "decision", "content": {JSON: {"schema": result}}}, **errors}}


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


async def _read_body(request: Request, limit: int) -> bytes:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != JSON:
        raise wire.BadRequest(415, f"Content-Type must be {JSON}, got {content_type or 'nothing'}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise wire.BadRequest(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise wire.BadRequest(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


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
               decided: Callable[[], bool] = lambda: True, audit_events: AuditReport | None = None) -> FastAPI:
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
    app = FastAPI(title="tas-extender", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _json({"Error": str(exc.detail)}, exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _json({"Error": str(exc)}, 400)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client left before its body was read, or was too slow with it (deadlines.py): no
        # one reads this answer, and it is no error of ours to log with a traceback.
        return Response(status_code=400)

    @app.exception_handler(wire.BadRequest)
    async def _bad_request(request: Request, exc: wire.BadRequest) -> Response:
        verb = request.url.path.rsplit("/", 1)[-1]
        telemetry.bad_requests.labels(verb, str(exc.status)).inc()
        body: object = {"Error": exc.message}
        if verb == "filter":
            body = {"Nodes": None, "NodeNames": None, "FailedNodes": {},
                    "FailedAndUnresolvableNodes": {}, "Error": exc.message}
        return _json(body, exc.status)

    decider = Decider(engine, telemetry, load.state if load is not None else None, load_weight, decided,
                      audit_events)

    @app.post("/scheduler/filter", openapi_extra=_verb_openapi(EXTENDER_FILTER_RESULT, _FILTER_ERROR))
    async def filter_nodes(request: Request) -> Response:
        start = time.perf_counter()
        response = Response(decider.filter(wire.parse(await _read_body(request, max_body_bytes))), media_type=JSON)
        telemetry.latency.labels("filter").observe(time.perf_counter() - start)
        return response

    @app.post("/scheduler/prioritize", openapi_extra=_verb_openapi(HOST_PRIORITY_LIST, _ERROR))
    async def prioritize(request: Request) -> Response:
        start = time.perf_counter()
        response = Response(decider.prioritize(wire.parse(await _read_body(request, max_body_bytes))),
                            media_type=JSON)
        telemetry.latency.labels("prioritize").observe(time.perf_counter() - start)
        return response

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
