"""Evaluating rules and strategies against metric values; pure functions, no I/O."""

from __future__ import annotations

from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Rule, Strategy


def breaks(rule: Rule, value: float) -> bool:
    """True when the value breaks the rule (TAS: the rule 'fires')."""
    if rule.operator == "LessThan":
        return value < rule.target
    if rule.operator == "GreaterThan":
        return value > rule.target
    return value == rule.target


def broken_rules(strategy: Strategy, snapshot: Snapshot, node: str) -> tuple[list[tuple[Rule, float]], list[Rule]]:
    """The rules the node breaks (with the value) and the rules whose metric it lacks."""
    broken: list[tuple[Rule, float]] = []
    missing: list[Rule] = []
    for rule in strategy.rules:
        if not rule.metricname:  # never has a value: neither broken nor missing, even failing closed
            continue
        value = snapshot.get(rule.metricname, node)
        if value is None:
            missing.append(rule)
        elif breaks(rule, value):
            broken.append((rule, value))
    return broken, missing


def violates(strategy: Strategy, snapshot: Snapshot, node: str,
             fail_closed: bool = False) -> tuple[bool, list[tuple[Rule, float]], list[Rule]]:
    """Whether the node violates the strategy: any rule (anyOf) or every rule (allOf).

    A missing metric counts as not broken (fail open, as TAS) unless fail_closed. As in TAS, a
    strategy without rules is never violated, and allOf with a rule the node lacks is not.
    """
    broken, missing = broken_rules(strategy, snapshot, node)
    if fail_closed and missing:
        return True, broken, missing
    if strategy.logicalOperator == "allOf":
        return bool(broken) and len(broken) == len(strategy.rules), broken, []
    return bool(broken), broken, []


def format_value(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"
