"""scheduleonmetric: scores 0..10, proportional to the metric between the best and worst node.

TAS ranked nodes (10, 9, 8, ... and negative past 11 nodes) and used only the first rule.
Here every rule counts: each gives 0..10 by where the node's value lies between the best and
the worst candidate (LessThan: lower is better; GreaterThan: higher is better; Equals: 10 when
equal to the target, else 0), and a node's score is the mean over the rules, rounded half up. Equal
values score equally; when every candidate has the same value they all score 10; a node
without the metric scores 0 for that rule. A rule with an empty metric name never has a value
and is left out (the policy reports it); with no rule left, every node scores 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Policy, Rule

MAX_SCORE = 10


def _value_scores(rule: Rule, values: set[float]) -> dict[float | None, float]:
    """Score of each distinct value among the candidates; None (no metric) scores 0."""
    table: dict[float | None, float] = {None: 0}
    if not values:
        return table
    if rule.operator == "Equals":
        table.update({v: MAX_SCORE if v == rule.target else 0 for v in values})
        return table
    low, high = min(values), max(values)
    span = high - low
    if span == 0:
        table.update(dict.fromkeys(values, MAX_SCORE))
    elif rule.operator == "LessThan":
        table.update({v: MAX_SCORE * (high - v) / span for v in values})
    else:
        table.update({v: MAX_SCORE * (v - low) / span for v in values})
    return table


def score_list(policy: Policy, snapshot: Snapshot, nodes: Sequence[str]) -> list[int]:
    """Scores 0..10 in the order of `nodes`; all 0 without a scheduleonmetric strategy."""
    strategy = policy.strategy("scheduleonmetric")
    rules = [rule for rule in strategy.rules if rule.metricname] if strategy else []
    if not rules or not nodes:
        return [0] * len(nodes)
    per_rule = []
    for rule in rules:
        # Scores depend on the values alone, and candidates share few distinct values: look
        # each up once per request instead of doing the arithmetic once per node.
        values = list(map(snapshot.values.get(rule.metricname, {}).get, nodes))
        table = _value_scores(rule, cast(set[float], set(values) - {None}))  # a set difference in C
        if len(rules) == 1:
            rounded = {v: int(score + 0.5) for v, score in table.items()}
            return list(map(rounded.__getitem__, values))
        per_rule.append(list(map(table.__getitem__, values)))
    count = len(per_rule)
    return [int(sum(column) / count + 0.5) for column in zip(*per_rule, strict=True)]


def scores(policy: Policy, snapshot: Snapshot, nodes: Sequence[str]) -> dict[str, int]:
    """Node -> score 0..10 for the candidate nodes."""
    return dict(zip(nodes, score_list(policy, snapshot, nodes), strict=True))
