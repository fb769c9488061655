"""The sync loop over real parts: a metrics file, the demo policy, the cache and the engine."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable

from tas_extender.decide.cache import MetricCache
from tas_extender.cli import load_policy_files
from tas_extender.decide.engine import Engine
from tas_extender.sources.textfile import TextfileSource
from tas_extender.decide.store import PolicyStore
from tas_extender.cluster.sync import SyncLoop

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
DEADLINE_SECONDS = 20


def _loop(metrics: pathlib.Path, period: float = 0.05) -> SyncLoop:
    store = PolicyStore()
    store.replace_all(*load_policy_files([str(FIXTURES / "policies" / "demo-policy.yaml")]))
    cache = MetricCache(TextfileSource(str(metrics)), max_age=60)
    return SyncLoop(store, cache, Engine(store, cache), period)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _failed(loop: SyncLoop) -> set[str]:
    (policy,) = loop.store.policies()
    return set(loop.engine.failed(policy, ["node-1", "node-2", "node-3"]))


def test_one_round_fetches_the_policies_metrics_and_rebuilds_the_decisions(tmp_path):
    metrics = tmp_path / "metrics.prom"
    metrics.write_text((FIXTURES / "health.prom").read_text())
    loop = _loop(metrics)
    assert not loop.cache.synced

    loop.run_once()

    assert loop.cache.synced
    assert _failed(loop) == {"node-2", "node-3"}  # health_metric 1 and 2 break the dontschedule rules


def test_the_loop_survives_a_failed_round_and_follows_the_source_once_it_is_back(tmp_path):
    metrics = tmp_path / "metrics.prom"  # not there yet: every round fails until it is written
    loop = _loop(metrics)
    loop.start()
    try:
        _wait_for(lambda: bool(loop.cache.last_error), "a failed fetch")
        assert not loop.cache.synced

        metrics.write_text((FIXTURES / "health.prom").read_text())
        _wait_for(lambda: loop.cache.synced, "the first successful fetch")
        _wait_for(lambda: _failed(loop) == {"node-2", "node-3"}, "the decisions from the file")

        rewritten = tmp_path / "metrics.new"  # renamed over the old file: a change the source always sees
        rewritten.write_text('health_metric{node="node-1"} 1\nhealth_metric{node="node-2"} 0\n'
                             'health_metric{node="node-3"} 0\n')
        rewritten.replace(metrics)
        _wait_for(lambda: _failed(loop) == {"node-1"}, "the decisions from the rewritten file")
    finally:
        loop.stop()
    assert loop.join(DEADLINE_SECONDS), "the loop did not end after stop()"


def test_a_stopped_loop_ends_even_with_a_long_period(tmp_path):
    metrics = tmp_path / "metrics.prom"
    metrics.write_text((FIXTURES / "health.prom").read_text())
    loop = _loop(metrics, period=3600)
    loop.start()
    _wait_for(lambda: loop.cache.synced, "the first round")

    loop.stop()

    assert loop.join(DEADLINE_SECONDS), "stop() did not cut the wait for the next round short"


def test_filter_answers_an_error_until_a_round_has_fetched_the_listed_policies_metrics(tmp_path):
    """A restarted extender must not let pods through a policy whose metrics it has not fetched
    yet (they would look missing, and missing fails open): the scheduler gets an Error and retries."""
    import json

    import asyncio

    import httpx

    from tas_extender.serve.api import create_app
    from tas_extender.decide.decision import NOT_DECIDED
    from tas_extender.decide.telemetry import Telemetry

    metrics = tmp_path / "metrics.prom"
    metrics.write_text((FIXTURES / "health.prom").read_text())
    store = PolicyStore()  # as in a cluster: empty until the controller has listed the policies
    cache = MetricCache(TextfileSource(str(metrics)), max_age=60)
    engine = Engine(store, cache)
    loop = SyncLoop(store, cache, engine, period=60)
    app = create_app(engine, Telemetry(), 1024 * 1024, readiness=lambda: [], decided=loop.decided)
    body = (FIXTURES / "scheduler-requests" / "filter-node-names-k8s1.36.json").read_bytes()

    def filter_answer() -> dict:
        async def call() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as client:
                return await client.post("/scheduler/filter", content=body, headers={"Content-Type": "application/json"})
        response = asyncio.run(call())
        assert response.status_code == 200
        return json.loads(response.content)

    assert filter_answer()["Error"] == NOT_DECIDED
    loop.run_once()  # a round before the policies are listed decides nothing yet
    assert filter_answer()["Error"] == NOT_DECIDED

    store.replace_all(*load_policy_files([str(FIXTURES / "policies" / "demo-policy.yaml")]))
    assert filter_answer()["Error"] == NOT_DECIDED  # listed, but their metrics not fetched
    loop.run_once()

    answer = filter_answer()
    assert not answer.get("Error")
    assert set(answer["FailedNodes"]) == {"node-2", "node-3"}
