"""deschedule: the nodes that violate the policy's deschedule rules get <policy>=violating."""

from __future__ import annotations

from collections.abc import Iterable

from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Policy
from tas_extender.decide.rules import violates

VIOLATING = "violating"


def violating_nodes(policy: Policy, snapshot: Snapshot, nodes: Iterable[str]) -> list[str]:
    """Sorted names of the nodes violating the deschedule strategy (missing metrics never do)."""
    strategy = policy.strategy("deschedule")
    if strategy is None:
        return []
    return sorted(node for node in nodes if violates(strategy, snapshot, node)[0])


def label_key(policy: Policy) -> str:
    # TAS's key: the bare policy name, which the pods' node affinity names.
    return policy.name
