"""`tas-extender`: serve (cluster or static files), evaluate (offline decisions), crd."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from tas_extender import __version__
from tas_extender.duration import parse_duration
from tas_extender.policy import Policy, PolicyError, parse_policy

if TYPE_CHECKING:  # imported where used: `crd` and `evaluate` need neither a server nor the Kubernetes client
    import uvicorn
    from fastapi import FastAPI
    from kubernetes.client import ApiClient

    from tas_extender.audit import PodEvents
    from tas_extender.cache import MetricCache
    from tas_extender.controller import Controller
    from tas_extender.engine import Engine
    from tas_extender.leader import LeaseElector
    from tas_extender.load.annotator import Annotator
    from tas_extender.load.decide import LoadState
    from tas_extender.load.mode import LoadAware
    from tas_extender.load.policy import LoadPolicy
    from tas_extender.sources import MetricSource
    from tas_extender.store import PolicyStore
    from tas_extender.sync import SyncLoop
    from tas_extender.telemetry import Telemetry

log = logging.getLogger("tas_extender")

# Connection caps (uvicorn's limit_concurrency: beyond it, requests are answered 503). The
# scheduler keeps one or two connections per kube-scheduler and the kubelet's probes one each,
# so both sit far above what is used; both together stay under the 1024 open files a process is
# often allowed, so the cap answers 503 before accept() fails and stops the probes too.
MAX_CONNECTIONS = 512
HEALTH_MAX_CONNECTIONS = 64


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


def load_policy_files(paths: list[str]) -> tuple[list[Policy], dict[str, PolicyError]]:
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


class _IndentedDumper(yaml.SafeDumper):
    """Indents list items under their key, as yamllint and most Kubernetes manifests do."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tas-extender", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tas-extender {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the scheduler extender (and the controller with a cluster)")
    serve.add_argument("--kubeConfig", "--kubeconfig", dest="kubeconfig", default=None,
                       help="kubeconfig file; in a pod the in-cluster config is used")
    serve.add_argument("--port", type=int, default=9001)
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--cert", help="server certificate (PEM)")
    serve.add_argument("--key", help="server private key (PEM)")
    serve.add_argument("--cacert", help="CA that signs the clients' certificates (mutual TLS)")
    serve.add_argument("--health-port", type=int, default=0,
                       help="also serve GET /healthz and /readyz, and nothing else, over plain HTTP on "
                            "this port (for the kubelet's probes, which have no client certificate); 0: off")
    serve.add_argument("--unsafe", action="store_true", help="serve plain HTTP without TLS (testing only)")
    serve.add_argument("--syncPeriod", "--sync-period", dest="sync_period", type=duration, default=5.0,
                       help="how often metrics are fetched and labels reconciled (5s)")
    serve.add_argument("--policy-file", action="append", default=[],
                       help="YAML TASPolicy documents instead of the cluster's (repeatable)")
    serve.add_argument("--metrics-file", help="Prometheus text file with node-labelled metrics")
    serve.add_argument("--metrics-source", choices=["custom-metrics", "prometheus", "file"], default=None,
                       help="where metrics come from (custom-metrics, or file with --metrics-file)")
    serve.add_argument("--prometheus-url", default="http://127.0.0.1:9090")
    serve.add_argument("--metric-max-age", type=duration, default=None,
                       help="older values count as missing (default: 3 sync periods, at least 30s)")
    serve.add_argument("--missing-metrics", choices=["fail-open", "fail-closed"], default="fail-open")
    serve.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    serve.add_argument("--header-timeout", type=duration, default=10.0,
                       help="close a connection whose request head is not complete this long after it opened "
                            "(or after the head began, when kept alive): slow clients (10s)")
    serve.add_argument("--body-timeout", type=duration, default=10.0,
                       help="close a connection whose request body is not complete this long after its head (10s)")
    serve.add_argument("--max-connections", type=positive_int, default=MAX_CONNECTIONS,
                       help=f"open connections (or requests in progress) on the extender's port beyond which "
                            f"requests are answered 503 ({MAX_CONNECTIONS}; the health port allows "
                            f"{HEALTH_MAX_CONNECTIONS})")
    serve.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True)
    serve.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "telemetry-aware-scheduling"))
    serve.add_argument("--lease-name", default="tas-extender")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    load = serve.add_argument_group("load-aware mode (crane's Dynamic Scheduler; off unless --load-aware)")
    load.add_argument("--load-aware", action="store_true",
                      help="filter and score every pod (but DaemonSet pods) by node load")
    load.add_argument("--load-policy", default=None,
                      help="DynamicSchedulerPolicy YAML (crane's format); the seed's defaults without it")
    load.add_argument("--load-prometheus-url", default=None,
                      help="Prometheus with the load recording rules: the leader annotates nodes from it")
    load.add_argument("--load-weight", type=float, default=1.0,
                      help="weight of the load score against a TASPolicy's own score (weight 1)")

    evaluate = sub.add_parser("evaluate", help="print the decisions for policies, metrics and node load as JSON")
    evaluate.add_argument("--policy-file", action="append", default=[], help="YAML TASPolicy documents (repeatable)")
    evaluate.add_argument("--metrics-file", default=None, help="Prometheus text file with node-labelled metrics")
    evaluate.add_argument("--missing-metrics", choices=["fail-open", "fail-closed"], default="fail-open")
    offline = evaluate.add_argument_group("load-aware decisions (as serve --load-aware answers them)")
    offline.add_argument("--load-aware", action="store_true", help="also decide by node load")
    offline.add_argument("--load-policy", default=None, help="DynamicSchedulerPolicy YAML; implies --load-aware")
    offline.add_argument("--nodes", default=None,
                         help="the nodes with their load annotations: `kubectl get nodes -o json` (or YAML)")
    offline.add_argument("--bindings", default=None,
                         help="recent bindings: YAML/JSON mapping node -> seconds ago of each pod bound there")
    offline.add_argument("--now", default=None, help="the moment of the decision, such as 2026-11-22T10:00:00Z")
    offline.add_argument("--load-weight", type=float, default=1.0,
                         help="weight of the load score against a TASPolicy's own score (weight 1)")

    explain = sub.add_parser(
        "explain", help="why a pod passes or fails each node and how each node scores, with the metrics behind it",
        description="For every node: filtered or not (and by which rule), the score, and each deciding metric's "
                    "value and age; in load mode the load values and hot value. Against the cluster for "
                    "NAMESPACE/POD, or offline from files (--pod-file). Every node is a candidate here; the "
                    "scheduler sends only those its own filters passed.")
    explain.add_argument("pod", nargs="?", help="NAMESPACE/NAME of a pod in the cluster")
    explain.add_argument("--kubeConfig", "--kubeconfig", dest="kubeconfig", default=None,
                         help="kubeconfig file; in a pod the in-cluster config is used")
    explain.add_argument("--pod-file", default=None, help="offline: the pod as YAML or JSON, instead of NAMESPACE/POD")
    explain.add_argument("--policy-file", action="append", default=[],
                         help="YAML TASPolicy documents instead of the cluster's (repeatable)")
    explain.add_argument("--metrics-file", default=None, help="Prometheus text file with node-labelled metrics")
    explain.add_argument("--metrics-source", choices=["custom-metrics", "prometheus", "file"], default=None,
                         help="where metrics come from, as for serve (custom-metrics, or file with --metrics-file)")
    explain.add_argument("--prometheus-url", default="http://127.0.0.1:9090")
    explain.add_argument("--metric-max-age", type=duration, default=30.0,
                         help="older values count as missing (serve's default: 30s)")
    explain.add_argument("--missing-metrics", choices=["fail-open", "fail-closed"], default="fail-open")
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

    sub.add_parser("crd", help="print the TASPolicy CustomResourceDefinition (YAML)")
    check = sub.add_parser("check-load-policy", help="validate a DynamicSchedulerPolicy file (load-aware mode)")
    check.add_argument("path")
    return parser


