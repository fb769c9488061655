"""The decision document of `tas-extender evaluate`: every strategy of every policy, and load, at once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tas_extender import decision
from tas_extender.load.decide import LoadState, crane_scores, node_score
from tas_extender.metrics import Snapshot
from tas_extender.policy import Policy
from tas_extender.strategies import deschedule, dontschedule, labeling, scheduleonmetric


def _verdicts(nodes: Sequence[str], failed: dict[str, str]) -> dict[str, dict]:
    return {node: {"passed": node not in failed, "reason": failed.get(node, "")} for node in nodes}


def evaluate(policies: Iterable[Policy], snapshot: Snapshot, nodes: Sequence[str],
             fail_closed: bool = False, load: LoadState | None = None, load_weight: float = 1.0) -> dict:
    """With `load`, each policy also gets `request` (what the scheduler's filter and prioritize
    calls answer for a pod with that policy) and the document gets `load` (for a pod without one).
    A policy in audit mode gets `"enforcement": "audit"`: its decisions are what it would do."""
    out: dict[str, dict] = {}
    for policy in policies:
        failed = dontschedule.failed_nodes(policy, snapshot, nodes, fail_closed)
        violating = deschedule.violating_nodes(policy, snapshot, nodes)
        labels = labeling.node_labels(policy, snapshot, nodes)
        for node in violating:
            labels.setdefault(node, {})[deschedule.label_key(policy)] = deschedule.VIOLATING
        out[policy.key] = {
            "filter": _verdicts(nodes, failed),
            "scores": scheduleonmetric.scores(policy, snapshot, nodes),
            "violating": violating,
            "labels": {node: labels[node] for node in sorted(labels)},
        }
        if policy.audit:
            out[policy.key]["enforcement"] = policy.enforcement
        if load is not None:
            enforced = decision.enforced(policy)
            answered = decision.filter_nodes(None, nodes, dict(failed) if enforced else {}, load)
            own = scheduleonmetric.score_list(enforced, snapshot, nodes) if enforced else None
            scores = decision.prioritize(None, nodes, own, load, load_weight)
            out[policy.key]["request"] = {"filter": _verdicts(nodes, answered),
                                          "scores": dict(zip(nodes, scores, strict=True))}
    document: dict[str, dict] = {"policies": out}
    if load is not None:
        document["load"] = {
            "filter": _verdicts(nodes, decision.filter_nodes(None, nodes, {}, load)),
            "scores": dict(zip(nodes, decision.prioritize(None, nodes, None, load, load_weight), strict=True)),
            "crane_scores": dict(zip(nodes, crane_scores(load, nodes), strict=True)),
            "usage_scores": {node: node_score(load.policy, load.values(node)) for node in nodes},
            "hot_values": {node: load.hot_value(node) for node in nodes},
            "usage": {node: load.values(node) for node in nodes},
        }
    return document
