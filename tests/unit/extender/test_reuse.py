"""Answers reused between syncs (decision.Decider): the next pod of a policy with the same
candidates gets the answer already made, and any change that could alter it (new metrics, a policy
changed, another candidate) is answered afresh in the same round. Each test: answer, change, answer."""

from __future__ import annotations

import json
import pathlib

import orjson
import pytest
import yaml

from tas_extender.decide import wire
from tas_extender.decide.cache import MetricCache
from tas_extender.cli import load_policy_files
from tas_extender.decide.decision import Decider
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.decide import LoadState
from tas_extender.decide.load.policy import DEFAULT_POLICY
from tas_extender.decide.policy import ENFORCEMENT_ANNOTATION, parse_policy
from tas_extender.sources.textfile import TextfileSource
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.telemetry import Telemetry

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
DEMO = FIXTURES / "policies" / "demo-policy.yaml"


def body(verb: str, names: list[str] | None = None) -> wire.ExtenderArgs:
    sent = json.loads((FIXTURES / "scheduler-requests" / f"{verb}-node-names-k8s1.36.json").read_text())
    if names is not None:
        sent["NodeNames"] = names
    return wire.parse(orjson.dumps(sent))


class Counted:
    """Counts the engine's per-request work, to tell a reused answer from a computed one."""

    def __init__(self, engine: Engine) -> None:
        self.failed = self.scores = 0
        failed, scores = engine.failed, engine.scores

        def count_failed(*args):
            self.failed += 1
            return failed(*args)

        def count_scores(*args):
            self.scores += 1
            return scores(*args)
        engine.failed, engine.scores = count_failed, count_scores  # type: ignore[method-assign]


@pytest.fixture
def metrics(tmp_path) -> pathlib.Path:
    path = tmp_path / "metrics.prom"
    path.write_text('health_metric{node="node-1"} 0\nhealth_metric{node="node-2"} 0\nhealth_metric{node="node-3"} 0\n'
                    'health_metric{node="node-4"} 1\n')
    return path


@pytest.fixture
def parts(metrics):
    store = PolicyStore()
    store.replace_all(*load_policy_files([str(DEMO)]))
    cache = MetricCache(TextfileSource(str(metrics)), max_age=60)
    engine = Engine(store, cache)

    def sync() -> None:  # one round of the sync loop: fetch, then rebuild the view
        cache.refresh(store.metric_names())
        engine.rebuild()
    sync()
    return store, engine, sync


def failed_nodes(answer: bytes) -> dict[str, str]:
    return orjson.loads(answer)["FailedNodes"]


def test_the_next_pod_with_the_same_candidates_gets_the_answer_already_made(parts):
    _, engine, _ = parts
    decider, counted = Decider(engine, Telemetry()), Counted(engine)
    first, second = decider.filter(body("filter")), decider.filter(body("filter"))
    assert first == second
    assert counted.failed == 1
    assert decider.prioritize(body("prioritize")) == decider.prioritize(body("prioritize"))
    assert counted.scores == 1


def test_every_answer_is_counted_reused_or_not(parts):
    _, engine, _ = parts
    telemetry = Telemetry()
    decider = Decider(engine, telemetry)
    for _ in range(3):
        decider.filter(body("filter"))
        decider.prioritize(body("prioritize"))
    decisions = "tas_extender_decisions_total"
    assert telemetry.registry.get_sample_value(decisions, {"verb": "filter", "result": "passed"}) == 9
    assert telemetry.registry.get_sample_value(decisions, {"verb": "prioritize", "result": "scored"}) == 9


def test_new_metrics_are_answered_in_the_round_that_fetched_them(parts, metrics):
    _, engine, sync = parts
    decider = Decider(engine)
    assert failed_nodes(decider.filter(body("filter"))) == {}
    before = decider.prioritize(body("prioritize"))
    metrics.write_text('health_metric{node="node-1"} 1\nhealth_metric{node="node-2"} 0\n'
                       'health_metric{node="node-3"} 0\n')
    sync()
    assert list(failed_nodes(decider.filter(body("filter")))) == ["node-1"]
    assert decider.prioritize(body("prioritize")) != before


