"""`tas-extender serve`: the scheduler extender, with the controller when a cluster is reachable.
The flags become one `ServeSettings`; `serve` wires the parts together from it, as TAS's
cmd/main.go does."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import logging
import os
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from tas_extender.cli.common import (
    MISSING_METRICS,
    MissingMetrics,
    UsageError,
    add_log_level,
    duration,
    in_a_pod,
    kube_client,
    load_policy_files,
    metric_source,
    positive_int,
)
from tas_extender.cli.memory import start_releasing
from tas_extender.cluster.advertise import DEFAULT as DEFAULT_RESOURCE
from tas_extender.cluster.advertise import ExtendedResource
from tas_extender.decide.policy import PolicyError

if TYPE_CHECKING:  # imported in `serve`: the other subcommands need neither a server nor the Kubernetes client
    import uvicorn
    from fastapi import FastAPI
    from kubernetes.client import ApiClient

    from tas_extender.certs.expiry import ExpiryEvents
    from tas_extender.certs.tls import PeerCertificates
    from tas_extender.cluster.annotator import Annotator
    from tas_extender.cluster.controller import Controller
    from tas_extender.cluster.descheduler_runs import DeschedulerRuns
    from tas_extender.cluster.leader import LeaseElector
    from tas_extender.cluster.requeue import Requeuer
    from tas_extender.cluster.sync import SyncLoop
    from tas_extender.cluster.watch import NodeCache
    from tas_extender.decide.audit import PodEvents
    from tas_extender.decide.cache import MetricCache
    from tas_extender.decide.engine import Engine
    from tas_extender.decide.load.mode import LoadAware
    from tas_extender.decide.load.policy import LoadPolicy
    from tas_extender.decide.metrics import MetricSource
    from tas_extender.decide.store import PolicyStore
    from tas_extender.decide.telemetry import Telemetry

log = logging.getLogger("tas_extender")

# Connection caps (uvicorn's limit_concurrency: beyond it, requests are answered 503). The
# scheduler keeps one or two connections per kube-scheduler and the kubelet's probes one each,
# so both sit far above what is used; both together stay under the 1024 open files a process is
# often allowed, so the cap answers 503 before accept() fails and stops the probes too.
MAX_CONNECTIONS = 512
HEALTH_MAX_CONNECTIONS = 64


@dataclass(frozen=True)
class ServeSettings:
    """Everything `serve` runs with: one field per flag, named as its `dest`; the defaults are
    the parser's."""

    kubeconfig: str | None
    host: str
    port: int
    cert: str | None
    key: str | None
    cacert: str | None
    health_port: int
    unsafe: bool
    sync_period: float
    policy_files: list[str]
    metrics_file: str | None
    metrics_source: str | None
    prometheus_url: str
    metric_max_age: float | None
    missing_metrics: MissingMetrics
    max_body_bytes: int
    header_timeout: float
    body_timeout: float
    max_connections: int
    leader_elect: bool
    lease_namespace: str
    lease_name: str
    log_level: str
    load_aware: bool
    load_policy: str | None
    load_prometheus_url: str | None
    load_weight: float
    certificate_warning: float
    advertise_resource: ExtendedResource | None
    requeue_on_recovery: bool
    descheduler_cron_job: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeSettings:
        return cls(**{each.name: getattr(args, each.name) for each in fields(cls)})

    @property
    def metric_max_age_or_default(self) -> float:
        """--metric-max-age, else 3 sync periods and at least 30 s."""
        return self.metric_max_age or max(3 * self.sync_period, 30.0)

    def check(self) -> None:
        if not self.unsafe and not (self.cert and self.key and self.cacert):
            raise UsageError("--cert, --key and --cacert are required for mutual TLS "
                             "(or --unsafe to serve plain HTTP for testing)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the scheduler extender (and the controller with a cluster)")
    serve.set_defaults(run=lambda args: serve_until_stopped(ServeSettings.from_args(args)))
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
    serve.add_argument("--policy-file", dest="policy_files", action="append", default=[],
                       help="YAML TASPolicy documents instead of the cluster's (repeatable)")
    serve.add_argument("--metrics-file", help="Prometheus text file with node-labelled metrics")
    serve.add_argument("--metrics-source", choices=["custom-metrics", "prometheus", "file"], default=None,
                       help="where metrics come from (custom-metrics, or file with --metrics-file)")
    serve.add_argument("--prometheus-url", default="http://127.0.0.1:9090")
    serve.add_argument("--metric-max-age", type=duration, default=None,
                       help="older values count as missing (default: 3 sync periods, at least 30s)")
    serve.add_argument("--missing-metrics", choices=MISSING_METRICS, default="fail-open")
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
    add_log_level(serve)
    serve.add_argument("--certificate-warning", type=duration, default=14 * 86400.0,
                       help="record a Warning Event CertificateExpiring this long before the served certificate, "
                            "the CA or a client's certificate expires (336h: 14 days); on the pod (POD_NAME), "
                            "else on the Lease")
    serve.add_argument("--advertise-resource", type=extended_resource, default=DEFAULT_RESOURCE,
                       metavar="NAME=QUANTITY",
                       help=f"the leader gives every node whose status.capacity lacks the extended resource NAME (or "
                            f"holds 0 of it) QUANTITY of it: pods requesting it are the ones the scheduler sends "
                            f"here ({DEFAULT_RESOURCE})")
    serve.add_argument("--no-advertise-resource", dest="advertise_resource", action="store_const", const=None,
                       help="leave the nodes' capacity alone (the resource is advertised by something else)")
    serve.add_argument("--requeue-on-recovery", action=argparse.BooleanOptionalAction, default=True,
                       help="when a node passes a policy's dontschedule rules (or the load limits) again, the "
                            "leader writes the time into its annotation telemetry.intel.com/recovered-at, so that "
                            "kube-scheduler tries the pods waiting for a node again at once rather than within 5 "
                            "minutes (on)")
    serve.add_argument("--descheduler-cron-job", type=cron_job_name, default="", metavar="NAMESPACE/NAME",
                       help="the descheduler's CronJob: when a node starts violating a policy's deschedule rules, "
                            "the leader starts a run of it at once (a Job from its template, at most one at a time, "
                            "runs at least 20 s apart, none while it is suspended), so that evictions follow in "
                            "seconds rather than on its schedule (off: empty)")
    load = serve.add_argument_group("load-aware mode (crane's Dynamic Scheduler; off unless --load-aware)")
    load.add_argument("--load-aware", action="store_true",
                      help="filter and score every pod (but DaemonSet pods) by node load")
    load.add_argument("--load-policy", default=None,
                      help="DynamicSchedulerPolicy YAML (crane's format); the seed's defaults without it")
    load.add_argument("--load-prometheus-url", default=None,
                      help="Prometheus with the load recording rules: the leader annotates nodes from it")
    load.add_argument("--load-weight", type=float, default=1.0,
                      help="weight of the load score against a TASPolicy's own score (weight 1)")


