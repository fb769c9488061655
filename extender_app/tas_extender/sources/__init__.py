"""Metric sources behind one interface: fetch(metric names) -> metric -> node -> Sample."""

from __future__ import annotations

from typing import Protocol

from tas_extender.metrics import Sample


class MetricSource(Protocol):
    name: str

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        """Current values of the given metrics for every node; raises on a failed fetch."""
        ...
