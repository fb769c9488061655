"""Metric sources behind one interface: fetch(metric names) -> metric -> node -> Sample."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from tas_extender.metrics import Sample

log = logging.getLogger(__name__)


class MetricSource(Protocol):
    name: str

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        """Current values of the given metrics for every node; raises on a failed fetch."""
        ...


def one_per_node(metric: str, found: Iterable[tuple[str, Sample]]) -> dict[str, Sample]:
    """node -> Sample; a node given two different values gets none, since which is true is unknown."""
    out: dict[str, Sample] = {}
    conflicting: set[str] = set()
    for node, sample in found:
        seen = out.get(node)
        if seen is None:
            if node not in conflicting:
                out[node] = sample
        elif seen.value != sample.value:
            log.warning("ignoring %s for node %r: conflicting values %s and %s",
                        metric, node, seen.value, sample.value)
            del out[node]
            conflicting.add(node)
        elif sample.timestamp > seen.timestamp:
            out[node] = sample
    return out