def cron_job_name(text: str) -> str:
    """--descheduler-cron-job's NAMESPACE/NAME, or empty."""
    namespace, slash, name = text.partition("/")
    if text and not (slash and namespace and name and "/" not in name):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME (e.g. kube-system/tas-descheduler)")
    return text


def extended_resource(text: str) -> ExtendedResource:
    """--advertise-resource's NAME=QUANTITY."""
    try:
        return ExtendedResource.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@dataclass
class ClusterParts:
    """What runs only against a Kubernetes API server; all None when serving from files."""

    controller: Controller | None = None
    elector: LeaseElector | None = None
    load: LoadAware | None = None
    annotator: Annotator | None = None
    audit_events: PodEvents | None = None  # pod Events of audit-mode policies
    expiry: ExpiryEvents | None = None  # Warning Events ahead of certificate expiry
    requeuer: Requeuer | None = None  # annotates the nodes that pass again (--requeue-on-recovery)
    descheduler_runs: DeschedulerRuns | None = None  # a run when a node starts violating (--descheduler-cron-job)


def _cluster_client(settings: ServeSettings) -> ApiClient | None:
    """The API server's client: with --kubeconfig, or in a pod unless both files are given."""
    if settings.kubeconfig or (in_a_pod() and not (settings.policy_files and settings.metrics_file)):
        return kube_client(settings.kubeconfig)
    return None


def _load_policy(settings: ServeSettings, api_client: ApiClient | None) -> LoadPolicy | None:
    """The DynamicSchedulerPolicy with --load-aware, else None."""
    if not settings.load_aware:
        return None
    from tas_extender.decide.load.policy import DEFAULT_POLICY, load_policy_file, policy_warnings

    try:
        policy = load_policy_file(settings.load_policy) if settings.load_policy else DEFAULT_POLICY
    except PolicyError as error:
        raise UsageError(f"--load-policy: {error}") from None
    for warning in policy_warnings(policy):
        log.warning("--load-policy %s: %s", settings.load_policy, warning)
    if api_client is None:
        raise UsageError("--load-aware reads node annotations and watches pods: it needs --kubeconfig (or a pod)")
    return policy


