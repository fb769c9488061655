"""A file in Prometheus text format, node given by the `node` label; re-read when it changes."""

from __future__ import annotations

import logging
import math
import os
import time

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tas_extender.decide.metrics import Sample
from tas_extender.sources import one_per_node

log = logging.getLogger(__name__)


def _families(text: str) -> list[Metric]:
    """The file's metric families; when a line does not parse, every other line still counts."""
    try:
        return list(text_string_to_metric_families(text))
    except ValueError as error:
        log.warning("metrics file does not parse (%s): reading it line by line", error)
    families: list[Metric] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            families.extend(text_string_to_metric_families(line + "\n"))
        except ValueError as error:
            log.warning("ignoring line %d %r: %s", number, line[:200], error)
    return families


def parse(text: str, now: float) -> dict[str, dict[str, Sample]]:
    """metric -> node -> Sample; lines without a node label or with non-finite values are skipped.

    A sample's own timestamp (seconds) is kept; a sample without one is stamped `now`.
    """
    found: dict[str, list[tuple[str, Sample]]] = {}
    for family in _families(text):
        for sample in family.samples:
            node = sample.labels.get("node")
            if not node:
                log.warning("ignoring %s without a node label", sample.name)
                continue
            if not math.isfinite(sample.value):
                log.warning("ignoring %s{node=%r}: value %s is not a number", sample.name, node, sample.value)
                continue
            stamp = sample.timestamp if sample.timestamp is not None else now
            found.setdefault(sample.name, []).append((node, Sample(float(sample.value), float(stamp))))
    return {metric: one_per_node(metric, samples) for metric, samples in found.items()}


class TextfileSource:
    """Samples without a timestamp in the file are as fresh as the last fetch of the file."""

    name = "file"

    def __init__(self, path: str):
        self.path = path
        self._version: tuple[int, int, int] | None = None
        self._samples: dict[str, dict[str, Sample]] = {}
        self._stamped: set[tuple[str, str]] = set()  # (metric, node) with a timestamp in the file

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        now = time.time()
        stat = os.stat(self.path)
        # Size and inode too: an atomic rename or a rewrite within the mtime's resolution.
        version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if version != self._version:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read()
            self._samples = parse(text, float("nan"))
            self._stamped = {(m, n) for m, by_node in self._samples.items()
                             for n, s in by_node.items() if not math.isnan(s.timestamp)}
            self._version = version
            log.info("read %d metrics from %s", len(self._samples), self.path)
        return {m: {n: s if (m, n) in self._stamped else Sample(s.value, now)
                    for n, s in self._samples.get(m, {}).items()} for m in metrics}