class UsageError(Exception):
    """Flags `serve` cannot run with; the message says which and what to give instead."""


@dataclass
class ClusterParts:
    """What runs only against a Kubernetes API server; all None when serving from files."""

    controller: Controller | None = None
    elector: LeaseElector | None = None
    load: LoadAware | None = None
    annotator: Annotator | None = None
    audit_events: PodEvents | None = None  # pod Events of audit-mode policies


def _kube_client(kubeconfig: str | None) -> ApiClient:
    from kubernetes import config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    from kubernetes import client

    return client.ApiClient()


def _cluster_client(args: argparse.Namespace) -> ApiClient | None:
    """The API server's client: with --kubeconfig, or in a pod unless both files are given."""
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    if args.kubeconfig or (in_cluster and not (args.policy_file and args.metrics_file)):
        return _kube_client(args.kubeconfig)
    return None


def _metric_source(args: argparse.Namespace, api_client: ApiClient | None) -> MetricSource:
    source_name = args.metrics_source or ("file" if args.metrics_file else "custom-metrics")
    if source_name == "file":
        if not args.metrics_file:
            raise UsageError("--metrics-source file needs --metrics-file")
        from tas_extender.sources.textfile import TextfileSource

        return TextfileSource(args.metrics_file)
    if source_name == "prometheus":
        from tas_extender.sources.prometheus import PrometheusSource

        return PrometheusSource(args.prometheus_url)
    if api_client is None:
        raise UsageError("the custom metrics API needs --kubeconfig (or a pod), or give --metrics-file")
    from tas_extender.sources.custom_metrics import CustomMetricsSource

    return CustomMetricsSource(api_client)