def _start_cluster_parts(settings: ServeSettings, api_client: ApiClient, nodes: NodeCache, engine: Engine,
                         telemetry: Telemetry, load_policy: LoadPolicy | None,
                         peers: PeerCertificates | None) -> ClusterParts:
    """Leader election, then the controller's watches, with the load-aware parts it feeds,
    the thread that records audit-mode policies' pod Events and the one that warns of expiring
    certificates."""
    from kubernetes import client

    from tas_extender.cluster.controller import Controller
    from tas_extender.cluster.leader import LeaseElector
    from tas_extender.decide.audit import PodEvents

    elector = load = annotator = None
    if settings.leader_elect:
        identity = f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaseElector(client.CoordinationV1Api(api_client), settings.lease_namespace,
                               settings.lease_name, identity)
        elector.start()
    controller = Controller(api_client, engine, telemetry,
                            is_leader=lambda: elector is None or elector.is_leader, nodes=nodes,
                            advertise=settings.advertise_resource)
    if load_policy is not None:
        from tas_extender.decide.load.mode import LoadAware

        load = LoadAware(load_policy, controller.annotations)
        if settings.load_prometheus_url:
            from tas_extender.cluster.annotator import Annotator
            from tas_extender.sources.prometheus import PrometheusSource

            source = PrometheusSource(settings.load_prometheus_url, metric_prefix="",
                                      node_addresses=controller.node_addresses)
            annotator = Annotator(load_policy, source,
                                  controller.all_annotations, controller.core.patch_node,
                                  hot_value=load.hot_value)
    requeuer = None
    if settings.requeue_on_recovery:
        from tas_extender.cluster.requeue import Requeuer, rejections_of

        requeuer = Requeuer(rejections_of(lambda: engine.view, engine.store.policies, load),
                            controller.core.patch_node, telemetry.requeue_patches)
    descheduler_runs = None
    if settings.descheduler_cron_job:
        from tas_extender.cluster.descheduler_runs import CronJobRuns, DeschedulerRuns, violations

        descheduler_runs = DeschedulerRuns(
            lambda names: violations(engine.view, engine.store.policies(), names),
            CronJobRuns(client.BatchV1Api(api_client), settings.descheduler_cron_job), telemetry.descheduler_runs)
    controller.start(policies=not settings.policy_files, pods=load)
    audit_events = PodEvents(controller.core)
    audit_events.start()
    expiry = None if peers is None else _start_expiry_events(settings, controller, elector, peers)
    return ClusterParts(controller, elector, load, annotator, audit_events, expiry, requeuer, descheduler_runs)


def _start_expiry_events(settings: ServeSettings, controller: Controller, elector: LeaseElector | None,
                         peers: PeerCertificates) -> ExpiryEvents:
    from tas_extender.certs.expiry import EventTarget, ExpiryEvents, lease_target, pod_target, watched

    def target() -> EventTarget:
        return pod_target(os.environ) or lease_target(settings.lease_namespace, settings.lease_name,
                                                      elector.uid if elector is not None else "")

    assert settings.cert and settings.cacert  # ServeSettings.check
    cert, cacert = settings.cert, settings.cacert
    expiry = ExpiryEvents(controller.core, target, settings.certificate_warning,
                          is_leader=lambda: elector is None or elector.is_leader)
    expiry.start(lambda: watched(cert, cacert, peers.current()))
    return expiry


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
    if cluster.expiry is not None:
        cluster.expiry.stop()
    if cluster.elector is not None:
        cluster.elector.release()


def server_settings(settings: ServeSettings, port: int, max_connections: int) -> dict[str, Any]:
    """uvicorn settings of one port: deadlines for slow clients, a connection cap, no WebSocket."""
    from tas_extender.serve.deadlines import with_deadlines

    # httptools (under the deadlines) and uvloop, not uvicorn's pure-Python fallbacks: they take
    # markedly less time per call.
    return {"host": settings.host, "port": port, "log_level": settings.log_level, "loop": "uvloop", "ws": "none",
            "http": with_deadlines(settings.header_timeout, settings.body_timeout),
            "limit_concurrency": max_connections, "timeout_keep_alive": 60,
            "proxy_headers": False}  # no proxy in front: mutual TLS ends here


