"""Waking kube-scheduler when a node passes again (cluster/requeue.py): which nodes recovered, per
policy, across sync rounds; the annotation the leader writes on them a round later; the rounds of
the sync loop that write it, on the leader only."""

from __future__ import annotations

import datetime
import logging
import pathlib

import pytest
from kubernetes import client
from support.load_aware import NOW, annotations_for

from tas_extender.cli import load_policy_files, parser
from tas_extender.cluster.controller import Controller
from tas_extender.cluster.requeue import (
    ATTEMPTS,
    LOAD,
    RECOVERED_ANNOTATION,
    Requeuer,
    policy_rejections,
    recovered,
    recovered_patch,
    rejections_of,
)
from tas_extender.cluster.sync import SyncLoop
from tas_extender.cluster.watch import NodeCache
from tas_extender.decide.cache import MetricCache
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.mode import LoadAware
from tas_extender.decide.load.policy import DEFAULT_POLICY
from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import parse_policy
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.telemetry import Telemetry
from tas_extender.sources.textfile import TextfileSource

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
NODES = {"node-1", "node-2", "node-3"}
A, B = "default/a", "default/b"


# --- which nodes recovered, per policy --------------------------------------------------------

@pytest.mark.parametrize(("before", "now", "found"), [
    ({A: {"node-1", "node-2"}}, {A: {"node-1"}}, {"node-2": {A}}),
    ({A: {"node-2"}, B: {"node-2"}}, {A: set(), B: {"node-2"}}, {"node-2": {A}}),
    ({A: {"node-2"}, B: {"node-2"}}, {A: set(), B: set()}, {"node-2": {A, B}}),
    ({A: {"node-2"}}, {A: {"node-2"}}, {}),
    ({A: set()}, {A: set()}, {}),
    ({A: set()}, {A: {"node-1"}}, {}),
    ({}, {A: {"node-1"}}, {}),
    ({A: {"node-1"}}, {}, {"node-1": {A}}),
    ({A: {"gone"}}, {A: set()}, {}),
], ids=[
    "a node that passes a policy it failed has recovered for it",
    "a node passing one policy again while failing another has recovered for the one",
    "a node passing both policies again has recovered for both",
    "a node failing as before has not recovered",
    "a node passing as before has not recovered",
    "a node failing now has not recovered",
    "a new policy's rejections are no recovery",
    "a policy gone (deleted, invalid, in audit mode) rejects nothing: its nodes recovered",
    "a node no longer in the cluster is left out",
])
def test_which_nodes_recovered_for_which_policy(before, now, found):
    frozen = {key: frozenset(nodes) for key, nodes in before.items()}
    assert recovered(frozen, {key: frozenset(nodes) for key, nodes in now.items()}, NODES) == \
        {node: frozenset(keys) for node, keys in found.items()}


