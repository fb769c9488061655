"""The Prometheus HTTP API: an instant query per metric, node taken from the `node` label."""

from __future__ import annotations

import logging
import math

import httpx

from tas_extender.metrics import Sample

log = logging.getLogger(__name__)


class PrometheusSource:
    name = "prometheus"

    def __init__(self, url: str, metric_prefix: str = "node_", timeout: float = 5.0,
                 transport: httpx.BaseTransport | None = None):
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, transport=transport)
        self.prefix = metric_prefix

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        out: dict[str, dict[str, Sample]] = {}
        for metric in sorted(metrics):
            # Policies name the metric as the adapter serves it (health_metric for node_health_metric).
            query = f'max by (node) ({self.prefix}{metric}{{node!=""}})'
            response = self.client.get("/api/v1/query", params={"query": query})
            response.raise_for_status()
            by_node: dict[str, Sample] = {}
            for series in response.json().get("data", {}).get("result", []):
                node = series.get("metric", {}).get("node")
                try:
                    stamp, value = float(series["value"][0]), float(series["value"][1])
                except (KeyError, IndexError, TypeError, ValueError):
                    log.warning("ignoring malformed series for %s: %r", metric, series)
                    continue
                if node and math.isfinite(value):
                    by_node[node] = Sample(value, stamp)
            out[metric] = by_node
        return out