def _load_policy(args: argparse.Namespace, api_client: ApiClient | None) -> LoadPolicy | None:
    """The DynamicSchedulerPolicy with --load-aware, else None."""
    if not args.load_aware:
        return None
    from tas_extender.load.policy import DEFAULT_POLICY, load_policy_file, policy_warnings

    try:
        policy = load_policy_file(args.load_policy) if args.load_policy else DEFAULT_POLICY
    except PolicyError as error:
        raise UsageError(f"--load-policy: {error}") from None
    for warning in policy_warnings(policy):
        log.warning("--load-policy %s: %s", args.load_policy, warning)
    if api_client is None:
        raise UsageError("--load-aware reads node annotations and watches pods: it needs --kubeconfig (or a pod)")
    return policy


def _start_cluster_parts(args: argparse.Namespace, api_client: ApiClient, engine: Engine, telemetry: Telemetry,
                         load_policy: LoadPolicy | None) -> ClusterParts:
    """Leader election, then the controller's watches, with the load-aware parts it feeds,
    and the thread that records audit-mode policies' pod Events."""
    from kubernetes import client

    from tas_extender.audit import PodEvents
    from tas_extender.controller import Controller
    from tas_extender.leader import LeaseElector

    elector = load = annotator = None
    if args.leader_elect:
        identity = f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaseElector(client.CoordinationV1Api(api_client), args.lease_namespace, args.lease_name, identity)
        elector.start()
    controller = Controller(api_client, engine, telemetry,
                            is_leader=lambda: elector is None or elector.is_leader)
    if load_policy is not None:
        from tas_extender.load.mode import LoadAware

        load = LoadAware(load_policy, controller.annotations)
        if args.load_prometheus_url:
            from tas_extender.load.annotator import Annotator
            from tas_extender.sources.prometheus import PrometheusSource

            source = PrometheusSource(args.load_prometheus_url, metric_prefix="",
                                      node_addresses=controller.node_addresses)
            annotator = Annotator(load_policy, source,
                                  controller.all_annotations, controller.core.patch_node,
                                  hot_value=load.hot_value)
    controller.start(policies=not args.policy_file, pods=load)
    audit_events = PodEvents(controller.core)
    audit_events.start()
    return ClusterParts(controller, elector, load, annotator, audit_events)


def _not_ready(store: PolicyStore, cache: MetricCache, source: MetricSource,
               controller: Controller | None, decided: Callable[[], bool]) -> list[str]:
    """What /readyz waits for; empty when ready."""
    waiting: list[str] = []
    if not store.synced:
        waiting.append("policies not listed yet")
    if not cache.synced and store.metric_names():
        waiting.append(f"metric source {source.name} not synced: {cache.last_error or 'first fetch pending'}")
    elif not decided():
        waiting.append("first sync round since the policies were listed pending (filter answers an Error until then)")
    if controller is not None and not controller.nodes_synced:
        waiting.append("nodes not listed yet")
    return waiting


def _shutdown(sync: SyncLoop, cluster: ClusterParts) -> None:
    """Stop writing to the cluster and give the Lease up, so another replica leads at once."""
    sync.stop()
    if cluster.controller is not None:
        cluster.controller.stop.set()
    if cluster.audit_events is not None:
        cluster.audit_events.stop()
    if cluster.elector is not None:
        cluster.elector.release()