def _run_servers(settings: ServeSettings, app: FastAPI, health_app: FastAPI | None, telemetry: Telemetry,
                 peers: PeerCertificates | None) -> None:
    """The extender's server (mutual TLS unless --unsafe) and the plain-HTTP health one, until
    SIGTERM or SIGINT."""
    import uvicorn

    options = server_settings(settings, settings.port, settings.max_connections)
    if peers is not None:
        from tas_extender.certs.tls import with_peer_certificates

        options["http"] = with_peer_certificates(options["http"], peers)
    options["access_log"] = settings.log_level == "debug"
    if settings.unsafe:
        log.warning("!!! --unsafe: serving plain HTTP WITHOUT TLS or client authentication; "
                    "any process that reaches port %d can query the extender. Use for tests only. !!!",
                    settings.port)
    else:  # mutual TLS: client certificates required
        options.update({"ssl_certfile": settings.cert, "ssl_keyfile": settings.key,
                        "ssl_ca_certs": settings.cacert, "ssl_cert_reqs": ssl.CERT_REQUIRED})
    config = uvicorn.Config(app, **options)
    config.load()
    if config.ssl is not None:
        from tas_extender.certs.tls import CertificateReloader

        config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        assert settings.cert and settings.key and settings.cacert  # ServeSettings.check
        CertificateReloader(config.ssl, settings.cert, settings.key, settings.cacert, telemetry.certificates).start()
    servers = [uvicorn.Server(config)]
    if health_app is not None:
        servers.append(_quiet_server(uvicorn.Config(
            health_app, **server_settings(settings, settings.health_port, HEALTH_MAX_CONNECTIONS),
            access_log=False)))
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(_serve_together(servers))


def serve_until_stopped(settings: ServeSettings) -> int:
    """Wire the parts together, as TAS's cmd/main.go does, and serve until stopped."""
    from tas_extender.certs.tls import PeerCertificates
    from tas_extender.cluster.sync import SyncLoop
    from tas_extender.decide.cache import MetricCache
    from tas_extender.decide.engine import Engine
    from tas_extender.decide.store import PolicyStore
    from tas_extender.decide.telemetry import Telemetry
    from tas_extender.serve.api import create_app, create_health_app

    try:
        settings.check()
        api_client = _cluster_client(settings)
        # The nodes as the controller's watch sees them: the Prometheus source matches series
        # without a `node` label to them.
        nodes = None
        if api_client is not None:
            from tas_extender.cluster.watch import NodeCache

            nodes = NodeCache()
        source = metric_source(settings.metrics_source, settings.metrics_file, settings.prometheus_url, api_client,
                               node_addresses=None if nodes is None else nodes.node_addresses)
        load_policy = _load_policy(settings, api_client)
    except UsageError as error:
        print(f"tas-extender: {error}", file=sys.stderr)
        return 2
    store, telemetry = PolicyStore(), Telemetry()
    # what each client presents, for the metric and the expiry Events
    peers = None if settings.unsafe else PeerCertificates(telemetry.client_certificates)
    cache = MetricCache(source, settings.metric_max_age_or_default)
    engine = Engine(store, cache, fail_closed=settings.missing_metrics == "fail-closed")
    if settings.policy_files:
        valid, invalid = load_policy_files(settings.policy_files)
        for key, reason in invalid.items():
            log.error("policy %s is invalid: %s", key, reason)
        store.replace_all(valid, invalid)
    cluster = ClusterParts() if api_client is None or nodes is None else _start_cluster_parts(
        settings, api_client, nodes, engine, telemetry, load_policy, peers)
    sync = SyncLoop(store, cache, engine, settings.sync_period, cluster.controller, cluster.annotator,
                    load_aware=load_policy is not None, requeuer=cluster.requeuer,
                    descheduler_runs=cluster.descheduler_runs)
    sync.start()
    # for the process's life: glibc keeps what the client's lists freed otherwise
    start_releasing()

    readiness = functools.partial(_not_ready, store, cache, source, cluster.controller, sync.decided)
    app = create_app(engine, telemetry, settings.max_body_bytes, readiness,
                     on_shutdown=functools.partial(_shutdown, sync, cluster),
                     load=cluster.load, load_weight=settings.load_weight, decided=sync.decided,
                     audit_events=cluster.audit_events)
    health_app = create_health_app(engine, readiness) if settings.health_port else None
    _run_servers(settings, app, health_app, telemetry, peers)
    return 0


def _quiet_server(config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server that leaves SIGTERM and SIGINT to the main one, which stops it."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietServer(config)


def _freeze_start_up_heap() -> None:
    """Leave the objects made while starting (modules, the app, the first policies) out of every
    later garbage collection. A full collection walks every tracked object with the GIL held: in a
    large cluster that stalled calls now and then, and found nothing to collect.
    Frozen objects are still freed when their last reference goes; only cycles among them stay."""
    gc.collect()
    gc.freeze()


async def _serve_together(servers: list[uvicorn.Server]) -> None:
    """Run the main server and any others until the main one stops (SIGTERM, SIGINT)."""
    main, *others = servers
    _freeze_start_up_heap()
    tasks = [asyncio.create_task(server.serve()) for server in others]
    try:
        await main.serve()
    finally:
        for server in others:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
