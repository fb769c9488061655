"""The load-aware mode's state: its policy, the nodes' load annotations, recent bindings.

The decisions are the pure functions of `decide`; this object only gathers their inputs
(annotations as the node watch sees them, bindings as the pod watch sees them) at call time.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence

from tas_extender.load.annotations import fresh_values
from tas_extender.load.decide import extender_score, hot_points, load_score, overloaded
from tas_extender.load.hotspot import BindingCounter
from tas_extender.load.policy import LoadPolicy

Annotations = Callable[[str], Mapping[str, str] | None]


class LoadAware:
    def __init__(self, policy: LoadPolicy, annotations: Annotations, clock: Callable[[], float] = time.time):
        self.policy = policy
        self.annotations = annotations  # node name -> its annotations, or None when unknown
        self.clock = clock
        self.bindings = BindingCounter(policy.longest_hot_window)
        self._bound: dict[str, str] = {}  # pod uid -> node, for pods seen bound

    def values(self, node: str, now: float) -> dict[str, float]:
        moment = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        return fresh_values(dict(self.annotations(node) or {}), self.policy, moment)

    def failed(self, nodes: Sequence[str]) -> dict[str, str]:
        """Node -> reason, for the nodes whose load is above a predicate's limit."""
        now = self.clock()
        return {n: reason for n in nodes if (reason := overloaded(self.policy, self.values(n, now)))}

    def scores(self, nodes: Sequence[str]) -> list[int]:
        """0..10 in the order of `nodes`: headroom, minus the hotspot penalty."""
        now = self.clock()
        return [extender_score(load_score(self.policy, self.values(n, now),
                                          hot_points(self.policy, self.bindings, n, now))) for n in nodes]

    def on_pod(self, uid: str, node: str | None, initial: bool = False) -> None:
        """A pod as the watch shows it: its first appearance on a node counts as a binding.

        Pods already bound when the watch starts (`initial`) are remembered, not counted.
        """
        if not node or self._bound.get(uid) == node:
            return
        self._bound[uid] = node
        if not initial:
            self.bindings.record(node, self.clock())

    def forget_pod(self, uid: str) -> None:
        self._bound.pop(uid, None)
