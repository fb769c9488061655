"""The HTTP edge: kube-scheduler extender verbs, health, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import islice
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from tas_extender.engine import Engine
from tas_extender.load.decide import combine, is_daemonset_pod
from tas_extender.load.mode import LoadAware
from tas_extender.telemetry import Telemetry

log = logging.getLogger("tas_extender.extender")
JSON = "application/json"
LOGGED_NODES = 20


# OpenAPI description of the verbs, for readers and schema-based fuzzing. The routes read the raw
# body and check only what they use (_extender_args): a pydantic model per request costs too much.
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


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


async def _read_json(request: Request, limit: int) -> object:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != JSON:
        raise BadRequest(415, f"Content-Type must be {JSON}, got {content_type or 'nothing'}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as error:
        raise BadRequest(400, f"request body is not valid JSON: {error}") from None


def _extender_args(body: object) -> tuple[dict, list[str], dict | None]:
    """(pod metadata, node names, the Nodes list object or None) from ExtenderArgs."""
    if not isinstance(body, dict):
        raise BadRequest(400, "ExtenderArgs must be a JSON object")
    pod = body.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata", {}), dict):
        raise BadRequest(400, "ExtenderArgs.Pod must be an object with metadata")
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        raise BadRequest(400, "Pod.metadata.labels must be an object")
    nodes, names = body.get("Nodes"), body.get("NodeNames")
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("metadata"), dict)
            and isinstance(i["metadata"].get("name"), str) for i in items
        ):
            raise BadRequest(400, "ExtenderArgs.Nodes.items must be a list of Nodes with metadata.name")
        return meta, [i["metadata"]["name"] for i in items], nodes
    if names is not None:
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise BadRequest(400, "ExtenderArgs.NodeNames must be a list of strings")
        return meta, names, None
    raise BadRequest(400, "ExtenderArgs has neither Nodes nor NodeNames")


def _log_filter(policy: str, names: list[str], failed: dict[str, str]) -> None:
    """TAS's log lines, shortened past LOGGED_NODES nodes: at 5000 nodes they cost the scheduler time."""
    passed = [n for n in names if n not in failed]
    log.info("Filtered nodes available for %s : %s%s", policy, " ".join(passed[:LOGGED_NODES]),
             f" ... and {len(passed) - LOGGED_NODES} more" if len(passed) > LOGGED_NODES else "")
    prefix = f"{policy}: dontschedule rule "
    for node, reason in islice(failed.items(), LOGGED_NODES):
        log.info("%s violating : %s", node, reason.removeprefix(prefix))
    if len(failed) > LOGGED_NODES:
        log.info("... and %d more nodes violating %s", len(failed) - LOGGED_NODES, policy)


def create_app(engine: Engine, telemetry: Telemetry, max_body_bytes: int,
               readiness: Callable[[], list[str]],
               on_shutdown: Callable[[], None] | None = None,
               load: LoadAware | None = None, load_weight: float = 1.0) -> FastAPI:
    """The ASGI app; `readiness` returns what is not ready yet (empty when ready).

    `on_shutdown` runs when the server stops (uvicorn re-raises SIGTERM after that, so code
    after the server's run() would never run).
    """
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            await asyncio.to_thread(on_shutdown)

    app = FastAPI(title="tas-extender", version="0.1.0", docs_url=None, redoc_url=None, lifespan=lifespan)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _json({"Error": str(exc.detail)}, exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _json({"Error": str(exc)}, 400)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> Response:
        verb = request.url.path.rsplit("/", 1)[-1]
        telemetry.bad_requests.labels(verb, str(exc.status)).inc()
        body: object = {"Error": exc.message}
        if verb == "filter":
            body = {"Nodes": None, "NodeNames": None, "FailedNodes": {},
                    "FailedAndUnresolvableNodes": {}, "Error": exc.message}
        return _json(body, exc.status)

    @app.post("/scheduler/filter", openapi_extra=_verb_openapi(EXTENDER_FILTER_RESULT, _FILTER_ERROR))
    async def filter_nodes(request: Request) -> Response:
        start = time.perf_counter()
        meta, names, nodes = _extender_args(await _read_json(request, max_body_bytes))
        policy = engine.policy_for(meta)
        failed = engine.failed(policy, names) if policy else {}
        if load is not None and not is_daemonset_pod(meta):  # the policy's filter first, load after
            failed.update(load.failed([n for n in names if n not in failed]))
        if nodes is not None:
            kept = [i for i in nodes["items"] if i["metadata"]["name"] not in failed]
            result = {"Nodes": {**nodes, "items": kept}, "NodeNames": None}
        else:
            result = {"Nodes": None, "NodeNames": [n for n in names if n not in failed]}
        result.update(FailedNodes=failed, FailedAndUnresolvableNodes={}, Error="")
        if policy and log.isEnabledFor(logging.INFO):
            _log_filter(policy.name, names, failed)
        telemetry.decisions.labels("filter", "passed").inc(len(names) - len(failed))
        telemetry.decisions.labels("filter", "failed").inc(len(failed))
        response = _json(result)
        telemetry.latency.labels("filter").observe(time.perf_counter() - start)
        return response

    @app.post("/scheduler/prioritize", openapi_extra=_verb_openapi(HOST_PRIORITY_LIST, _ERROR))
    async def prioritize(request: Request) -> Response:
        start = time.perf_counter()
        meta, names, _ = _extender_args(await _read_json(request, max_body_bytes))
        policy = engine.policy_for(meta)
        scores = engine.scores(policy, names) if policy else [0] * len(names)
        if load is not None and not is_daemonset_pod(meta):
            scores = [combine(own if policy else None, by_load, 1.0, load_weight)
                      for own, by_load in zip(scores, load.scores(names))]
        telemetry.decisions.labels("prioritize", "scored").inc(len(names))
        response = _json([{"Host": node, "Score": score} for node, score in zip(names, scores)])
        telemetry.latency.labels("prioritize").observe(time.perf_counter() - start)
        return response

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

    @app.get("/metrics")
    async def metrics() -> Response:
        now = time.time()
        for metric, age in engine.cache.ages(now).items():
            telemetry.metric_age.labels(metric).set(age)
        telemetry.source_up.labels(engine.cache.source.name).set(1 if engine.cache.source_up else 0)
        telemetry.policies.labels("valid").set(len(engine.store.policies()))
        telemetry.policies.labels("invalid").set(len(engine.store.invalid()))
        return Response(generate_latest(telemetry.registry), media_type=CONTENT_TYPE_LATEST)

    return app