def _tls_context_hook(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn settings for mutual TLS: client certificates required, TLS 1.2 or newer."""
    return {"ssl_certfile": args.cert, "ssl_keyfile": args.key, "ssl_ca_certs": args.cacert,
            "ssl_cert_reqs": ssl.CERT_REQUIRED}


def _server_settings(args: argparse.Namespace, port: int, max_connections: int) -> dict[str, Any]:
    """uvicorn settings of one port: deadlines for slow clients, a connection cap, no WebSocket."""
    from tas_extender.deadlines import with_deadlines

    # httptools (under the deadlines) and uvloop, not uvicorn's pure-Python fallbacks: a third
    # less time per call.
    return {"host": args.host, "port": port, "log_level": args.log_level, "loop": "uvloop", "ws": "none",
            "http": with_deadlines(args.header_timeout, args.body_timeout),
            "limit_concurrency": max_connections, "timeout_keep_alive": 60,
            "proxy_headers": False}  # no proxy in front: mutual TLS ends here


def _run_servers(args: argparse.Namespace, app: FastAPI, health_app: FastAPI | None,
                 telemetry: Telemetry) -> None:
    """The extender's server (mutual TLS unless --unsafe) and the plain-HTTP health one, until
    SIGTERM or SIGINT."""
    import uvicorn

    settings = _server_settings(args, args.port, args.max_connections)
    settings["access_log"] = args.log_level == "debug"
    if args.unsafe:
        log.warning("!!! --unsafe: serving plain HTTP WITHOUT TLS or client authentication; "
                    "any process that reaches port %d can query the extender. Use for tests only. !!!",
                    args.port)
    else:
        settings.update(_tls_context_hook(args))
    config = uvicorn.Config(app, **settings)
    config.load()
    if config.ssl is not None:
        from tas_extender.tls import CertificateReloader

        config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        CertificateReloader(config.ssl, args.cert, args.key, args.cacert, telemetry.certificates).start()
    servers = [uvicorn.Server(config)]
    if health_app is not None:
        servers.append(_quiet_server(uvicorn.Config(
            health_app, **_server_settings(args, args.health_port, HEALTH_MAX_CONNECTIONS), access_log=False)))
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(_serve_together(servers))


def serve(args: argparse.Namespace) -> int:
    """Wire the parts together, as TAS's cmd/main.go does, and serve until stopped."""
    from tas_extender.api import create_app, create_health_app
    from tas_extender.cache import MetricCache
    from tas_extender.engine import Engine
    from tas_extender.store import PolicyStore
    from tas_extender.sync import SyncLoop
    from tas_extender.telemetry import Telemetry

    try:
        if not args.unsafe and not (args.cert and args.key and args.cacert):
            raise UsageError("--cert, --key and --cacert are required for mutual TLS "
                             "(or --unsafe to serve plain HTTP for testing)")
        api_client = _cluster_client(args)
        source = _metric_source(args, api_client)
        load_policy = _load_policy(args, api_client)
    except UsageError as error:
        print(f"tas-extender: {error}", file=sys.stderr)
        return 2
    store, telemetry = PolicyStore(), Telemetry()
    cache = MetricCache(source, args.metric_max_age or max(3 * args.sync_period, 30.0))
    engine = Engine(store, cache, fail_closed=args.missing_metrics == "fail-closed")
    if args.policy_file:
        valid, invalid = load_policy_files(args.policy_file)
        for key, reason in invalid.items():
            log.error("policy %s is invalid: %s", key, reason)
        store.replace_all(valid, invalid)
    cluster = ClusterParts() if api_client is None else _start_cluster_parts(
        args, api_client, engine, telemetry, load_policy)
    if cluster.controller is not None and hasattr(source, "node_addresses"):
        # The Prometheus source matches series without a `node` label to the nodes watched.
        source.node_addresses = cluster.controller.node_addresses
    sync = SyncLoop(store, cache, engine, args.sync_period, cluster.controller, cluster.annotator,
                    load_aware=load_policy is not None)
    sync.start()

    readiness = functools.partial(_not_ready, store, cache, source, cluster.controller, sync.decided)
    app = create_app(engine, telemetry, args.max_body_bytes, readiness,
                     on_shutdown=functools.partial(_shutdown, sync, cluster),
                     load=cluster.load, load_weight=args.load_weight, decided=sync.decided,
                     audit_events=cluster.audit_events)
    _run_servers(args, app, create_health_app(engine, readiness) if args.health_port else None, telemetry)
    return 0


def _quiet_server(config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server that leaves SIGTERM and SIGINT to the main one, which stops it."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietServer(config)


async def _serve_together(servers: list[uvicorn.Server]) -> None:
    """Run the main server and any others until the main one stops (SIGTERM, SIGINT)."""
    main, *others = servers
    tasks = [asyncio.create_task(server.serve()) for server in others]
    try:
        await main.serve()
    finally:
        for server in others:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


def _evaluate(args: argparse.Namespace) -> int:
    """`tas-extender evaluate`: the decisions the extender would make, from files."""
    from tas_extender.evaluate import evaluate
    from tas_extender.metrics import Snapshot
    from tas_extender.sources.textfile import parse

    valid, invalid = load_policy_files(args.policy_file)
    if invalid:
        for key, error in invalid.items():
            print(f"tas-extender: policy {key} is invalid: {error}", file=sys.stderr)
        return 1
    load_aware = args.load_aware or args.load_policy is not None
    if not valid and not load_aware:
        print("tas-extender: evaluate needs --policy-file, --load-aware or --load-policy", file=sys.stderr)
        return 2
    try:
        now = _moment(args.now)
        load, annotated = _offline_load(args, now) if load_aware else (None, [])
    except (OSError, ValueError, PolicyError) as error:
        print(f"tas-extender: {error}", file=sys.stderr)
        return 1
    samples: dict = {}
    if args.metrics_file:
        with open(args.metrics_file, encoding="utf-8") as handle:
            samples = parse(handle.read(), now)
    snapshot = Snapshot.build(samples, now, float("inf"))
    nodes = sorted(set(snapshot.nodes) | set(annotated))
    doc = evaluate(valid, snapshot, nodes, args.missing_metrics == "fail-closed", load, args.load_weight)
    print(json.dumps(doc, indent=2, sort_keys=True))
    return 0


def _moment(text: str | None) -> float:
    if text is None:
        return time.time()
    from tas_extender.load.annotations import parse_timestamp

    try:
        return parse_timestamp(text)
    except ValueError as error:
        raise ValueError(f"--now: {error}") from None


def _read_document(path: str, flag: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        try:
            return yaml.safe_load(handle)
        except yaml.YAMLError as error:
            raise ValueError(f"{flag} {path}: not valid JSON or YAML: {error}") from None


def load_nodes(path: str | None) -> dict[str, dict[str, str]]:
    """Node name -> annotations from `kubectl get nodes -o json` (a NodeList, a list or one Node)."""
    if path is None:
        return {}
    document = _read_document(path, "--nodes")
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


def _offline_load(args: argparse.Namespace, now: float) -> tuple[LoadState, list[str]]:
    """The load inputs `evaluate` decides on, and the nodes the --nodes file names."""
    from tas_extender.load.decide import LoadState
    from tas_extender.load.hotspot import BindingCounter
    from tas_extender.load.policy import DEFAULT_POLICY, load_policy_file

    policy = load_policy_file(args.load_policy) if args.load_policy else DEFAULT_POLICY
    annotations = load_nodes(args.nodes)
    counter = BindingCounter(policy.longest_hot_window)
    recent = _read_document(args.bindings, "--bindings") if args.bindings else {}
    if not isinstance(recent, dict):
        raise ValueError(f"--bindings {args.bindings}: expected a mapping node -> list of seconds ago")
    for node, ages in recent.items():
        if not isinstance(ages, list) or not all(isinstance(a, (int, float)) and a >= 0 for a in ages):
            raise ValueError(f"--bindings {args.bindings}: {node}: expected a list of seconds ago (numbers >= 0)")
        for age in ages:
            counter.record(str(node), now - age)
    state = LoadState(policy, now, annotations.get, lambda node, window: counter.count(node, window, now))
    return state, list(annotations)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, getattr(args, "log_level", "info").upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "check-load-policy":
        from tas_extender.load.policy import describe, load_policy_file, policy_warnings

        try:
            policy = load_policy_file(args.path)
        except PolicyError as error:
            print(f"tas-extender: {error}", file=sys.stderr)
            return 1
        for warning in policy_warnings(policy):
            print(f"tas-extender: warning: {args.path}: {warning}", file=sys.stderr)
        print(f"{args.path}: valid; {describe(policy)}")
        return 0
    if args.command == "crd":
        from tas_extender.crd import crd

        sys.stdout.write(yaml.dump(crd(), Dumper=_IndentedDumper, sort_keys=False))
        return 0
    if args.command == "evaluate":
        return _evaluate(args)
    if args.command == "explain":
        from tas_extender.explain_cli import explain_command

        return explain_command(args)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
