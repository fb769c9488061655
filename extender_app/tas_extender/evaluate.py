"""The decision document of `tas-extender evaluate`: every strategy of every policy at once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tas_extender.metrics import Snapshot
from tas_extender.policy import Policy
from tas_extender.strategies import deschedule, dontschedule, labeling, scheduleonmetric


def evaluate(policies: Iterable[Policy], snapshot: Snapshot, nodes: Sequence[str],
             fail_closed: bool = False) -> dict:
    out: dict[str, dict] = {}
    for policy in policies:
        failed = dontschedule.failed_nodes(policy, snapshot, nodes, fail_closed)
        violating = deschedule.violating_nodes(policy, snapshot, nodes)
        labels = labeling.node_labels(policy, snapshot, nodes)
        for node in violating:
            labels.setdefault(node, {})[deschedule.label_key(policy)] = deschedule.VIOLATING
        out[policy.key] = {
            "filter": {node: {"passed": node not in failed, "reason": failed.get(node, "")}
                       for node in nodes},
            "scores": scheduleonmetric.scores(policy, snapshot, nodes),
            "violating": violating,
            "labels": {node: labels[node] for node in sorted(labels)},
        }
    return {"policies": out}
