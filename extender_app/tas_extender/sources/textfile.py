"""A file in Prometheus text format, node given by the `node` label; re-read when it changes."""

from __future__ import annotations

import logging
import math
import os
import time

from prometheus_client.parser import text_string_to_metric_families

from tas_extender.metrics import Sample

log = logging.getLogger(__name__)


def parse(text: str, now: float) -> dict[str, dict[str, Sample]]:
    """metric -> node -> Sample; lines without a node label or with non-finite values are skipped."""
    out: dict[str, dict[str, Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            node = sample.labels.get("node")
            if not node:
                log.warning("ignoring %s without a node label", sample.name)
                continue
            if not math.isfinite(sample.value):
                log.warning("ignoring %s{node=%r}: value %s is not a number", sample.name, node, sample.value)
                continue
            stamp = sample.timestamp if sample.timestamp is not None else now
            out.setdefault(sample.name, {})[node] = Sample(float(sample.value), float(stamp))
    return out


class TextfileSource:
    """Values are as fresh as the last successful read of the file."""

    name = "file"

    def __init__(self, path: str):
        self.path = path
        self._mtime: float | None = None
        self._samples: dict[str, dict[str, Sample]] = {}

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        now = time.time()
        mtime = os.stat(self.path).st_mtime
        if mtime != self._mtime:
            with open(self.path, encoding="utf-8") as handle:
                self._samples = parse(handle.read(), now)
            self._mtime = mtime
            log.info("read %d metrics from %s", len(self._samples), self.path)
        # The file is the truth for as long as it exists: its values are current.
        return {m: {n: Sample(s.value, now) for n, s in self._samples.get(m, {}).items()} for m in metrics}
