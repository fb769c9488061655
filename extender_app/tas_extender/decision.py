"""The decision of one scheduler request: the TASPolicy's part, then the load part, and their mix.

The one place the HTTP layer and `tas-extender evaluate` both call, as crane keeps its plugin
glue (plugins.go) apart from its arithmetic (stats.go, here `load/decide.py` and `strategies/`).
Pure functions: the policy's verdicts and the load inputs are handed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tas_extender.load.decide import LoadState, combine, is_daemonset_pod, load_failed, load_scores
from tas_extender.policy import Policy


def enforced(policy: Policy | None) -> Policy | None:
    """The policy the scheduler's answers follow: none for a policy in audit mode, whose
    verdicts are reported, not enforced (the pod is answered as one without a policy)."""
    return None if policy is None or policy.audit else policy


def filter_nodes(pod_metadata: Mapping[str, Any] | None, nodes: Sequence[str], policy_failed: dict[str, str],
                 load: LoadState | None) -> dict[str, str]:
    """Node -> reason for the nodes that fail: the policy's verdicts first, load on what is left.

    `policy_failed` is taken over and extended (it is the caller's fresh dict).
    """
    # DaemonSet pods belong on their node whatever its load (crane's Filter skips them too).
    if load is not None and not is_daemonset_pod(pod_metadata):
        policy_failed.update(load_failed(load, [n for n in nodes if n not in policy_failed]))
    return policy_failed


def prioritize(pod_metadata: Mapping[str, Any] | None, nodes: Sequence[str], policy_scores: list[int] | None,
               load: LoadState | None, load_weight: float = 1.0) -> list[int]:
    """0..10 per node, in the order of `nodes`: the policy's score (None: the pod has no
    TASPolicy), the load score, or their weighted mean (the policy weighs 1)."""
    if load is None or is_daemonset_pod(pod_metadata):
        return policy_scores if policy_scores is not None else [0] * len(nodes)
    by_load = load_scores(load, nodes)
    if policy_scores is None:
        return by_load
    return [combine(own, mine, 1.0, load_weight) for own, mine in zip(policy_scores, by_load, strict=True)]
