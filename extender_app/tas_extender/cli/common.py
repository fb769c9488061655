"""What more than one subcommand reads: flag types, policy and document files, the load-aware
inputs of the offline subcommands, the cluster's client and the metric source."""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import yaml

from tas_extender.decide.duration import parse_duration
from tas_extender.decide.policy import Policy, PolicyError, parse_policy

if TYPE_CHECKING:  # imported where used: `crd` and `evaluate` need no Kubernetes client
    from kubernetes.client import ApiClient

    from tas_extender.decide.load.decide import LoadState
    from tas_extender.decide.metrics import MetricSource
    from tas_extender.sources.nodes import NodeAddresses

log = logging.getLogger("tas_extender")

MissingMetrics = Literal["fail-open", "fail-closed"]
MISSING_METRICS = ["fail-open", "fail-closed"]
# --log-level's choices (the collection's roles offer the same in their argument specs)
LOG_LEVELS = ["debug", "info", "warning", "error"]


class UsageError(Exception):
    """Flags a subcommand cannot run with; the message says which and what to give instead."""


def duration(text: str) -> float:
    """A positive flag duration: a Go duration (2s, 1m30s, 500ms) or a plain number of seconds."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text.strip())
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be positive and finite")
    return value


def positive_int(text: str) -> int:
    """A flag's whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """--log-level, as every long-running subcommand takes it; `main` sets the level from it."""
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)


def load_policy_files(paths: list[str]) -> tuple[list[Policy], dict[str, PolicyError]]:
    """The TASPolicy documents of YAML files: the valid ones, and each invalid one's reason by
    `path:name`."""
    valid: list[Policy] = []
    invalid: dict[str, PolicyError] = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for doc in yaml.safe_load_all(handle):
                if not doc:
                    continue
                try:
                    policy = parse_policy(doc)
                except PolicyError as error:
                    name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc, dict) else "?"
                    invalid[f"{path}:{name}"] = error
                    continue
                for warning in policy.warnings:
                    log.warning("%s: %s", path, warning)
                valid.append(policy)
    return valid, invalid


def read_document(path: str, flag: str) -> Any:
    """One JSON or YAML document; the error names the flag that gave the file."""
    with open(path, encoding="utf-8") as handle:
        try:
            return yaml.safe_load(handle)
        except yaml.YAMLError as error:
            raise ValueError(f"{flag} {path}: not valid JSON or YAML: {error}") from None


def moment(text: str | None) -> float:
    """--now as Unix time; the present without it."""
    import time

    if text is None:
        return time.time()
    from tas_extender.decide.load.annotations import parse_timestamp

    try:
        return parse_timestamp(text)
    except ValueError as error:
        raise ValueError(f"--now: {error}") from None


def load_nodes(path: str | None) -> dict[str, dict[str, str]]:
    """Node name -> annotations from `kubectl get nodes -o json` (a NodeList, a list or one Node)."""
    if path is None:
        return {}
    document = read_document(path, "--nodes")
    items = document.get("items") if isinstance(document, dict) and "items" in document else document
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ValueError(f"--nodes {path}: expected a NodeList, a list of Nodes or one Node")
    nodes = {}
    for i, item in enumerate(items):
        metadata = item.get("metadata") if isinstance(item, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(metadata, dict) or not isinstance(name, str) or not name:
            raise ValueError(f"--nodes {path}: items[{i}].metadata.name is missing")
        annotations = metadata.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise ValueError(f"--nodes {path}: items[{i}].metadata.annotations is not a mapping")
        nodes[name] = {str(k): str(v) for k, v in annotations.items()}
    return nodes


@dataclass(frozen=True)
class LoadInputs:
    """The load-aware flags of `evaluate` and `explain`: the decision as `serve --load-aware`
    would make it, from files (or, for explain against the cluster, from its nodes and pods)."""

    aware: bool  # --load-aware, or implied by --load-policy
    policy_file: str | None
    nodes_file: str | None
    bindings_file: str | None
    now: str | None
    weight: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LoadInputs:
        return cls(bool(args.load_aware or args.load_policy is not None), args.load_policy, args.nodes,
                   args.bindings, args.now, args.load_weight)

    def offline(self, now: float) -> tuple[LoadState, list[str]]:
        """The load state decided on, and the nodes the --nodes file names."""
        from tas_extender.decide.load.decide import LoadState
        from tas_extender.decide.load.hotspot import BindingCounter
        from tas_extender.decide.load.policy import DEFAULT_POLICY, load_policy_file

        policy = load_policy_file(self.policy_file) if self.policy_file else DEFAULT_POLICY
        annotations = load_nodes(self.nodes_file)
        counter = BindingCounter(policy.longest_hot_window)
        recent = read_document(self.bindings_file, "--bindings") if self.bindings_file else {}
        if not isinstance(recent, dict):
            raise ValueError(f"--bindings {self.bindings_file}: expected a mapping node -> list of seconds ago")
        for node, ages in recent.items():
            if not isinstance(ages, list) or not all(isinstance(a, (int, float)) and a >= 0 for a in ages):
                raise ValueError(f"--bindings {self.bindings_file}: {node}: expected a list of seconds ago"
                                 " (numbers >= 0)")
            for age in ages:
                counter.record(str(node), now - age)
        state = LoadState(policy, now, annotations.get, lambda node, window: counter.count(node, window, now))
        return state, list(annotations)


def kube_client(kubeconfig: str | None) -> ApiClient:
    """The API server's client: from a kubeconfig file, else the pod's in-cluster config."""
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


def in_a_pod() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ


def metric_source(name: str | None, metrics_file: str | None, prometheus_url: str,
                  api_client: ApiClient | None, node_addresses: NodeAddresses | None = None) -> MetricSource:
    """--metrics-source (file when only --metrics-file is given, else custom-metrics). Prometheus
    matches a series without a `node` label to a node by `node_addresses` (sources/nodes.py)."""
    name = name or ("file" if metrics_file else "custom-metrics")
    if name == "file":
        if not metrics_file:
            raise UsageError("--metrics-source file needs --metrics-file")
        from tas_extender.sources.textfile import TextfileSource

        return TextfileSource(metrics_file)
    if name == "prometheus":
        from tas_extender.sources.prometheus import PrometheusSource

        return PrometheusSource(prometheus_url, node_addresses=node_addresses)
    if api_client is None:
        raise UsageError("the custom metrics API needs --kubeconfig (or a pod), or give --metrics-file")
    from tas_extender.sources.custom_metrics import CustomMetricsSource

    return CustomMetricsSource(api_client)
