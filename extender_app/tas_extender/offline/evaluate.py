"""The decision document of `tas-extender evaluate`: every strategy of every policy, and load, at once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tas_extender.decide.decision import Decider
from tas_extender.decide.engine import POLICY_LABEL, Engine
from tas_extender.decide.load.decide import LoadState, crane_scores, node_score
from tas_extender.decide.metrics import Snapshot
from tas_extender.decide.policy import Policy
from tas_extender.decide.strategies import deschedule, dontschedule, labeling, scheduleonmetric


def _verdicts(nodes: Sequence[str], failed: dict[str, str]) -> dict[str, dict]:
    return {node: {"passed": node not in failed, "reason": failed.get(node, "")} for node in nodes}


def evaluate(policies: Iterable[Policy], snapshot: Snapshot, nodes: Sequence[str],
             fail_closed: bool = False, load: LoadState | None = None, load_weight: float = 1.0) -> dict:
    """With `load`, each policy also gets `request` (what the scheduler's filter and prioritize
    calls answer for a pod with that policy) and the document gets `load` (for a pod without one).
    A policy in audit mode gets `"enforcement": "audit"`: its decisions are what it would do."""
    policies = list(policies)
    # What the server would answer, asked of the same Decider it answers with.
    decider = Decider(Engine.offline(policies, snapshot, nodes, fail_closed), load=lambda: load,
                      load_weight=load_weight) if load is not None else None
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
        if decider is not None:
            pod = {"namespace": policy.namespace, "labels": {POLICY_LABEL: policy.name}}
            out[policy.key]["request"] = {"filter": _verdicts(nodes, decider.failed(pod, nodes)),
                                          "scores": dict(zip(nodes, decider.scores(pod, nodes), strict=True))}
    document: dict[str, dict] = {"policies": out}
    if load is not None and decider is not None:
        document["load"] = {
            "filter": _verdicts(nodes, decider.failed({}, nodes)),
            "scores": dict(zip(nodes, decider.scores({}, nodes), strict=True)),
            "crane_scores": dict(zip(nodes, crane_scores(load, nodes), strict=True)),
            "usage_scores": {node: node_score(load.policy, load.values(node)) for node in nodes},
            "hot_values": {node: load.hot_value(node) for node in nodes},
            "usage": {node: load.values(node) for node in nodes},
        }
    return document
