"""Prometheus series matched to nodes as a user's monitoring labels them: a `node` label, or the
scrape target's `instance` as the node's name or address, with or without a port (crane's
recording rules keep only `instance`)."""

from __future__ import annotations

import logging

import httpx
import pytest

from tas_extender.decide.metrics import Sample
from tas_extender.sources.nodes import NodeMatcher, instance_host
from tas_extender.sources.prometheus import PrometheusSource

NOW = 1_700_000_000.0
NODES = {
    "node-1": ["10.0.0.1", "node-1.example.internal"],
    "node-2": ["10.0.0.2", "fd00::2"],
    "node-3": ["10.0.0.3", "192.0.2.10"],  # an ExternalIP node-4 reports too
    "node-4": ["10.0.0.4", "192.0.2.10"],
}


@pytest.mark.parametrize(
    ("instance", "host"),
    [("node-1", "node-1"), ("node-1:9100", "node-1"), ("10.0.0.1", "10.0.0.1"), ("10.0.0.1:9100", "10.0.0.1"),
     ("[fd00::2]:9100", "fd00::2"), ("fd00::2", "fd00::2"), ("[fd00::2]", "fd00::2"),
     ("node-1:http", "node-1:http"), ("[fd00::2", "[fd00::2")],
)
def test_the_host_of_an_instance_label(instance, host):
    assert instance_host(instance) == host


@pytest.mark.parametrize(
    ("labels", "node"),
    [({"node": "node-1", "instance": "10.0.0.2:9100"}, "node-1"),
     ({"instance": "node-1"}, "node-1"),
     ({"instance": "node-1:9100"}, "node-1"),
     ({"instance": "10.0.0.1"}, "node-1"),
     ({"instance": "10.0.0.1:9100"}, "node-1"),
     ({"instance": "node-1.example.internal:9100"}, "node-1"),
     ({"instance": "[fd00::2]:9100"}, "node-2"),
     ({"instance": "[fd00:0:0::2]:9100"}, "node-2"),
     ({"instance": "fd00::2"}, "node-2"),
     ({"node": "", "instance": "10.0.0.2:9100"}, "node-2")],
    ids=["node label wins", "name", "name:port", "IP", "IP:port", "hostname:port", "[IPv6]:port",
         "[IPv6 spelled long]:port", "bare IPv6", "empty node label"],
)
def test_a_series_is_matched_to_its_node(labels, node):
    assert NodeMatcher(NODES).match(labels).node == node


@pytest.mark.parametrize(
    ("labels", "reason"),
    [({}, "neither a node nor an instance label"),
     ({"job": "node-exporter"}, "neither a node nor an instance label"),
     ({"instance": "10.9.9.9:9100"}, "'10.9.9.9:9100' is neither the name nor an address of any of the 4 nodes"),
     ({"instance": "192.0.2.10:9100"}, "tried '192.0.2.10' as a name and as an address")],
    ids=["no labels", "neither label", "address of no node", "address of two nodes"],
)
def test_a_series_of_no_node_says_what_was_tried(labels, reason):
    match = NodeMatcher(NODES).match(labels)
    assert match.node is None
    assert reason in match.tried


def test_without_a_node_list_the_instance_host_is_the_node_name():
    assert NodeMatcher(None).match({"instance": "node-7:9100"}).node == "node-7"


def _source(series: list, nodes=NODES) -> PrometheusSource:
    body = {"status": "success", "data": {"resultType": "vector", "result": series}}
    return PrometheusSource("http://prometheus:9090", metric_prefix="",
                            transport=httpx.MockTransport(lambda request: httpx.Response(200, json=body)),
                            node_addresses=lambda: nodes)


def _one(labels: dict, value: str, stamp: float = NOW) -> dict:
    return {"metric": labels, "value": [stamp, value]}


