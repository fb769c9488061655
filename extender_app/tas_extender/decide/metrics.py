"""Metric samples, the snapshot the decisions read (metric -> node -> value), and the interface
the sources fetch samples through."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Sample:
    value: float
    timestamp: float  # seconds since the epoch, when the source says the value was taken


@dataclass
class Snapshot:
    """Fresh values only: built once per sync, read by every request until the next sync."""

    values: dict[str, dict[str, float]] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)  # every node some metric has a value for

    def get(self, metric: str, node: str) -> float | None:
        by_node = self.values.get(metric)
        return None if by_node is None else by_node.get(node)

    @classmethod
    def build(cls, samples: dict[str, dict[str, Sample]], now: float, max_age: float) -> Snapshot:
        """Keep samples younger than max_age with finite values; older ones count as missing."""
        values: dict[str, dict[str, float]] = {}
        nodes: set[str] = set()
        for metric, by_node in samples.items():
            fresh = {node: s.value for node, s in by_node.items()
                     if now - s.timestamp <= max_age and math.isfinite(s.value)}
            values[metric] = fresh
            nodes.update(fresh)
        return cls(values=values, nodes=nodes)


class MetricSource(Protocol):
    name: str

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        """Current values of the given metrics for every node; raises on a failed fetch."""
        ...