def _policy(name: str, target: float, audit: bool = False, dontschedule: bool = True) -> object:
    strategies = {"dontschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": target}]}}
    if not dontschedule:
        strategies = {"scheduleonmetric": {"rules": [{"metricname": "health_metric", "operator": "LessThan"}]}}
    annotations = {"telemetry.intel.com/enforcement": "audit"} if audit else {}
    return parse_policy({"apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
                         "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                         "spec": {"strategies": strategies}})


def test_an_enforced_policys_dontschedule_rules_reject_and_nothing_else_does():
    policies = [_policy("a", 1), _policy("audited", 1, audit=True), _policy("scores", 1, dontschedule=False)]
    values = {"node-1": 1.0, "node-2": 0.0, "node-3": 1.0, "elsewhere": 1.0}
    snapshot = Snapshot({"health_metric": values}, set(values))
    engine = Engine.offline(policies, snapshot, NODES)
    assert policy_rejections(engine.view, policies, NODES) == {A: frozenset({"node-1", "node-3"})}


def test_in_load_aware_mode_the_load_limits_reject_too():
    load = LoadAware(DEFAULT_POLICY, annotations_for({"node-1": 90.0, "node-2": 40.0, "node-3": 10.0}).get,
                     clock=lambda: NOW)
    rejections = rejections_of(lambda: Engine.offline([], Snapshot()).view, list, load)
    assert rejections(NODES) == {LOAD: frozenset({"node-1"})}


def test_the_patch_sets_the_annotation_alone_to_the_time_in_rfc3339():
    at = datetime.datetime(2026, 7, 22, 10, 0, 1, 250000, tzinfo=datetime.UTC)
    assert recovered_patch(at) == {"metadata": {"annotations": {RECOVERED_ANNOTATION: "2026-07-22T10:00:01.250000Z"}}}


# --- the rounds -------------------------------------------------------------------------------

class _Rounds:
    """What rejects which node, set by the test before each round."""

    def __init__(self, **rejected: set[str]):
        self.now = {key: frozenset(nodes) for key, nodes in rejected.items()}

    def set(self, **rejected: set[str]) -> None:
        self.now = {key: frozenset(nodes) for key, nodes in rejected.items()}

    def __call__(self, nodes) -> dict[str, frozenset[str]]:
        return {key.replace("_", "/"): rejected & set(nodes) for key, rejected in self.now.items()}


class _Patches:
    def __init__(self):
        self.sent: list[tuple[str, dict]] = []
        self.failing: dict[str, Exception] = {}

    def __call__(self, node: str, body: dict) -> None:
        if node in self.failing:
            raise self.failing[node]
        self.sent.append((node, body))

    def nodes(self) -> list[str]:
        return [node for node, _ in self.sent]


class _Clock:
    def __init__(self):
        self.now = NOW

    def __call__(self) -> float:
        self.now += 5.0
        return self.now


def _requeuer(rounds: _Rounds, per_round: int = 100) -> tuple[Requeuer, _Patches, Telemetry]:
    patches, telemetry = _Patches(), Telemetry()
    return Requeuer(rounds, patches, telemetry.requeue_patches, clock=_Clock(), per_round=per_round), patches, telemetry


def _counts(telemetry: Telemetry) -> dict[str, float]:
    return {result: telemetry.registry.get_sample_value("tas_extender_node_requeue_patches_total", {"result": result})
            for result in ("sent", "failed")}


def test_the_first_round_has_nothing_to_compare_with_and_patches_nothing():
    rounds = _Rounds(default_a={"node-1"})
    requeuer, patches, _ = _requeuer(rounds)
    assert requeuer.sync(NODES, leader=True) == 0
    rounds.set(default_a=set())  # passes in the second round: recovered, patched in the third
    assert requeuer.sync(NODES, leader=True) == 0
    assert requeuer.sync(NODES, leader=True) == 1
    assert patches.nodes() == ["node-1"]


def test_a_round_where_nothing_changed_patches_nothing():
    rounds = _Rounds(default_a={"node-1", "node-2", "node-3"})
    requeuer, patches, _ = _requeuer(rounds)
    assert [requeuer.sync(NODES, leader=True) for _ in range(4)] == [0, 0, 0, 0]
    assert patches.sent == []


def test_a_node_recovered_is_annotated_the_round_after_once_and_logged(caplog):
    rounds = _Rounds(default_a={"node-1", "node-2", "node-3"}, default_b={"node-2"})
    requeuer, patches, telemetry = _requeuer(rounds)
    requeuer.sync(NODES, leader=True)
    rounds.set(default_a={"node-1", "node-3"}, default_b={"node-2"})  # node-2 passes a, still fails b
    assert requeuer.sync(NODES, leader=True) == 0  # every replica is to see it first
    with caplog.at_level(logging.INFO, logger="tas_extender.cluster.requeue"):
        assert requeuer.sync(NODES, leader=True) == 1
    assert patches.sent == [("node-2", recovered_patch(datetime.datetime.fromtimestamp(NOW + 5, datetime.UTC)))]
    assert [r.getMessage() for r in caplog.records] == [
        f"node-2 passes policy default/a again: annotated {RECOVERED_ANNOTATION}=2027-01-15T08:00:05.000000Z "
        "so that the scheduler tries its waiting pods again"]
    assert [requeuer.sync(NODES, leader=True) for _ in range(3)] == [0, 0, 0]  # once per recovery
    assert _counts(telemetry) == {"sent": 1, "failed": 0}


def test_each_recovery_writes_a_new_value():
    rounds = _Rounds(default_a={"node-1"})
    requeuer, patches, _ = _requeuer(rounds)
    for rejected in ({"node-1"}, set(), set(), {"node-1"}, set(), set()):
        rounds.set(default_a=rejected)
        requeuer.sync(NODES, leader=True)
    values = [body["metadata"]["annotations"][RECOVERED_ANNOTATION] for _, body in patches.sent]
    assert patches.nodes() == ["node-1", "node-1"] and values[0] != values[1]


def test_a_node_failing_again_before_its_turn_is_not_annotated():
    rounds = _Rounds(default_a={"node-1"})
    requeuer, patches, _ = _requeuer(rounds)
    for rejected in ({"node-1"}, set(), {"node-1"}, {"node-1"}):
        rounds.set(default_a=rejected)
        requeuer.sync(NODES, leader=True)
    assert patches.sent == []


def test_a_node_recovered_for_two_policies_in_one_round_is_patched_once():
    rounds = _Rounds(default_a={"node-1", "node-2"}, default_b={"node-1"})
    requeuer, patches, _ = _requeuer(rounds)
    requeuer.sync(NODES, leader=True)
    rounds.set(default_a=set(), default_b=set())
    requeuer.sync(NODES, leader=True)
    assert requeuer.sync(NODES, leader=True) == 2
    assert patches.nodes() == ["node-1", "node-2"]


def test_a_failed_patch_is_counted_and_tried_again_next_round_while_the_node_passes(caplog):
    rounds = _Rounds(default_a={"node-1", "node-2"})
    requeuer, patches, telemetry = _requeuer(rounds)
    patches.failing["node-1"] = client.ApiException(status=403, reason="Forbidden")
    requeuer.sync(NODES, leader=True)
    rounds.set(default_a=set())
    requeuer.sync(NODES, leader=True)
    with caplog.at_level(logging.WARNING, logger="tas_extender.cluster.requeue"):
        assert requeuer.sync(NODES, leader=True) == 1  # node-2 is patched all the same
    assert [r.getMessage() for r in caplog.records] == [
        f"node-1: annotating {RECOVERED_ANNOTATION} failed (403 Forbidden); trying again next sync round"]
    patches.failing.clear()
    assert requeuer.sync(NODES, leader=True) == 1
    assert patches.nodes() == ["node-2", "node-1"]
    assert _counts(telemetry) == {"sent": 2, "failed": 1}


def _node_1_recovers_where_patches_fail():
    """node-1 rejected, then passing, its patches failing: the rounds, the requeuer, the telemetry."""
    rounds = _Rounds(default_a={"node-1"})
    requeuer, patches, telemetry = _requeuer(rounds)
    patches.failing["node-1"] = ConnectionError("the API server went away")
    requeuer.sync(NODES, leader=True)
    rounds.set(default_a=set())
    return rounds, requeuer, telemetry


def test_a_patch_failing_every_time_is_given_up_after_its_attempts():
    _, requeuer, telemetry = _node_1_recovers_where_patches_fail()
    for _ in range(ATTEMPTS + 3):
        requeuer.sync(NODES, leader=True)
    assert _counts(telemetry) == {"sent": 0, "failed": ATTEMPTS}


def test_a_failed_patch_is_not_tried_again_once_the_node_fails_again():
    rounds, requeuer, telemetry = _node_1_recovers_where_patches_fail()
    requeuer.sync(NODES, leader=True)
    requeuer.sync(NODES, leader=True)  # fails
    rounds.set(default_a={"node-1"})
    requeuer.sync(NODES, leader=True)
    assert _counts(telemetry) == {"sent": 0, "failed": 1}


def test_a_replica_that_does_not_lead_follows_the_rounds_and_patches_nothing():
    rounds = _Rounds(default_a={"node-1", "node-2"})
    requeuer, patches, _ = _requeuer(rounds)
    requeuer.sync(NODES, leader=False)
    rounds.set(default_a={"node-2"})
    requeuer.sync(NODES, leader=False)
    assert requeuer.sync(NODES, leader=False) == 0
    rounds.set(default_a=set())  # node-2 recovers while this replica follows; it leads the round after
    requeuer.sync(NODES, leader=False)
    assert requeuer.sync(NODES, leader=True) == 1
    assert patches.nodes() == ["node-2"]


def test_a_round_patches_at_most_its_share_of_many_recovered_nodes():
    many = {f"node-{i}" for i in range(10)}
    rounds = _Rounds(default_a=many)
    requeuer, patches, _ = _requeuer(rounds, per_round=3)
    requeuer.sync(many, leader=True)
    rounds.set(default_a=set())
    requeuer.sync(many, leader=True)
    assert [requeuer.sync(many, leader=True) for _ in range(2)] == [3, 0]  # those left were woken for


# --- in the sync loop: real policies and metrics, the leader's rounds only ------------------

class _Core:
    def __init__(self):
        self.patches: list[tuple[str, dict]] = []

    def patch_node(self, name, body):
        self.patches.append((name, body))

    def recovered(self) -> list[str]:
        return [name for name, body in self.patches
                if RECOVERED_ANNOTATION in (body.get("metadata") or {}).get("annotations", {})]


def _node(name: str) -> client.V1Node:
    return client.V1Node(metadata=client.V1ObjectMeta(name=name, resource_version="1"))


def _health(path: pathlib.Path, **values: int) -> None:
    """The file renamed into place: a change the textfile source always sees."""
    written = path.with_suffix(".new")
    written.write_text("".join(f'health_metric{{node="{node.replace("_", "-")}"}} {value}\n'
                               for node, value in values.items()))
    written.replace(path)


def _loop(metrics: pathlib.Path, leading: list[bool], requeue: bool = True) -> tuple[SyncLoop, _Core]:
    store = PolicyStore()
    store.replace_all(*load_policy_files([str(FIXTURES / "policies" / "demo-policy.yaml")]))
    cache = MetricCache(TextfileSource(str(metrics)), 60.0)
    engine = Engine(store, cache)
    telemetry, core = Telemetry(), _Core()
    controller = Controller(client.ApiClient(), engine, telemetry, is_leader=lambda: leading[0], core=core,
                            custom=object(), nodes=NodeCache())
    controller.on_node_list([_node(name) for name in sorted(NODES)])
    requeuer = Requeuer(rejections_of(lambda: engine.view, store.policies), core.patch_node,
                        telemetry.requeue_patches) if requeue else None
    return SyncLoop(store, cache, engine, 1.0, controller, requeuer=requeuer), core


@pytest.mark.parametrize("leading", [True, False], ids=["the leader annotates", "a follower does not"])
def test_the_loop_annotates_the_node_whose_metric_is_allowed_again(tmp_path, leading):
    metrics = tmp_path / "metrics.prom"
    _health(metrics, node_1=1, node_2=1, node_3=1)  # the demo policy's dontschedule: health_metric 1 or 2
    loop, core = _loop(metrics, [leading])
    loop.run_once()
    loop.run_once()
    _health(metrics, node_1=1, node_2=0, node_3=1)
    loop.run_once()
    assert core.recovered() == []
    loop.run_once()
    loop.run_once()
    assert core.recovered() == (["node-2"] if leading else [])


def test_with_requeueing_off_the_loop_annotates_nothing(tmp_path):
    metrics = tmp_path / "metrics.prom"
    _health(metrics, node_1=1, node_2=1, node_3=1)
    loop, core = _loop(metrics, [True], requeue=False)
    loop.run_once()
    _health(metrics, node_1=1, node_2=0, node_3=1)
    for _ in range(3):
        loop.run_once()
    assert core.recovered() == []


def test_the_switch_is_on_by_default_and_turns_off():
    assert parser().parse_args(["serve"]).requeue_on_recovery is True
    assert parser().parse_args(["serve", "--no-requeue-on-recovery"]).requeue_on_recovery is False


def test_the_counter_is_exposed_from_zero():
    assert _counts(Telemetry()) == {"sent": 0, "failed": 0}
