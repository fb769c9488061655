"""Reaction time of the health-metric demo, stage by stage, on the stack `make demo` provisioned.

A node's textfile goes from healthy (0) to 2 (dontschedule and deschedule), and the time is
taken from that write until each stage shows it: Prometheus's query result, the custom metrics
API (prometheus-adapter), the extender's filter decision, the node label, the first demo pod
evicted from the node, and every replacement Running elsewhere. Then the node is made healthy
again and the run repeats. Every stage is polled every 50 ms.
"""

from __future__ import annotations

import json
import pathlib
import random
import ssl
import statistics
import time

import httpx
from kubernetes import client, config

CLUSTER = pathlib.Path.home() / ".local" / "state" / "tas-local-cluster"
NODE, NAMESPACE, POLICY = "node-2", "health-metric-demo", "demo-policy"
POLL = 0.05
STAGES = ["prometheus", "custom_metrics_api", "extender_filter", "node_label", "pod_evicted", "replacements_running"]


def write_health(node: str, value: int) -> None:
    target = CLUSTER / "nodes" / node / "node-metrics" / "text.prom"
    temporary = target.with_suffix(".tmp")
    temporary.write_text(f"node_health_metric {value}\n")
    temporary.replace(target)


def _quantity(text: str) -> float:
    """A Kubernetes quantity as the adapter writes metric values ("2", "2500m")."""
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def settings() -> dict:
    """The pipeline's settings the local inventory gives (inventory/group_vars/all)."""
    import yaml

    values = yaml.safe_load((pathlib.Path(__file__).resolve().parents[1] / "inventory" / "group_vars" / "all"
                             / "collection.yml").read_text())
    keys = ["prometheus_scrape_interval", "prometheus_adapter_relist_interval", "extender_sync_period",
            "descheduler_interval"]
    return {key: values.get(key) for key in keys}


class Probes:
    def __init__(self) -> None:
        self.api = config.new_client_from_config(config_file=str(CLUSTER / "kubeconfig"))
        self.core = client.CoreV1Api(self.api)
        pki = CLUSTER / "tas-pki"
        tls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        tls.load_cert_chain(str(pki / "kube-scheduler" / "scheduler-client.crt"),
                            str(pki / "kube-scheduler" / "scheduler-client.key"))
        self.extender = httpx.Client(base_url="https://127.0.0.1:9001", verify=tls, timeout=5)
        self.prometheus = httpx.Client(base_url="http://127.0.0.1:9090", timeout=5)

    def prometheus_value(self) -> float | None:
        result = self.prometheus.get("/api/v1/query", params={
            "query": f'node_health_metric{{node="{NODE}"}}'}).json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def custom_metric(self) -> float | None:
        method, url, headers, body, _ = self.api.param_serialize(
            "GET", f"/apis/custom.metrics.k8s.io/v1beta1/nodes/{NODE}/health_metric", auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=5)
        response.read()
        items = json.loads(response.data).get("items") or []
        return _quantity(items[0]["value"]) if items else None

    def filtered(self) -> bool:
        pod = {"metadata": {"name": "probe", "namespace": NAMESPACE, "labels": {"telemetry-policy": POLICY}}}
        body = self.extender.post("/scheduler/filter", json={"Pod": pod, "NodeNames": [NODE]}).json()
        return NODE in (body.get("FailedNodes") or {})

    def labelled(self) -> bool:
        metadata = self.core.read_node(NODE).metadata
        return metadata is not None and (metadata.labels or {}).get(POLICY) == "violating"

    def demo_pods(self) -> list:
        return self.core.list_namespaced_pod(NAMESPACE).items


def spread_demo_pods(probes: Probes, deadline: float = 120) -> None:
    """Recreate the demo pods until some run on NODE again (the last run evicted them all)."""
    started = time.monotonic()
    while time.monotonic() - started < deadline:
        pods = probes.demo_pods()
        live = [p for p in pods if not p.metadata.deletion_timestamp and p.status.phase == "Running"]
        if len(live) == len(pods) and any(p.spec.node_name == NODE for p in live):
            return
        if len(live) == len(pods):
            for pod in live:
                probes.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        time.sleep(2)
    raise TimeoutError(f"no demo pod runs on {NODE}")


def replaced(probes: Probes, total: int) -> bool:
    """All `total` demo pods are back, Running, and none on NODE."""
    pods = [p for p in probes.demo_pods() if not p.metadata.deletion_timestamp]
    return len(pods) >= total and all(p.status.phase == "Running" and p.spec.node_name != NODE for p in pods)


def one_run(probes: Probes, deadline: float = 180) -> dict[str, float]:
    spread_demo_pods(probes)
    on_node = {p.metadata.name for p in probes.demo_pods() if p.spec.node_name == NODE}
    total = len(probes.demo_pods())
    seen: dict[str, float] = {}
    # The previous run ended on a sync tick; a random pause keeps runs from sharing its phase
    # with the scrape interval and the sync period.
    time.sleep(random.uniform(0, 5))
    start = time.monotonic()
    write_health(NODE, 2)
    checks = {
        "prometheus": lambda: probes.prometheus_value() == 2,
        "custom_metrics_api": lambda: probes.custom_metric() == 2,
        "extender_filter": probes.filtered,
        "node_label": probes.labelled,
        # KWOK completes an eviction at once: the pod may be gone before a poll sees it terminating.
        "pod_evicted": lambda: bool(on_node - {p.metadata.name for p in probes.demo_pods()
                                               if not p.metadata.deletion_timestamp}),
        "replacements_running": lambda: replaced(probes, total),
    }
    while len(seen) < len(checks) and time.monotonic() - start < deadline:
        for stage, check in checks.items():
            if stage not in seen:
                try:
                    if check():
                        seen[stage] = round(time.monotonic() - start, 2)
                except Exception:  # noqa: BLE001 - a stage may not answer yet; poll again
                    pass
        time.sleep(POLL)
    write_health(NODE, 0)
    return seen


def measure(runs: int) -> dict:
    probes = Probes()
    results = []
    for _ in range(runs):
        write_health(NODE, 0)
        # Healthy everywhere again: wait for the label to go before the next run.
        deadline = time.monotonic() + 120
        while probes.labelled() and time.monotonic() < deadline:
            time.sleep(POLL)
        results.append(one_run(probes))
    summary = {stage: {"median_s": round(statistics.median(r[stage] for r in results if stage in r), 2),
                       "max_s": max(r[stage] for r in results if stage in r)}
               for stage in STAGES if any(stage in r for r in results)}
    return {"runs": results, "summary": summary, "settings": settings()}
