"""The controller's pure parts: which label patch a node needs, and the Violating condition."""

from __future__ import annotations

import pytest

from tas_extender.cluster.reconcile import MANAGED_ANNOTATION, label_patch, violating_condition
from tas_extender.decide.policy import parse_policy

KEY = "telemetry.aware.scheduling.p/health"


@pytest.mark.parametrize(
    ("have", "managed", "want", "patch"),
    [
        ({"p": "violating"}, "p", {"p": "violating"}, None),
        ({}, "", {"p": "violating"}, {"labels": {"p": "violating"}, "managed": "p"}),
        ({"p": "violating", KEY: "bad"}, f"p,{KEY}", {KEY: "bad"}, {"labels": {"p": None}, "managed": KEY}),
        ({KEY: "bad"}, KEY, {KEY: "worse"}, {"labels": {KEY: "worse"}, "managed": KEY}),
        ({"p": "violating"}, "p", {}, {"labels": {"p": None}, "managed": None}),
        ({"p": "mine", "zone": "a"}, "", {}, None),
        ({}, "p", {}, {"labels": {}, "managed": None}),
    ],
    ids=[
        "labels already right: no patch",
        "newly violating node gets the label",
        "recovered rule's label is removed, the other kept",
        "changed value is patched",
        "deleted policy's label is removed",
        "labels the controller never set are left alone",
        "a stale record of managed labels is cleared",
    ],
)
def test_node_is_patched_only_when_its_labels_must_change(have, managed, want, patch):
    result = label_patch(have, {MANAGED_ANNOTATION: managed} if managed else {}, want)
    if patch is None:
        assert result is None
    else:
        assert result == {"metadata": {"labels": patch["labels"],
                                       "annotations": {MANAGED_ANNOTATION: patch["managed"]}}}


def _policy(strategies: dict):
    return parse_policy({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"strategies": strategies}})


RULE = {"metricname": "health_metric", "operator": "Equals", "target": 2}


@pytest.mark.parametrize(
    ("strategies", "nodes", "status", "reason"),
    [
        ({"deschedule": {"rules": [RULE]}}, ["node-2"], "True", "NodesViolating"),
        ({"deschedule": {"rules": [RULE]}}, [], "False", "NoNodesViolating"),
        ({"dontschedule": {"rules": [RULE]}}, [], "False", "NoDescheduleStrategy"),
    ],
)
def test_violating_condition_says_whether_nodes_break_the_deschedule_rules(strategies, nodes, status, reason):
    condition = violating_condition(_policy(strategies), nodes)
    assert (condition["type"], condition["status"], condition["reason"]) == ("Violating", status, reason)
    assert all(node in condition["message"] for node in nodes)
