"""The custom metrics API (custom.metrics.k8s.io/v1beta1, nodes/*/<metric>), as TAS reads it."""

from __future__ import annotations

import datetime
import logging
import time

import orjson

from kubernetes.utils import parse_quantity

from tas_extender.metrics import Sample

log = logging.getLogger(__name__)
PATH = "/apis/custom.metrics.k8s.io/v1beta1/nodes/*/{metric}"


def _timestamp(text: str | None, default: float) -> float:
    if not text:
        return default
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def parse_metric_value_list(body: dict, now: float) -> dict[str, Sample]:
    """node -> Sample from a MetricValueList; unusable items are skipped with a log line."""
    out: dict[str, Sample] = {}
    for item in body.get("items") or []:
        node = (item.get("describedObject") or {}).get("name")
        try:
            value = float(parse_quantity(item.get("value")))
        except (TypeError, ValueError) as error:
            log.warning("ignoring value %r for node %r: %s", item.get("value"), node, error)
            continue
        if node:
            out[node] = Sample(value, _timestamp(item.get("timestamp"), now))
    return out


class CustomMetricsSource:
    name = "custom-metrics"

    def __init__(self, api_client):
        self.api = api_client

    def _get(self, path: str) -> dict:
        method, url, headers, body, _ = self.api.param_serialize("GET", path, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=10)
        response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}")
        return orjson.loads(response.data)

    def fetch(self, metrics: set[str]) -> dict[str, dict[str, Sample]]:
        now = time.time()
        out: dict[str, dict[str, Sample]] = {}
        errors = []
        for metric in sorted(metrics):
            try:
                out[metric] = parse_metric_value_list(self._get(PATH.format(metric=metric)), now)
            except Exception as error:  # noqa: BLE001 - one metric failing must not hide the others
                errors.append(f"{metric}: {error}")
        if errors and not out:
            raise RuntimeError("; ".join(errors))
        for error in errors:
            log.warning("custom metrics API: %s", error)
        return out
