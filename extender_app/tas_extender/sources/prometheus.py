"""The Prometheus HTTP API: an instant query per metric, node taken from the `node` label."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator

import httpx

from tas_extender.metrics import Sample
from tas_extender.sources import one_per_node

log = logging.getLogger(__name__)
_PROMETHEUS_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _query(name: str) -> str:
    """The instant query for one metric by node. A name PromQL cannot write bare (TAS allows
    dashes and leading digits) goes in a __name__ matcher; rules only allow [A-Za-z0-9_:-]."""
    selector = f'{name}{{node!=""}}' if _PROMETHEUS_NAME.match(name) else f'{{__name__="{name}",node!=""}}'
    return f"max by (node) ({selector})"


def _samples(metric: str, result: object) -> Iterator[tuple[str, Sample]]:
    for series in result if isinstance(result, list) else []:
        labels = series.get("metric") if isinstance(series, dict) else None
        node = labels.get("node") if isinstance(labels, dict) else None
        if not node or not isinstance(node, str):
            log.warning("ignoring series for %s without a node label: %r", metric, series)
            continue
        try:
            stamp, value = float(series["value"][0]), float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            log.warning("ignoring malformed series for %s: %r", metric, series)
            continue
        if not math.isfinite(value) or not math.isfinite(stamp):
            log.warning("ignoring %s for node %r: value %s at %s is not a finite number", metric, node, value, stamp)
            continue
        yield node, Sample(value, stamp)


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
            response = self.client.get("/api/v1/query", params={"query": _query(self.prefix + metric)})
            response.raise_for_status()
            data = response.json().get("data")
            out[metric] = one_per_node(metric, _samples(metric, data.get("result") if isinstance(data, dict) else None))
        return out
