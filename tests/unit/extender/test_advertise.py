"""The extended resource kept on every node (cluster/advertise.py): which nodes need it, the patch
that gives it, and the leader's rounds that send it."""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes import client

from tas_extender.cli import parser
from tas_extender.cluster.advertise import (DEFAULT, Advertiser, ExtendedResource, capacity_patch, is_zero,
                                            lacking)
from tas_extender.cluster.controller import Controller
from tas_extender.cluster.sync import SyncLoop
from tas_extender.cluster.watch import NodeCache, NodeCapacity
from tas_extender.decide.cache import MetricCache
from tas_extender.decide.engine import Engine
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.telemetry import Telemetry

RESOURCE = "telemetry/scheduling"


@pytest.mark.parametrize(("text", "name", "quantity"), [
    ("telemetry/scheduling=1000", "telemetry/scheduling", "1000"),
    ("example.com/tas-slots=1k", "example.com/tas-slots", "1k"),
    ("a.b-c.example/x_y.z=5Ki", "a.b-c.example/x_y.z", "5Ki"),
], ids=["the default", "a domain of one's own, a decimal suffix", "a binary suffix"])
def test_an_extended_resource_parses_into_name_and_quantity(text, name, quantity):
    assert ExtendedResource.parse(text) == ExtendedResource(name, quantity)


@pytest.mark.parametrize(("text", "says"), [
    ("telemetry/scheduling", "NAME=QUANTITY"),
    ("scheduling=1000", "not an extended resource name"),
    ("Telemetry/scheduling=1000", "not an extended resource name"),
    ("telemetry/-scheduling=1000", "not an extended resource name"),
    (f"telemetry/{'x' * 64}=1000", "not an extended resource name"),
    ("kubernetes.io/scheduling=1000", "Kubernetes keeps"),
    ("node.kubernetes.io/scheduling=1000", "Kubernetes keeps"),
    ("requests.example.com/scheduling=1000", "Kubernetes keeps"),
    ("telemetry/scheduling=0", "at least 1"),
    ("telemetry/scheduling=0k", "at least 1"),
    ("telemetry/scheduling=1.5", "whole number"),
    ("telemetry/scheduling=500m", "whole number"),
    ("telemetry/scheduling=-1", "whole number"),
    ("telemetry/scheduling=", "whole number"),
], ids=["no quantity", "no domain", "upper case domain", "name not starting alphanumeric", "name too long",
        "kubernetes.io", "a kubernetes.io subdomain", "a requests. prefix", "zero", "zero with a suffix",
        "a fraction", "milli units", "negative", "empty quantity"])
def test_what_the_api_server_would_refuse_is_refused_naming_the_problem(text, says):
    with pytest.raises(ValueError, match=says):
        ExtendedResource.parse(text)


def test_the_flag_defaults_to_the_resource_the_scheduler_is_configured_with_and_can_be_switched_off(capsys):
    assert parser().parse_args(["serve"]).advertise_resource == DEFAULT == ExtendedResource(RESOURCE, "1000")
    assert parser().parse_args(["serve", "--no-advertise-resource"]).advertise_resource is None
    assert parser().parse_args(["serve", "--advertise-resource", "example.com/x=5"]).advertise_resource == \
        ExtendedResource("example.com/x", "5")
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "--advertise-resource", "scheduling=5"])
    assert "--advertise-resource" in capsys.readouterr().err


@pytest.mark.parametrize(("quantity", "zero"), [
    ("0", True), ("0k", True), ("0.0", True), ("0e3", True), ("0Mi", True),
    ("1", False), ("1k", False), ("1000", False), ("10", False), ("0.5", False), ("7", False),
])
def test_zero_in_any_spelling_is_zero(quantity, zero):
    assert is_zero(quantity) is zero


def _seen(quantities: dict[str, str] | None, version: str = "1") -> NodeCapacity:
    return NodeCapacity(version, quantities)


