"""`tas-extender explain`: the inputs read from the cluster (NAMESPACE/POD) or from files, then
`explain.explain` over them."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tas_extender import cli
from tas_extender.engine import POLICY_LABEL
from tas_extender.explain import explain, render
from tas_extender.load.decide import LoadState
from tas_extender.metrics import Sample
from tas_extender.policy import GROUP, PLURAL, VERSION, Policy, PolicyError, parse_policy

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class ExplainError(Exception):
    """An input explain cannot use; the message says which and why."""


def _policy_name(pod: Mapping[str, Any]) -> tuple[str, str | None]:
    labels = pod.get("labels") or {}
    return pod.get("namespace") or "default", labels.get(POLICY_LABEL) if isinstance(labels, dict) else None


def _policy_from_files(pod: Mapping[str, Any], paths: list[str]) -> tuple[Policy | None, str | None]:
    valid, invalid = cli.load_policy_files(paths)
    if invalid:
        raise ExplainError("; ".join(f"policy {key} is invalid: {error}" for key, error in invalid.items()))
    namespace, name = _policy_name(pod)
    if not name:
        return None, None
    for policy in valid:
        if (policy.namespace or "default", policy.name) == (namespace, name):
            return policy, None
    return None, f"{namespace}/{name}"


def _offline(args: argparse.Namespace) -> dict[str, Any]:
    from tas_extender.sources.textfile import parse

    document = cli._read_document(args.pod_file, "--pod-file")
    pod = document.get("metadata") if isinstance(document, dict) else None
    if not isinstance(pod, dict):
        raise ExplainError(f"--pod-file {args.pod_file}: expected a Pod with metadata")
    policy, missing = _policy_from_files(pod, args.policy_file)
    now = cli._moment(args.now)
    load, annotated = cli._offline_load(args, now) if _load_aware(args) else (None, [])
    samples: dict[str, dict[str, Sample]] = {}
    if args.metrics_file:
        with open(args.metrics_file, encoding="utf-8") as handle:
            samples = parse(handle.read(), now)
    nodes = sorted({node for by_node in samples.values() for node in by_node} | set(annotated)
                   | set(cli.load_nodes(args.nodes)))
    return {"pod": pod, "policy": policy, "missing_policy": missing, "samples": samples, "nodes": nodes,
            "now": now, "load": load}


def _load_aware(args: argparse.Namespace) -> bool:
    return bool(args.load_aware or args.load_policy is not None)


def _scheduled_at(pod: Any) -> float | None:
    """When the pod was bound: its PodScheduled condition's last transition to True."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "True" and condition.last_transition_time:
            stamp: datetime.datetime = condition.last_transition_time
            return stamp.timestamp()
    return None


def _live(args: argparse.Namespace) -> dict[str, Any]:
    from kubernetes import client

    namespace, _, name = (args.pod or "").partition("/")
    if not namespace or not name:
        raise ExplainError(f"give the pod as NAMESPACE/NAME, not {args.pod!r}")
    api_client: ApiClient = cli._kube_client(args.kubeconfig)
    core = client.CoreV1Api(api_client)
    try:
        found = core.read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        raise ExplainError(f"pod {namespace}/{name}: {error.status} {error.reason}") from None
    pod = api_client.sanitize_for_serialization(found.metadata)
    policy, missing = _policy_from_cluster(api_client, pod) if not args.policy_file else \
        _policy_from_files(pod, args.policy_file)
    # Plain dicts, as the API sends them: name, annotations and addresses of each node.
    listed: list[dict[str, Any]] = api_client.sanitize_for_serialization(core.list_node().items)
    nodes = sorted(node["metadata"]["name"] for node in listed)
    samples: dict[str, dict[str, Sample]] = {}
    metrics = policy.metric_names() if policy else set()
    if metrics:
        source = cli._metric_source(args, api_client)
        if hasattr(source, "node_addresses"):
            addresses = {node["metadata"]["name"]: [a["address"] for a in node.get("status", {}).get("addresses", [])]
                         for node in listed}
            source.node_addresses = lambda: addresses
        samples = source.fetch(metrics)
    now = time.time()
    load = None
    if _load_aware(args):
        annotations = {node["metadata"]["name"]: node["metadata"].get("annotations") or {} for node in listed}
        load = _live_load(args, core, annotations, now)
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


def _live_load(args: argparse.Namespace, core: Any, annotations: dict[str, dict[str, str]], now: float) -> LoadState:
    """Load as the server reads it: the nodes' annotations, and bindings from when each pod was scheduled."""
    from tas_extender.load.hotspot import BindingCounter
    from tas_extender.load.policy import DEFAULT_POLICY, load_policy_file

    policy = load_policy_file(args.load_policy) if args.load_policy else DEFAULT_POLICY
    counter = BindingCounter(policy.longest_hot_window)
    for pod in core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items:
        bound = _scheduled_at(pod)
        if bound is not None and now - bound <= policy.longest_hot_window:
            counter.record(pod.spec.node_name, bound)
    return LoadState(policy, now, annotations.get, lambda node, window: counter.count(node, window, now))


def explain_command(args: argparse.Namespace) -> int:
    if bool(args.pod) == bool(args.pod_file):
        print("tas-extender explain: give NAMESPACE/POD (from the cluster) or --pod-file (offline), one of them",
              file=sys.stderr)
        return 2
    try:
        inputs = _live(args) if args.pod else _offline(args)
    except (ExplainError, cli.UsageError, PolicyError, OSError, ValueError) as error:
        print(f"tas-extender explain: {error}", file=sys.stderr)
        return 1
    answer = explain(inputs["pod"], inputs["policy"], inputs["samples"], inputs["nodes"], inputs["now"],
                     args.metric_max_age, args.missing_metrics == "fail-closed", inputs["load"], args.load_weight,
                     missing_policy=inputs["missing_policy"])
    if args.output == "json":
        print(json.dumps(answer.as_dict(), indent=2, sort_keys=True))
    else:
        print(render(answer))
    return 0
