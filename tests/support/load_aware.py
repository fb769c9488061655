"""The load-aware mode's inputs: the load annotations of the nodes at a given CPU use, as the
annotator would write them at NOW."""

from __future__ import annotations

import datetime

from tas_extender.decide.load.annotations import format_value
from tas_extender.decide.load.policy import DEFAULT_POLICY

NOW = 1_800_000_000.0
NODES = ["node-1", "node-2", "node-3"]


def annotations_for(cpu_percent: dict[str, float], age: float = 0.0) -> dict[str, dict[str, str]]:
    """Every policy metric of each node at that CPU percentage (memory at 10 %)."""
    stamp = datetime.datetime.fromtimestamp(NOW - age, datetime.UTC)
    return {node: {metric: format_value((cpu if metric.startswith("cpu") else 10.0) / 100, stamp)
                   for metric in DEFAULT_POLICY.sync} for node, cpu in cpu_percent.items()}