@pytest.mark.parametrize(("capacity", "needs"), [
    ({"cpu": "4", "pods": "110"}, True),
    ({"cpu": "4", RESOURCE: "0"}, True),
    ({"cpu": "4", RESOURCE: "1k"}, False),
    ({"cpu": "4", RESOURCE: "7"}, False),
    ({"cpu": "4", "example.com/other": "5"}, True),
    (None, False),
    ({}, True),
], ids=["a node without it needs it", "zero (a kubelet's reset of a re-created node) counts as lacking",
        "the configured quantity stands", "someone else's quantity stands",
        "another extended resource does not count", "a node reporting no capacity yet is left to its kubelet",
        "an empty capacity gets it"])
def test_which_nodes_need_the_resource(capacity, needs):
    assert lacking({"node-x": _seen(capacity)}, RESOURCE) == (["node-x"] if needs else [])


def test_the_nodes_that_need_it_come_sorted():
    seen = {name: _seen({"cpu": "4"}) for name in ("node-3", "node-1", "node-2")}
    seen["node-0"] = _seen({RESOURCE: "1k"})
    assert lacking(seen, RESOURCE) == ["node-1", "node-2", "node-3"]


def test_the_patch_adds_the_escaped_capacity_key_to_the_node_as_seen_and_nothing_else():
    assert capacity_patch(DEFAULT, "4711") == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "4711"},
        {"op": "add", "path": "/status/capacity/telemetry~1scheduling", "value": "1000"},
    ]
    # JSON pointer: "~" is written "~0", "/" "~1" (RFC 6901)
    assert capacity_patch(ExtendedResource("a.example/x~y", "2"), "1")[1]["path"] == "/status/capacity/a.example~1x~0y"


class _Nodes:
    """What the watch saw (NodeCache.capacities), changed by the test as the watch would."""

    def __init__(self, **capacities: dict[str, str] | None):
        self.seen = {name: _seen(quantities) for name, quantities in capacities.items()}

    def __call__(self) -> dict[str, NodeCapacity]:
        return dict(self.seen)


class _Patches:
    def __init__(self, failing: dict[str, Exception] | None = None):
        self.sent: list[tuple[str, list[dict]]] = []
        self.failing = failing or {}

    def __call__(self, node: str, body: list[dict]) -> None:
        if node in self.failing:
            raise self.failing[node]
        self.sent.append((node, body))


def _refused(status: int, reason: str, message: str) -> client.ApiException:
    error = client.ApiException(status=status, reason=reason)
    error.body = json.dumps({"kind": "Status", "message": message})
    return error


def _counts(telemetry: Telemetry) -> dict[str, float]:
    return {result: telemetry.registry.get_sample_value("tas_extender_node_capacity_patches_total",
                                                         {"result": result}) for result in ("added", "failed")}


def test_a_round_gives_the_resource_to_each_node_lacking_it_and_logs_each(caplog):
    nodes, patches, telemetry = _Nodes(old={RESOURCE: "1k"}, new={"cpu": "4"}, reset={RESOURCE: "0"}), _Patches(), \
        Telemetry()
    advertiser = Advertiser(DEFAULT, nodes, patches, telemetry.capacity_patches)
    with caplog.at_level(logging.INFO, logger="tas_extender.cluster.advertise"):
        assert advertiser.sync() == 2
    assert [node for node, _ in patches.sent] == ["new", "reset"]
    assert patches.sent[0][1] == capacity_patch(DEFAULT, "1")
    assert _counts(telemetry) == {"added": 2, "failed": 0}
    assert [r.getMessage() for r in caplog.records] == [
        "new: advertised telemetry/scheduling=1000 in status.capacity",
        "reset: advertised telemetry/scheduling=1000 in status.capacity"]


def test_a_node_patched_is_not_patched_again_before_the_watch_brings_it_anew():
    nodes, patches = _Nodes(new={"cpu": "4"}), _Patches()
    advertiser = Advertiser(DEFAULT, nodes, patches, Telemetry().capacity_patches)
    advertiser.sync()
    assert advertiser.sync() == 0  # the watch still shows the node as it was before the patch
    nodes.seen["new"] = _seen({"cpu": "4", RESOURCE: "1k"}, version="2")
    assert advertiser.sync() == 0
    nodes.seen["new"] = _seen({"cpu": "4"}, version="3")  # someone took it off again
    assert advertiser.sync() == 1
    assert [(node, body[0]["value"]) for node, body in patches.sent] == [("new", "1"), ("new", "3")]


