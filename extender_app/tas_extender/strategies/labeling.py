"""labeling: violated rules put telemetry.aware.scheduling.<policy>/<key>=<value> on the node.

When several violated rules claim the same key, TAS's choice stands: among GreaterThan rules
the one with the largest metric value wins, among LessThan rules the smallest; otherwise the
first rule in the policy wins.
"""

from __future__ import annotations

from collections.abc import Iterable

from tas_extender.metrics import Snapshot
from tas_extender.policy import Policy
from tas_extender.rules import breaks

PREFIX = "telemetry.aware.scheduling"


def label_prefix(policy: Policy) -> str:
    return f"{PREFIX}.{policy.name}/"


def _better(operator: str, value: float, than: float) -> bool:
    if operator == "GreaterThan":
        return value > than
    if operator == "LessThan":
        return value < than
    return False


def node_labels(policy: Policy, snapshot: Snapshot, nodes: Iterable[str]) -> dict[str, dict[str, str]]:
    """Node -> {label key: value} for nodes with at least one violated labeling rule."""
    strategy = policy.strategy("labeling")
    if strategy is None:
        return {}
    prefix = label_prefix(policy)
    result: dict[str, dict[str, str]] = {}
    for node in nodes:
        chosen: dict[str, tuple[str, str, float]] = {}  # key -> (value, operator, metric value)
        values = [(rule, snapshot.get(rule.metricname, node)) for rule in strategy.rules]
        broken = [(rule, v) for rule, v in values if v is not None and breaks(rule, v)]
        if strategy.logicalOperator == "allOf" and len(broken) != len(strategy.rules):
            continue
        for rule, value in broken:
            for item in rule.labels:
                key, _, label_value = item.partition("=")
                current = chosen.get(key)
                if current is None or (current[1] == rule.operator and _better(rule.operator, value, current[2])):
                    chosen[key] = (label_value, rule.operator, value)
        if chosen:
            result[node] = {prefix + key: v[0] for key, v in chosen.items()}
    return result