def test_a_sync_that_finds_every_value_as_it_was_keeps_the_answers(parts, metrics):
    _, engine, sync = parts
    decider, counted = Decider(engine), Counted(engine)
    view = engine.view
    before = decider.filter(body("filter"))
    metrics.write_text(metrics.read_text())  # written again, the same values: read again
    sync()
    assert engine.view is view
    assert decider.filter(body("filter")) == before
    assert counted.failed == 1


def test_a_node_the_node_watch_adds_makes_a_new_view_in_that_round(parts):
    _, engine, sync = parts
    view = engine.view
    engine.known_nodes = {"node-5"}  # what the node watch does
    sync()
    assert engine.view is not view and "node-5" in engine.view.evaluated


def test_a_changed_policy_is_answered_at_once(parts):
    store, engine, _ = parts
    decider = Decider(engine)
    assert failed_nodes(decider.filter(body("filter"))) == {}
    stricter = parse_policy({
        "apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
        "metadata": {"name": "demo-policy", "namespace": "health-metric-demo"},
        "spec": {"strategies": {"dontschedule": {"rules": [
            {"metricname": "health_metric", "operator": "LessThan", "target": 1}]}}}})
    store.put(stricter)  # what the policy watch does; the engine rebuilds its view on it
    assert sorted(failed_nodes(decider.filter(body("filter")))) == ["node-1", "node-2", "node-3"]


def test_another_candidate_is_decided_not_given_the_answer_for_the_others(parts):
    _, engine, _ = parts
    decider = Decider(engine)
    assert failed_nodes(decider.filter(body("filter"))) == {}
    with_node_4 = decider.filter(body("filter", ["node-1", "node-2", "node-3", "node-4"]))
    assert list(failed_nodes(with_node_4)) == ["node-4"]
    assert orjson.loads(with_node_4)["NodeNames"] == ["node-1", "node-2", "node-3"]


def test_the_same_names_written_otherwise_are_decided_afresh_and_answered_alike(parts):
    _, engine, _ = parts
    decider, counted = Decider(engine), Counted(engine)
    sent = json.loads((FIXTURES / "scheduler-requests" / "filter-node-names-k8s1.36.json").read_text())
    compact, spaced = (wire.parse(json.dumps(sent, separators=separators).encode())
                       for separators in ((",", ":"), (", ", ": ")))
    assert compact.names_json != spaced.names_json  # the key is the array as sent
    assert decider.filter(compact) == decider.filter(spaced)
    assert counted.failed == 2


def test_a_policy_in_audit_mode_is_reported_on_every_call_though_the_answer_is_reused(parts):
    store, engine, _ = parts
    audit = parse_policy({**_demo(), "metadata": {"name": "demo-policy", "namespace": "health-metric-demo",
                                                  "annotations": {ENFORCEMENT_ANNOTATION: "audit"}}})
    store.put(audit)
    reports = []
    decider = Decider(engine, audit_events=lambda pod, policy, failed, candidates: reports.append(candidates))
    answers = {decider.filter(body("filter", ["node-1", "node-4"])) for _ in range(3)}
    assert len(answers) == 1 and failed_nodes(answers.pop()) == {}  # audit: nothing filtered
    assert reports == [2, 2, 2]


def test_nothing_is_reused_with_load_aware_scheduling_on(parts):
    _, engine, _ = parts

    calls = []

    def state() -> LoadState:
        calls.append(1)
        return LoadState(DEFAULT_POLICY, 0.0, lambda node: None, lambda node, window: 0)
    decider = Decider(engine, load=state)
    decider.filter(body("filter"))
    decider.filter(body("filter"))
    assert len(calls) == 2


def test_full_node_objects_are_answered_from_the_request_each_time(parts):
    _, engine, _ = parts
    decider = Decider(engine)
    raw = (FIXTURES / "scheduler-requests" / "filter-full-nodes-k8s1.36.json").read_bytes()
    counted = Counted(engine)
    assert decider.filter(wire.parse(raw)) == decider.filter(wire.parse(raw))
    assert counted.failed == 2


def _demo() -> dict:
    return yaml.safe_load(DEMO.read_text())
