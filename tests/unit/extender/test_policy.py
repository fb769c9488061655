"""Loading and validating TASPolicy objects; the CRD generated from the same model."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tas_extender.cluster.crd import crd
from tas_extender.decide.policy import PolicyError, parse_policy

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "policies"


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_documented_policy_loads_unchanged(path):
    doc = yaml.safe_load(path.read_text())
    policy = parse_policy(doc)
    assert policy.name == doc["metadata"]["name"]
    assert policy.namespace == doc["metadata"]["namespace"]
    for strategy, body in doc["spec"]["strategies"].items():
        rules = policy.strategy(strategy).rules
        assert [(r.metricname, r.operator) for r in rules] == [
            (r["metricname"], r["operator"]) for r in body["rules"]
        ]


def _policy(strategies: dict) -> dict:
    return {"apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
            "metadata": {"name": "p", "namespace": "ns"}, "spec": {"strategies": strategies}}


RULE = {"metricname": "health_metric", "operator": "Equals", "target": 1}


@pytest.mark.parametrize(
    ("strategies", "field", "reason"),
    [
        ({"dontschedule": {}}, "spec.strategies.dontschedule.rules", "Field required"),
        ({"dontschedule": {"rules": [{**RULE, "operator": "Above"}]}},
         "spec.strategies.dontschedule.rules[0].operator", "LessThan"),
        ({"dontschedule": {"rules": [{**RULE, "metricname": "bad name"}]}},
         "spec.strategies.dontschedule.rules[0].metricname", "pattern"),
        ({"dontschedule": {"rules": [{**RULE, "target": "high"}]}},
         "spec.strategies.dontschedule.rules[0].target", "integer"),
        ({"dontschedule": {"rules": [RULE], "logicalOperator": "oneOf"}},
         "spec.strategies.dontschedule.logicalOperator", "anyOf"),
        ({"dontschedule": {"rules": [{**RULE, "metricname": "cpu.load"}]}},
         "spec.strategies.dontschedule.rules[0].metricname", "pattern"),
        ({"dontschedule": {"rules": [{**RULE, "metricname": "nodes/cpu"}]}},
         "spec.strategies.dontschedule.rules[0].metricname", "pattern"),
        ({"dontschedule": {"rules": [{**RULE, "unit": "%"}]}},
         "spec.strategies.dontschedule.rules[0].unit", "Extra inputs"),
    ],
)
def test_invalid_policy_is_rejected_naming_field_and_reason(strategies, field, reason):
    with pytest.raises(PolicyError) as caught:
        parse_policy(_policy(strategies))
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_logical_operator_defaults_to_any_of_and_target_to_zero():
    policy = parse_policy(_policy({"scheduleonmetric": {"rules": [
        {"metricname": "health_metric", "operator": "LessThan"}]}}))
    strategy = policy.strategy("scheduleonmetric")
    assert strategy.logicalOperator == "anyOf"
    assert strategy.rules[0].target == 0


def test_policy_without_name_is_rejected():
    with pytest.raises(PolicyError, match="metadata.name"):
        parse_policy({"kind": "TASPolicy", "metadata": {}, "spec": {"strategies": {}}})


def test_crd_is_generated_from_the_model_with_status_and_printer_columns():
    manifest = crd()
    version = manifest["spec"]["versions"][0]
    assert manifest["metadata"]["name"] == "taspolicies.telemetry.intel.com"
    assert manifest["spec"]["scope"] == "Namespaced"
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Valid", "Violating", "Age"}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    # strategies is a map of strategy name to strategy, as in TAS's CRD (deploy/tas-policy-crd.yaml)
    strategy = spec["properties"]["strategies"]["additionalProperties"]
    assert "properties" not in spec["properties"]["strategies"]
    rule = strategy["properties"]["rules"]["items"]
    assert strategy["required"] == ["rules"]
    assert rule["required"] == ["metricname", "operator"]
    assert rule["properties"]["operator"]["enum"] == ["LessThan", "GreaterThan", "Equals"]
    assert rule["properties"]["metricname"]["pattern"] == "^[a-zA-Z0-9_:-]*$"
    assert rule["properties"]["labels"]["items"] == {"type": "string"}
    text = yaml.safe_dump(manifest)
    assert "$ref" not in text and "anyOf:" not in text and "additionalProperties: false" not in text