def test_a_failed_patch_is_warned_once_with_its_reason_counted_and_tried_again_next_round(caplog):
    refusal = _refused(403, "Forbidden", 'nodes "bad" is forbidden: User cannot patch resource nodes/status')
    nodes, patches, telemetry = _Nodes(bad={"cpu": "4"}, good={"cpu": "4"}), _Patches({"bad": refusal}), Telemetry()
    advertiser = Advertiser(DEFAULT, nodes, patches, telemetry.capacity_patches)
    with caplog.at_level(logging.DEBUG, logger="tas_extender.cluster.advertise"):
        assert advertiser.sync() == 1  # the other node is still given it
        assert advertiser.sync() == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ['bad: advertising telemetry/scheduling=1000 failed (403 Forbidden: nodes "bad" is forbidden: '
                        'User cannot patch resource nodes/status); trying again each sync round']
    assert _counts(telemetry) == {"added": 1, "failed": 2}  # tried in both rounds

    patches.failing.clear()
    assert advertiser.sync() == 1
    assert [node for node, _ in patches.sent] == ["good", "bad"]


def test_a_different_reason_is_warned_again():
    nodes = _Nodes(bad={"cpu": "4"})
    patches = _Patches({"bad": _refused(422, "Unprocessable Entity", "testing value failed")})
    advertiser = Advertiser(DEFAULT, nodes, patches, Telemetry().capacity_patches)
    advertiser.sync()
    patches.failing["bad"] = ConnectionError("the API server went away")
    advertiser.sync()
    assert advertiser._failing == {"bad": "the API server went away"}


def test_a_round_patches_at_most_its_share_and_the_rest_follow():
    nodes, patches = _Nodes(**{f"node-{i:02}": {"cpu": "4"} for i in range(5)}), _Patches()
    advertiser = Advertiser(DEFAULT, nodes, patches, Telemetry().capacity_patches, per_round=2)
    assert [advertiser.sync() for _ in range(4)] == [2, 2, 1, 0]
    assert [node for node, _ in patches.sent] == [f"node-{i:02}" for i in range(5)]


# --- in the controller: only the leader's rounds send it --------------------------------------

class _Core:
    def __init__(self):
        self.status_patches: list[tuple[str, list[dict]]] = []

    def patch_node_status(self, name, body):
        self.status_patches.append((name, body))


class _Source:
    name = "none"

    def fetch(self, metrics):
        return {}


def _node(name: str, capacity: dict[str, str] | None, version: str = "7") -> client.V1Node:
    return client.V1Node(metadata=client.V1ObjectMeta(name=name, resource_version=version),
                         status=client.V1NodeStatus(capacity=capacity))


def _loop(leading: bool, advertise: ExtendedResource | None = DEFAULT) -> tuple[SyncLoop, _Core]:
    store = PolicyStore()
    store.replace_all([], {})
    cache = MetricCache(_Source(), 60.0)
    engine = Engine(store, cache)
    core = _Core()
    controller = Controller(client.ApiClient(), engine, Telemetry(), is_leader=lambda: leading, core=core,
                            custom=object(), nodes=NodeCache(), advertise=advertise)
    controller.on_node_list([_node("listed", {"cpu": "4"}), _node("has-it", {"cpu": "4", RESOURCE: "5"})])
    return SyncLoop(store, cache, engine, 1.0, controller), core


def test_the_leaders_round_gives_a_node_seen_later_the_resource_and_leaves_a_value_it_has():
    loop, core = _loop(leading=True)
    loop.run_once()
    assert core.status_patches == [("listed", capacity_patch(DEFAULT, "7"))]
    loop.controller.on_node_event("ADDED", _node("joined", {"cpu": "8"}, version="9"))
    loop.run_once()
    assert [node for node, _ in core.status_patches] == ["listed", "joined"]


def test_a_replica_that_does_not_lead_patches_no_node():
    loop, core = _loop(leading=False)
    loop.controller.on_node_event("ADDED", _node("joined", {"cpu": "8"}))
    loop.run_once()
    assert core.status_patches == []


def test_with_advertising_off_the_leader_leaves_capacity_alone():
    loop, core = _loop(leading=True, advertise=None)
    loop.run_once()
    assert core.status_patches == []