def test_crane_recording_rules_by_instance_reach_every_node():
    # crane's rules aggregate `by (instance)` and node-exporter is scraped as IP:9100.
    source = _source([_one({"instance": f"10.0.0.{i}:9100"}, f"{10 * i}") for i in (1, 2, 3, 4)])
    assert source.fetch({"cpu_usage_avg_5m"}) == {"cpu_usage_avg_5m": {
        "node-1": Sample(10.0, NOW), "node-2": Sample(20.0, NOW), "node-3": Sample(30.0, NOW),
        "node-4": Sample(40.0, NOW)}}


def test_two_series_for_one_node_with_different_values_give_it_none_and_are_reported_once(caplog):
    source = _source([_one({"instance": "10.0.0.1:9100"}, "10"), _one({"instance": "node-1:9100"}, "90"),
                      _one({"instance": "10.0.0.2:9100"}, "20")])
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert source.fetch({"cpu_usage_avg_5m"}) == {"cpu_usage_avg_5m": {"node-2": Sample(20.0, NOW)}}
    reports = [r.getMessage() for r in caplog.records]
    assert len(reports) == 1, reports
    assert "cpu_usage_avg_5m for node 'node-1': two series" in reports[0]
    assert "'10.0.0.1:9100'" in reports[0] and "'node-1:9100'" in reports[0]
    assert "conflicting values 10.0 and 90.0" in reports[0]


def test_two_series_for_one_node_that_agree_give_the_newer_and_are_reported_once(caplog):
    source = _source([_one({"instance": "10.0.0.1:9100"}, "10", NOW - 30), _one({"instance": "node-1"}, "10")])
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert source.fetch({"m"}) == {"m": {"node-1": Sample(10.0, NOW)}}
    assert [r.getMessage() for r in caplog.records] == [
        "m for node 'node-1' comes from two series, {'instance': '10.0.0.1:9100'} and {'instance': 'node-1'} "
        "(found by instance label as the node's name); they agree (10.0), the newer is used"]


def test_a_series_of_no_node_is_reported_once_per_metric_with_its_labels(caplog):
    source = _source([_one({"instance": "10.9.9.9:9100", "job": "node"}, "5"), _one({"instance": "10.0.0.3"}, "3")])
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert source.fetch({"a", "b"}) == {"a": {"node-3": Sample(3.0, NOW)}, "b": {"node-3": Sample(3.0, NOW)}}
    reports = sorted(r.getMessage() for r in caplog.records)
    assert reports == [
        f"ignoring series {metric}{{'instance': '10.9.9.9:9100', 'job': 'node'}}: its instance '10.9.9.9:9100' is "
        "neither the name nor an address of any of the 4 nodes (tried '10.9.9.9' as a name and as an address)"
        for metric in ("a", "b")]


def test_series_with_a_node_label_are_read_as_before():
    source = _source([_one({"node": "node-1"}, "1"), _one({"node": "node-9"}, "2")])
    assert source.fetch({"m"}) == {"m": {"node-1": Sample(1.0, NOW), "node-9": Sample(2.0, NOW)}}


def test_the_controller_gives_each_nodes_addresses_once_the_nodes_are_listed():
    from kubernetes import client

    from tas_extender.decide.cache import MetricCache
    from tas_extender.cluster.controller import Controller
    from tas_extender.decide.engine import Engine
    from tas_extender.decide.store import PolicyStore
    from tas_extender.decide.telemetry import Telemetry

    def node(name: str, *addresses: str) -> client.V1Node:
        return client.V1Node(metadata=client.V1ObjectMeta(name=name), status=client.V1NodeStatus(
            addresses=[client.V1NodeAddress(address=a, type="InternalIP") for a in addresses]))

    engine = Engine(PolicyStore(), MetricCache(_source([]), 60.0))
    controller = Controller(client.ApiClient(), engine, Telemetry())
    assert controller.node_addresses() is None  # not listed yet: matched by name meanwhile
    controller.on_node_list([node("node-1", "10.0.0.1"), client.V1Node(metadata=client.V1ObjectMeta(name="bare"))])
    controller.on_node_event("ADDED", node("node-2", "10.0.0.2", "fd00::2"))
    controller.on_node_event("DELETED", node("node-1"))
    assert controller.node_addresses() == {"bare": (), "node-2": ("10.0.0.2", "fd00::2")}
