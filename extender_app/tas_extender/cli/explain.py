"""`tas-extender explain`: the inputs read from the cluster (NAMESPACE/POD) or from files, then
`explain.explain` over them."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tas_extender.cli.common import (
    MISSING_METRICS,
    LoadInputs,
    MissingMetrics,
    UsageError,
    duration,
    kube_client,
    load_nodes,
    load_policy_files,
    metric_source,
    moment,
    read_document,
)
from tas_extender.decide.engine import POLICY_LABEL
from tas_extender.decide.load.decide import LoadState
from tas_extender.decide.metrics import Sample
from tas_extender.decide.policy import GROUP, PLURAL, VERSION, Policy, PolicyError, parse_policy
from tas_extender.offline.explain import explain, render

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class ExplainError(Exception):
    """An input explain cannot use; the message says which and why."""


@dataclass(frozen=True)
class ExplainSettings:
    pod: str | None  # NAMESPACE/NAME in the cluster, or None with pod_file
    pod_file: str | None
    kubeconfig: str | None
    policy_files: list[str]
    metrics_file: str | None
    metrics_source: str | None
    prometheus_url: str
    metric_max_age: float
    missing_metrics: MissingMetrics
    output: Literal["table", "json"]
    load: LoadInputs

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExplainSettings:
        return cls(args.pod, args.pod_file, args.kubeconfig, args.policy_files, args.metrics_file,
                   args.metrics_source, args.prometheus_url, args.metric_max_age, args.missing_metrics,
                   args.output, LoadInputs.from_args(args))


def add_parser(sub: argparse._SubParsersAction) -> None:
    explain = sub.add_parser(
        "explain", help="why a pod passes or fails each node and how each node scores, with the metrics behind it",
        description="For every node: filtered or not (and by which rule), the score, and each deciding metric's "
                    "value and age; in load mode the load values and hot value. Against the cluster for "
                    "NAMESPACE/POD, or offline from files (--pod-file). Every node is a candidate here; the "
                    "scheduler sends only those its own filters passed.")
    explain.set_defaults(run=lambda args: run(ExplainSettings.from_args(args)))
    explain.add_argument("pod", nargs="?", help="NAMESPACE/NAME of a pod in the cluster")
    explain.add_argument("--kubeConfig", "--kubeconfig", dest="kubeconfig", default=None,
                         help="kubeconfig file; in a pod the in-cluster config is used")
    explain.add_argument("--pod-file", default=None, help="offline: the pod as YAML or JSON, instead of NAMESPACE/POD")
    explain.add_argument("--policy-file", dest="policy_files", action="append", default=[],
                         help="YAML TASPolicy documents instead of the cluster's (repeatable)")
    explain.add_argument("--metrics-file", default=None, help="Prometheus text file with node-labelled metrics")
    explain.add_argument("--metrics-source", choices=["custom-metrics", "prometheus", "file"], default=None,
                         help="where metrics come from, as for serve (custom-metrics, or file with --metrics-file)")
    explain.add_argument("--prometheus-url", default="http://127.0.0.1:9090")
    explain.add_argument("--metric-max-age", type=duration, default=30.0,
                         help="older values count as missing (serve's default: 30s)")
    explain.add_argument("--missing-metrics", choices=MISSING_METRICS, default="fail-open")
    explain.add_argument("--output", "-o", choices=["table", "json"], default="table")
    why_load = explain.add_argument_group("load-aware decisions (as serve --load-aware answers them)")
    why_load.add_argument("--load-aware", action="store_true", help="also decide by node load")
    why_load.add_argument("--load-policy", default=None, help="DynamicSchedulerPolicy YAML; implies --load-aware")
    why_load.add_argument("--load-weight", type=float, default=1.0,
                          help="weight of the load score against a TASPolicy's own score (weight 1)")
    why_load.add_argument("--nodes", default=None, help="offline: `kubectl get nodes -o json` (or YAML)")
    why_load.add_argument("--bindings", default=None,
                          help="offline: YAML/JSON mapping node -> seconds ago of each pod bound there")
    why_load.add_argument("--now", default=None,
                          help="offline: the moment of the decision, such as 2026-11-22T10:00:00Z")


def _policy_name(pod: Mapping[str, Any]) -> tuple[str, str | None]:
    labels = pod.get("labels") or {}
    return pod.get("namespace") or "default", labels.get(POLICY_LABEL) if isinstance(labels, dict) else None


def _policy_from_files(pod: Mapping[str, Any], paths: list[str]) -> tuple[Policy | None, str | None]:
    valid, invalid = load_policy_files(paths)
    if invalid:
        raise ExplainError("; ".join(f"policy {key} is invalid: {error}" for key, error in invalid.items()))
    namespace, name = _policy_name(pod)
    if not name:
        return None, None
    for policy in valid:
        if (policy.namespace or "default", policy.name) == (namespace, name):
            return policy, None
    return None, f"{namespace}/{name}"


def _offline(settings: ExplainSettings, pod_file: str) -> dict[str, Any]:
    from tas_extender.sources.textfile import parse

    document = read_document(pod_file, "--pod-file")
    pod = document.get("metadata") if isinstance(document, dict) else None
    if not isinstance(pod, dict):
        raise ExplainError(f"--pod-file {pod_file}: expected a Pod with metadata")
    policy, missing = _policy_from_files(pod, settings.policy_files)
    now = moment(settings.load.now)
    load, annotated = settings.load.offline(now) if settings.load.aware else (None, [])
    samples: dict[str, dict[str, Sample]] = {}
    if settings.metrics_file:
        with open(settings.metrics_file, encoding="utf-8") as handle:
            samples = parse(handle.read(), now)
    nodes = sorted({node for by_node in samples.values() for node in by_node} | set(annotated)
                   | set(load_nodes(settings.load.nodes_file)))
    return {"pod": pod, "policy": policy, "missing_policy": missing, "samples": samples, "nodes": nodes,
            "now": now, "load": load}


def _scheduled_at(pod: Any) -> float | None:
    """When the pod was bound: its PodScheduled condition's last transition to True."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "True" and condition.last_transition_time:
            stamp: datetime.datetime = condition.last_transition_time
            return stamp.timestamp()
    return None


