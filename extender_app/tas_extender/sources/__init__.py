"""Metric sources behind one interface (decide.metrics.MetricSource): metric names -> metric -> node -> Sample.

The edge that fetches (files, Prometheus, the custom metrics API); imports decide and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tas_extender.decide.metrics import Sample

log = logging.getLogger(__name__)


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
