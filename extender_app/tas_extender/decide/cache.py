"""The metric cache: the last values fetched, with their timestamps, and the source's health."""

from __future__ import annotations

import logging
import threading
import time

from tas_extender.decide.metrics import MetricSource, Sample, Snapshot

log = logging.getLogger(__name__)


class MetricCache:
    def __init__(self, source: MetricSource, max_age: float):
        self.source = source
        self.max_age = max_age
        self._lock = threading.Lock()
        self._samples: dict[str, dict[str, Sample]] = {}
        self.snapshot = Snapshot()
        self.synced = False  # one fetch has succeeded
        self.source_up = False
        self.last_error = ""
        self.last_success = 0.0

    def refresh(self, metrics: set[str], now: float | None = None) -> Snapshot:
        """Fetch the metrics; on failure keep the old values, which then age out."""
        now = time.time() if now is None else now
        try:
            fetched = self.source.fetch(metrics) if metrics else {}
        except Exception as error:  # noqa: BLE001 - any source failure leaves the cache serving
            if self.source_up or not self.last_error:
                log.warning("metric source %s failed: %s", self.source.name, error)
            self.source_up = False
            self.last_error = str(error)
        else:
            with self._lock:
                # A node an answer leaves out keeps its last sample, which ages out as any other
                # (max_age): a restarted Prometheus answers with nothing until its first scrape,
                # and a new adapter until it has listed the series, for some seconds; that must
                # not drop every node's value at once and let pods through (missing fails open).
                self._samples = {m: {**self._samples.get(m, {}), **fetched.get(m, {})} for m in metrics}
            self.source_up = True
            self.synced = True
            self.last_error = ""
            self.last_success = now
        with self._lock:
            samples = {m: v for m, v in self._samples.items() if m in metrics}
        self.snapshot = Snapshot.build(samples, now, self.max_age)
        return self.snapshot

    def ages(self, now: float | None = None) -> dict[str, float]:
        """metric -> age in seconds of its newest sample (for /metrics)."""
        now = time.time() if now is None else now
        with self._lock:
            return {m: now - max(s.timestamp for s in by_node.values())
                    for m, by_node in self._samples.items() if by_node}