def _live(settings: ExplainSettings, namespaced_name: str) -> dict[str, Any]:
    from kubernetes import client

    namespace, _, name = namespaced_name.partition("/")
    if not namespace or not name:
        raise ExplainError(f"give the pod as NAMESPACE/NAME, not {namespaced_name!r}")
    api_client: ApiClient = kube_client(settings.kubeconfig)
    core = client.CoreV1Api(api_client)
    try:
        found = core.read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        raise ExplainError(f"pod {namespace}/{name}: {error.status} {error.reason}") from None
    pod = api_client.sanitize_for_serialization(found.metadata)
    policy, missing = _policy_from_cluster(api_client, pod) if not settings.policy_files else \
        _policy_from_files(pod, settings.policy_files)
    # Plain dicts, as the API sends them: name, annotations and addresses of each node.
    listed: list[dict[str, Any]] = api_client.sanitize_for_serialization(core.list_node().items)
    nodes = sorted(node["metadata"]["name"] for node in listed)
    samples: dict[str, dict[str, Sample]] = {}
    metrics = policy.metric_names() if policy else set()
    if metrics:
        def addresses() -> dict[str, list[str]]:  # asked only by the Prometheus source
            return {node["metadata"]["name"]: [a["address"] for a in node.get("status", {}).get("addresses", [])]
                    for node in listed}

        source = metric_source(settings.metrics_source, settings.metrics_file, settings.prometheus_url, api_client,
                               node_addresses=addresses)
        samples = source.fetch(metrics)
    now = time.time()
    load = None
    if settings.load.aware:
        annotations = {node["metadata"]["name"]: node["metadata"].get("annotations") or {} for node in listed}
        load = _live_load(settings.load.policy_file, core, annotations, now)
    return {"pod": pod, "policy": policy, "missing_policy": missing, "samples": samples, "nodes": nodes,
            "now": now, "load": load}


def _policy_from_cluster(api_client: ApiClient, pod: Mapping[str, Any]) -> tuple[Policy | None, str | None]:
    from kubernetes import client

    namespace, name = _policy_name(pod)
    if not name:
        return None, None
    try:
        obj = client.CustomObjectsApi(api_client).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except client.ApiException as error:
        if error.status == 404:
            return None, f"{namespace}/{name}"
        raise ExplainError(f"TASPolicy {namespace}/{name}: {error.status} {error.reason}") from None
    try:
        return parse_policy(obj), None
    except PolicyError as error:
        raise ExplainError(f"TASPolicy {namespace}/{name} is invalid (the extender ignores it): {error}") from None


def _live_load(policy_file: str | None, core: Any, annotations: dict[str, dict[str, str]], now: float) -> LoadState:
    """Load as the server reads it: the nodes' annotations, and bindings from when each pod was scheduled."""
    from tas_extender.decide.load.hotspot import BindingCounter
    from tas_extender.decide.load.policy import DEFAULT_POLICY, load_policy_file

    policy = load_policy_file(policy_file) if policy_file else DEFAULT_POLICY
    counter = BindingCounter(policy.longest_hot_window)
    for pod in core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items:
        bound = _scheduled_at(pod)
        if bound is not None and now - bound <= policy.longest_hot_window:
            counter.record(pod.spec.node_name, bound)
    return LoadState(policy, now, annotations.get, lambda node, window: counter.count(node, window, now))


def run(settings: ExplainSettings) -> int:
    if bool(settings.pod) == bool(settings.pod_file):
        print("tas-extender explain: give NAMESPACE/POD (from the cluster) or --pod-file (offline), one of them",
              file=sys.stderr)
        return 2
    try:
        inputs = _live(settings, settings.pod) if settings.pod else _offline(settings, settings.pod_file or "")
    except (ExplainError, UsageError, PolicyError, OSError, ValueError) as error:
        print(f"tas-extender explain: {error}", file=sys.stderr)
        return 1
    answer = explain(inputs["pod"], inputs["policy"], inputs["samples"], inputs["nodes"], inputs["now"],
                     settings.metric_max_age, settings.missing_metrics == "fail-closed", inputs["load"],
                     settings.load.weight, missing_policy=inputs["missing_policy"])
    if settings.output == "json":
        print(json.dumps(answer.as_dict(), indent=2, sort_keys=True))
    else:
        print(render(answer))
    return 0
