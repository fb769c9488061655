"""The custom metrics API (custom.metrics.k8s.io/v1beta1, nodes/*/<metric>), as TAS reads it."""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections.abc import Iterator

import orjson
from kubernetes.client import ApiClient
from kubernetes.utils import parse_quantity

from tas_extender.decide.metrics import Sample
from tas_extender.sources import one_per_node

log = logging.getLogger(__name__)
PATH = "/apis/custom.metrics.k8s.io/v1beta1/nodes/*/{metric}"


def _timestamp(text: str | None, default: float) -> float:
    if not text:
        return default
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _samples(body: dict, now: float) -> Iterator[tuple[str, Sample]]:
    items = body.get("items") if isinstance(body, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            log.warning("ignoring item %r: not an object", item)
            continue
        described = item.get("describedObject")
        node = described.get("name") if isinstance(described, dict) else None
        if not node or not isinstance(node, str):
            log.warning("ignoring value %r: no describedObject.name", item.get("value"))
            continue
        raw = item.get("value")
        try:
            if isinstance(raw, bool):  # parse_quantity would read true as 1
                raise ValueError("a boolean is not a quantity")
            value = float(parse_quantity(raw))
            if not math.isfinite(value):
                raise ValueError("not a finite number")
            stamp = _timestamp(item.get("timestamp"), now)
        except (TypeError, ValueError, AttributeError) as error:
            log.warning("ignoring value %r for node %r: %s", raw, node, error)
            continue
        yield node, Sample(value, stamp)


def parse_metric_value_list(body: dict, now: float, metric: str = "the metric") -> dict[str, Sample]:
    """node -> Sample from a MetricValueList; unusable items are skipped with a log line."""
    return one_per_node(metric, _samples(body, now))


class CustomMetricsSource:
    name = "custom-metrics"

    def __init__(self, api_client: ApiClient):
        self.api = api_client

    def _get(self, path: str) -> dict:
        method, url, headers, body, _ = self.api.param_serialize("GET", path, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=10)
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}")
        return orjson.loads(data)

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        now = time.time()
        out: dict[str, dict[str, Sample]] = {}
        errors: list[str] = []
        for metric in sorted(metrics):
            try:
                out[metric] = parse_metric_value_list(self._get(PATH.format(metric=metric)), now, metric)
            except Exception as error:  # noqa: BLE001 - one metric failing must not hide the others
                errors.append(f"{metric}: {error}")
        if errors and not out:
            raise RuntimeError("; ".join(errors))
        for problem in errors:
            log.warning("custom metrics API: %s", problem)
        return out
