"""The load-aware mode's state: its policy, the nodes' load annotations, recent bindings.

The decisions are the pure functions of `decide`; this object only hands them their inputs
(annotations as the node watch sees them, bindings as the pod watch sees them) at call time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from tas_extender.decide.load.decide import LoadState
from tas_extender.decide.load.hotspot import BindingCounter
from tas_extender.decide.load.policy import LoadPolicy

Annotations = Callable[[str], Mapping[str, str] | None]


class LoadAware:
    def __init__(self, policy: LoadPolicy, annotations: Annotations, clock: Callable[[], float] = time.time):
        self.policy = policy
        self.annotations = annotations  # node name -> its annotations, or None when unknown
        self.clock = clock
        self.bindings = BindingCounter(policy.longest_hot_window)
        self._bound: dict[str, str] = {}  # pod uid -> node, for pods seen bound

    def state(self) -> LoadState:
        """The inputs of a load decision, now."""
        now, counter = self.clock(), self.bindings
        return LoadState(self.policy, now, self.annotations, lambda node, window: counter.count(node, window, now))

    def hot_value(self, node: str) -> int:
        """The node's hot points now (what the annotator writes as node_hot_value)."""
        return self.state().hot_value(node)

    def on_pod(self, uid: str, node: str | None, initial: bool = False) -> bool:
        """A pod as the watch shows it: its first appearance on a node counts as a binding
        (True when it was counted).

        Pods already bound when the watch starts (`initial`) are remembered, not counted.
        """
        if not node or self._bound.get(uid) == node:
            return False
        self._bound[uid] = node
        if initial:
            return False
        self.bindings.record(node, self.clock())
        return True

    def forget_pod(self, uid: str) -> None:
        self._bound.pop(uid, None)
