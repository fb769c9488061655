"""scheduleonmetric: scores 0..10, proportional to the metric between the best and worst node.

TAS ranked nodes (10, 9, 8, ... and negative past 11 nodes) and used only the first rule.
Here every rule counts: each gives 0..10 by where the node's value lies between the best and
the worst candidate (LessThan: lower is better; GreaterThan: higher is better; Equals: 10 when
equal to the target, else 0), and a node's score is the mean over the rules, rounded half up. Equal
values score equally; when every candidate has the same value they all score 10; a node
without the metric scores 0 for that rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from tas_extender.metrics import Snapshot
from tas_extender.policy import Policy, Rule

MAX_SCORE = 10


def _rule_scores(rule: Rule, snapshot: Snapshot, nodes: Sequence[str]) -> list[float]:
    by_node = snapshot.values.get(rule.metricname, {})
    values = [by_node.get(node) for node in nodes]
    if rule.operator == "Equals":
        return [MAX_SCORE if v is not None and v == rule.target else 0 for v in values]
    present = [v for v in values if v is not None]
    if not present:
        return [0] * len(nodes)
    low, high = min(present), max(present)
    if high == low:
        return [0 if v is None else MAX_SCORE for v in values]
    span = high - low
    if rule.operator == "LessThan":
        return [0 if v is None else MAX_SCORE * (high - v) / span for v in values]
    return [0 if v is None else MAX_SCORE * (v - low) / span for v in values]


def scores(policy: Policy, snapshot: Snapshot, nodes: Sequence[str]) -> dict[str, int]:
    """Node -> score 0..10 for the candidate nodes; all 0 without a scheduleonmetric strategy."""
    strategy = policy.strategy("scheduleonmetric")
    if strategy is None or not nodes:
        return dict.fromkeys(nodes, 0)
    per_rule = [_rule_scores(rule, snapshot, nodes) for rule in strategy.rules]
    if len(per_rule) == 1:  # the common case, without the per-node averaging
        return {node: int(score + 0.5) for node, score in zip(nodes, per_rule[0])}
    count = len(per_rule)
    return {node: int(sum(column) / count + 0.5) for node, column in zip(nodes, zip(*per_rule))}
