"""An extender app wired to the demo policy and a metrics file, without a cluster."""

from __future__ import annotations

import pathlib

import pytest

from support.asgi import AsgiClient
from tas_extender.serve.api import create_app
from tas_extender.decide.cache import MetricCache
from tas_extender.cli import load_policy_files
from tas_extender.decide.engine import Engine
from tas_extender.sources.textfile import TextfileSource
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.telemetry import Telemetry

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def metrics_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "metrics.prom"
    path.write_text((FIXTURES / "health.prom").read_text())
    return path


@pytest.fixture
def engine(metrics_file) -> Engine:
    store = PolicyStore()
    valid, invalid = load_policy_files([str(FIXTURES / "policies" / "demo-policy.yaml")])
    store.replace_all(valid, invalid)
    cache = MetricCache(TextfileSource(str(metrics_file)), max_age=60)
    engine = Engine(store, cache)
    cache.refresh(store.metric_names())
    engine.rebuild()
    return engine


@pytest.fixture
def client(engine) -> AsgiClient:
    return AsgiClient(create_app(engine, Telemetry(), max_body_bytes=1024 * 1024, readiness=lambda: []))


@pytest.fixture
def request_body():
    def load(name: str) -> bytes:
        return (FIXTURES / "scheduler-requests" / f"{name}-k8s1.36.json").read_bytes()
    return load


@pytest.fixture
def app_for(tmp_path):
    """Build an app over the demo policy and a metrics text: app_for(metrics, fail_closed, readiness)."""
    def build(metrics: str, fail_closed: bool = False, readiness=lambda: []) -> AsgiClient:
        path = tmp_path / "app-metrics.prom"
        path.write_text(metrics)
        store = PolicyStore()
        store.replace_all(*load_policy_files([str(FIXTURES / "policies" / "demo-policy.yaml")]))
        cache = MetricCache(TextfileSource(str(path)), max_age=60)
        engine = Engine(store, cache, fail_closed=fail_closed)
        cache.refresh(store.metric_names())
        engine.rebuild()
        return AsgiClient(create_app(engine, Telemetry(), 1024 * 1024, readiness))
    return build
