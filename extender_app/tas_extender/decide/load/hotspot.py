"""Recent bindings per node, for crane's hotspot prevention (too many new pods on one node)."""

from __future__ import annotations

import bisect
import threading


class BindingCounter:
    """When pods were bound to each node, over the last `keep` seconds; safe to share between threads.

    Times are plain float seconds passed in by the caller (monotonic clock in production), so
    tests control time and nothing here reads a clock.
    """

    def __init__(self, keep: float) -> None:
        self._lock = threading.Lock()
        self._times: dict[str, list[float]] = {}
        self._keep = keep
        self._next_sweep = float("-inf")

    @property
    def keep(self) -> float:
        return self._keep

    @keep.setter
    def keep(self, seconds: float) -> None:
        """Changed when the policy's longest hot window changes."""
        with self._lock:
            self._keep = seconds

    def record(self, node: str, when: float) -> None:
        """One pod bound to `node` at `when`; also drops history no hot rule can see any more."""
        with self._lock:
            times = self._times.setdefault(node, [])
            bisect.insort(times, when)
            self._prune_node(node, when - self._keep)
            # Nodes that stopped receiving pods are swept once per keep period, keeping memory bounded.
            if when >= self._next_sweep:
                self._prune_all(when - self._keep)
                self._next_sweep = when + max(self._keep, 1.0)

    def count(self, node: str, window: float, now: float) -> int:
        """Bindings to `node` with now - window < t <= now."""
        with self._lock:
            times = self._times.get(node)
            if not times:
                return 0
            return bisect.bisect_right(times, now) - bisect.bisect_right(times, now - window)

    def prune(self, now: float, keep: float) -> None:
        """Drop every binding at or before now - keep (no window of length keep can count it)."""
        with self._lock:
            self._prune_all(now - keep)

    def forget(self, node: str) -> None:
        """Drop a deleted node's history."""
        with self._lock:
            self._times.pop(node, None)

    def size(self) -> int:
        """Bindings held, over all nodes."""
        with self._lock:
            return sum(len(times) for times in self._times.values())

    def _prune_node(self, node: str, cutoff: float) -> None:
        times = self._times[node]
        del times[:bisect.bisect_right(times, cutoff)]
        if not times:
            del self._times[node]

    def _prune_all(self, cutoff: float) -> None:
        for node in list(self._times):
            self._prune_node(node, cutoff)
