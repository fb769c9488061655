"""dontschedule: nodes breaking the rules are filtered out, with a reason naming the rule."""

from __future__ import annotations

from collections.abc import Iterable

from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Policy
from tas_extender.decide.rules import format_value, violates


def failed_nodes(policy: Policy, snapshot: Snapshot, nodes: Iterable[str],
                 fail_closed: bool = False) -> dict[str, str]:
    """Node -> reason for every node the policy's dontschedule strategy rejects."""
    strategy = policy.strategy("dontschedule")
    if strategy is None:
        return {}
    failed: dict[str, str] = {}
    for node in nodes:
        bad, broken, missing = violates(strategy, snapshot, node, fail_closed)
        if not bad:
            continue
        parts = [f"{rule.describe()} violated (value {format_value(value)})" for rule, value in broken]
        parts += [f"{rule.metricname} missing or stale (missing metrics fail closed)" for rule in missing]
        joiner = " and " if strategy.logicalOperator == "allOf" else "; "
        failed[node] = f"{policy.name}: dontschedule rule {joiner.join(parts)}"
    return failed
