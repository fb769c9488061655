"""Node labels that belong to someone else: a user's label, or another namespace's policy of the
same name. The controller never overwrites them and says on the policy why its label is not set."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tas_extender.decide.cache import MetricCache
from tas_extender.cluster.controller import Controller
from tas_extender.cluster.reconcile import MANAGED_ANNOTATION, foreign_labels, label_patch, shadowed_policies
from tas_extender.cluster.crd import crd
from tas_extender.decide.engine import Engine
from tas_extender.decide.metrics import Sample
from tas_extender.decide.policy import PolicyError, parse_policy
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.telemetry import Telemetry

DESCHEDULE = {"deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2}]},
              "labeling": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2,
                                      "labels": ["health=bad"]}]}}


def _policy(namespace: str, name: str = "demo", created: str = "2026-01-01T00:00:00Z"):
    return parse_policy({"metadata": {"name": name, "namespace": namespace, "generation": 1,
                                      "creationTimestamp": created, "uid": f"uid-{namespace}"},
                         "spec": {"strategies": DESCHEDULE}})


def test_a_policy_name_longer_than_a_label_key_is_refused_with_the_field_and_why():
    with pytest.raises(PolicyError) as caught:
        parse_policy({"metadata": {"name": "p" * 64}, "spec": {"strategies": {}}})
    assert caught.value.field == "metadata.name"
    assert "64 characters" in caught.value.reason and "at most 63" in caught.value.reason
    assert parse_policy({"metadata": {"name": "p" * 63}, "spec": {"strategies": {}}}).name == "p" * 63


def test_the_crd_refuses_the_same_names_at_apply():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    [rule] = schema["x-kubernetes-validations"]
    assert rule["rule"] == "size(self.metadata.name) <= 63"
    assert "metadata.name" in rule["message"] and "63" in rule["message"]


def test_labels_the_controller_did_not_set_are_foreign_and_its_own_are_not():
    have = {"demo": "mine", "zone": "a", "telemetry.aware.scheduling.demo/health": "bad"}
    managed = {MANAGED_ANNOTATION: "telemetry.aware.scheduling.demo/health"}
    want = {"demo": "violating", "telemetry.aware.scheduling.demo/health": "worse", "other": "violating"}
    assert foreign_labels(have, managed, want) == {"demo": "mine"}
    # With the foreign key taken out, the patch leaves the user's label alone.
    del want["demo"]
    patch = label_patch(have, managed, want)
    assert "demo" not in patch["metadata"]["labels"]


def test_the_oldest_of_same_named_policies_owns_their_labels():
    older, newer = _policy("team-a", created="2026-01-01T00:00:00Z"), _policy("team-b", created="2026-02-01T00:00:00Z")
    other = _policy("team-c", name="other")
    shadowed = shadowed_policies([newer, other, older])
    assert list(shadowed) == ["team-b/demo"]
    assert "team-a/demo" in shadowed["team-b/demo"] and "node label demo" in shadowed["team-b/demo"]
    # Created in the same second: the first namespace in order owns them.
    assert list(shadowed_policies([_policy("b"), _policy("a")])) == ["b/demo"]


class _Source:
    name = "test"

    def __init__(self, values: dict[str, float]):
        self.values = values

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        now = time.time()
        return {m: {node: Sample(v, now) for node, v in self.values.items()} for m in metrics}


class _Core:
    """Records the node patches and events the controller sends (a test double of CoreV1Api)."""

    def __init__(self):
        self.patches: dict[str, dict] = {}
        self.events: list[client.CoreV1Event] = []

    def patch_node(self, name, body):
        self.patches[name] = body

    def create_namespaced_event(self, namespace, event):
        self.events.append(event)


class _Custom:
    def __init__(self):
        self.statuses: dict[str, dict] = {}

    def patch_namespaced_custom_object_status(self, group, version, namespace, plural, name, body):
        self.statuses[f"{namespace}/{name}"] = body["status"]


def _controller(policies, node_labels: dict[str, dict[str, str]], values: dict[str, float]) -> Controller:
    store = PolicyStore()
    cache = MetricCache(_Source(values), 60.0)
    engine = Engine(store, cache)
    controller = Controller(client.ApiClient(), engine, Telemetry(), core=_Core(), custom=_Custom())
    controller.on_node_list([client.V1Node(metadata=client.V1ObjectMeta(name=n, labels=labels))
                              for n, labels in node_labels.items()])
    objects = [{"metadata": {"name": p.name, "namespace": p.namespace, "generation": 1, "uid": f"uid-{p.key}",
                             "creationTimestamp": p.created}, "spec": {"strategies": DESCHEDULE}} for p in policies]
    controller.on_policy_list(objects)
    cache.refresh(store.metric_names())
    engine.rebuild()
    return controller


def _conditions(controller: Controller, key: str) -> dict[str, dict]:
    return {c["type"]: c for c in controller.custom.statuses[key]["conditions"]}


def test_a_users_label_is_kept_and_the_policy_says_why_its_own_is_not_set():
    controller = _controller([_policy("team-a")], {"node-1": {"demo": "mine"}, "node-2": {}},
                             {"node-1": 2, "node-2": 2})
    controller.reconcile()
    patches = controller.core.patches
    assert "demo" not in patches["node-1"]["metadata"]["labels"]  # the user's value stands
    assert patches["node-1"]["metadata"]["labels"] == {"telemetry.aware.scheduling.demo/health": "bad"}
    assert patches["node-2"]["metadata"]["labels"]["demo"] == "violating"
    condition = _conditions(controller, "team-a/demo")["LabelsNotSet"]
    assert condition["reason"] == "LabelNotOurs"
    assert "node node-1 already has label demo=mine" in condition["message"]
    assert [(e.type, e.reason) for e in controller.core.events] == [("Warning", "LabelNotOurs")]
    # The violating node is still reported.
    assert controller.custom.statuses["team-a/demo"]["violatingNodes"] == ["node-1", "node-2"]


def test_a_same_named_policy_in_another_namespace_sets_no_label_and_says_which_owns_it():
    controller = _controller([_policy("team-b", created="2026-02-01T00:00:00Z"),
                              _policy("team-a", created="2026-01-01T00:00:00Z")],
                             {"node-1": {}}, {"node-1": 2})
    desired = controller.desired_labels()
    assert desired.owners == {"demo": "team-a/demo", "telemetry.aware.scheduling.demo/health": "team-a/demo"}
    controller.reconcile()
    assert _conditions(controller, "team-b/demo")["LabelsNotSet"]["reason"] == "NameTaken"
    assert "LabelsNotSet" not in _conditions(controller, "team-a/demo")
    assert controller.custom.statuses["team-b/demo"]["violatingNodes"] == ["node-1"]


def test_without_conflicts_there_is_no_labels_not_set_condition():
    controller = _controller([_policy("team-a")], {"node-1": {}}, {"node-1": 2})
    controller.reconcile()
    assert set(_conditions(controller, "team-a/demo")) == {"Valid", "Violating"}
    assert controller.core.events == []
