"""labeling: violated rules put telemetry.aware.scheduling.<policy>/<key>=<value> on the node.

When several violated rules claim the same key, TAS's choice stands: among GreaterThan rules
the one with the largest metric value wins, among LessThan rules the smallest; otherwise the
first rule in the policy wins (where TAS, for rules of different operators, sets none).
A label Kubernetes would refuse is never set (the policy reports it), so it cannot fail the
patch of the node's other labels.
"""

from __future__ import annotations

from collections.abc import Iterable

from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import LABEL_PREFIX, Policy, label_prefix_problem, label_problem
from tas_extender.decide.rules import breaks


def label_prefix(policy: Policy) -> str:
    return f"{LABEL_PREFIX}{policy.name}/"


def _better(operator: str, value: float, than: float) -> bool:
    if operator == "GreaterThan":
        return value > than
    if operator == "LessThan":
        return value < than
    return False


def node_labels(policy: Policy, snapshot: Snapshot, nodes: Iterable[str]) -> dict[str, dict[str, str]]:
    """Node -> {label key: value} for nodes with at least one violated labeling rule."""
    strategy = policy.strategy("labeling")
    if strategy is None or label_prefix_problem(policy.name) is not None:
        return {}
    prefix = label_prefix(policy)
    rules = strategy.rules
    usable = [[item.split("=", 1) for item in rule.labels if label_problem(item) is None] for rule in rules]
    result: dict[str, dict[str, str]] = {}
    for node in nodes:
        chosen: dict[str, tuple[str, str, float]] = {}  # key -> (value, operator, metric value)
        values = [snapshot.get(rule.metricname, node) if rule.metricname else None for rule in rules]
        broken = [(i, v) for i, (rule, v) in enumerate(zip(rules, values, strict=True))
                  if v is not None and breaks(rule, v)]
        if not broken or (strategy.logicalOperator == "allOf" and len(broken) != len(rules)):
            continue
        for i, value in broken:
            rule = rules[i]
            for key, label_value in usable[i]:
                current = chosen.get(key)
                if current is None or (current[1] == rule.operator and _better(rule.operator, value, current[2])):
                    chosen[key] = (label_value, rule.operator, value)
        if chosen:
            result[node] = {prefix + key: v[0] for key, v in chosen.items()}
    return result
