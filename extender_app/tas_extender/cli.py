"""`tas-extender`: serve (cluster or static files), evaluate (offline decisions), crd."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import ssl
import sys
import threading
import time

import yaml

from tas_extender import __version__
from tas_extender.policy import PolicyError, parse_policy

log = logging.getLogger("tas_extender")
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def duration(text: str) -> float:
    """Seconds from a Go-style duration (2s, 1m30s, 500ms) or a plain number of seconds."""
    try:
        value = float(text)
    except ValueError:
        match = _DURATION.match(text.strip())
        if not match or not any(match.groups()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 5s, 1m or 500ms") from None
        h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
        value = h * 3600 + m * 60 + s + ms / 1000
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def load_policy_files(paths: list[str]) -> tuple[list, dict[str, PolicyError]]:
    valid, invalid = [], {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for doc in yaml.safe_load_all(handle):
                if not doc:
                    continue
                try:
                    valid.append(parse_policy(doc))
                except PolicyError as error:
                    name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc, dict) else "?"
                    invalid[f"{path}:{name}"] = error
    return valid, invalid


class _IndentedDumper(yaml.SafeDumper):
    """Indents list items under their key, as yamllint and most Kubernetes manifests do."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
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

    evaluate = sub.add_parser("evaluate", help="print the decisions for policies and metrics as JSON")
    evaluate.add_argument("--policy-file", action="append", required=True)
    evaluate.add_argument("--metrics-file", required=True)
    evaluate.add_argument("--missing-metrics", choices=["fail-open", "fail-closed"], default="fail-open")

    sub.add_parser("crd", help="print the TASPolicy CustomResourceDefinition (YAML)")
    check = sub.add_parser("check-load-policy", help="validate a DynamicSchedulerPolicy file (load-aware mode)")
    check.add_argument("path")
    return parser


def _kube_client(kubeconfig: str | None):
    from kubernetes import config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    from kubernetes import client

    return client.ApiClient()


def _tls_context_hook(args):
    """uvicorn settings for mutual TLS: client certificates required, TLS 1.2 or newer."""
    return {"ssl_certfile": args.cert, "ssl_keyfile": args.key, "ssl_ca_certs": args.cacert,
            "ssl_cert_reqs": ssl.CERT_REQUIRED}


def serve(args) -> int:
    import uvicorn

    from tas_extender.api import create_app
    from tas_extender.cache import MetricCache
    from tas_extender.engine import Engine
    from tas_extender.leader import LeaseElector
    from tas_extender.store import PolicyStore
    from tas_extender.telemetry import Telemetry

    if not args.unsafe and not (args.cert and args.key and args.cacert):
        print("tas-extender: --cert, --key and --cacert are required for mutual TLS "
              "(or --unsafe to serve plain HTTP for testing)", file=sys.stderr)
        return 2
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    use_cluster = bool(args.kubeconfig) or (in_cluster and not (args.policy_file and args.metrics_file))
    api_client = _kube_client(args.kubeconfig) if use_cluster else None

    source_name = args.metrics_source or ("file" if args.metrics_file else "custom-metrics")
    if source_name == "file":
        if not args.metrics_file:
            print("tas-extender: --metrics-source file needs --metrics-file", file=sys.stderr)
            return 2
        from tas_extender.sources.textfile import TextfileSource

        source = TextfileSource(args.metrics_file)
    elif source_name == "prometheus":
        from tas_extender.sources.prometheus import PrometheusSource

        source = PrometheusSource(args.prometheus_url)
    else:
        if api_client is None:
            print("tas-extender: the custom metrics API needs --kubeconfig (or a pod), "
                  "or give --metrics-file", file=sys.stderr)
            return 2
        from tas_extender.sources.custom_metrics import CustomMetricsSource

        source = CustomMetricsSource(api_client)

    max_age = args.metric_max_age or max(3 * args.sync_period, 30.0)
    store, telemetry = PolicyStore(), Telemetry()
    cache = MetricCache(source, max_age)
    engine = Engine(store, cache, fail_closed=args.missing_metrics == "fail-closed")

    load_policy = None
    if args.load_aware:
        from tas_extender.load.policy import DEFAULT_POLICY, load_policy_file

        try:
            load_policy = load_policy_file(args.load_policy) if args.load_policy else DEFAULT_POLICY
        except PolicyError as error:
            print(f"tas-extender: --load-policy: {error}", file=sys.stderr)
            return 2
        if api_client is None:
            print("tas-extender: --load-aware reads node annotations and watches pods: it needs "
                  "--kubeconfig (or a pod)", file=sys.stderr)
            return 2

    controller = elector = load = annotator = None
    if args.policy_file:
        valid, invalid = load_policy_files(args.policy_file)
        for key, error in invalid.items():
            log.error("policy %s is invalid: %s", key, error)
        store.replace_all(valid, invalid)
    if api_client is not None:
        from tas_extender.controller import Controller

        if args.leader_elect:
            identity = f"{socket.gethostname()}-{os.getpid()}"
            elector = LeaseElector(api_client, args.lease_namespace, args.lease_name, identity)
            elector.start()
        controller = Controller(api_client, engine, telemetry,
                                is_leader=(lambda: elector.is_leader) if elector else (lambda: True))
        if load_policy is not None:
            from tas_extender.load.mode import LoadAware

            load = LoadAware(load_policy, controller.annotations)
            if args.load_prometheus_url:
                from tas_extender.load.annotator import Annotator
                from tas_extender.sources.prometheus import PrometheusSource

                annotator = Annotator(load_policy, PrometheusSource(args.load_prometheus_url, metric_prefix=""),
                                      controller.all_annotations, controller.core.patch_node)
        controller.start(policies=not args.policy_file, pods=load)

    def sync_loop() -> None:
        cleaned_up = False
        while True:
            started = time.monotonic()
            try:
                cache.refresh(store.metric_names())
                engine.rebuild()
                if controller is not None and controller.nodes_synced and controller.is_leader():
                    controller.reconcile()
                    if annotator is not None:
                        annotator.sync()
                    elif load_policy is None and not cleaned_up:  # the mode was turned off
                        controller.remove_load_annotations()
                        cleaned_up = True
            except Exception:  # noqa: BLE001 - the loop must survive anything one round throws
                log.exception("sync failed")
            time.sleep(max(0.0, args.sync_period - (time.monotonic() - started)))

    threading.Thread(target=sync_loop, name="sync", daemon=True).start()

    def readiness() -> list[str]:
        waiting = []
        if not store.synced:
            waiting.append("policies not listed yet")
        if not cache.synced and store.metric_names():
            waiting.append(f"metric source {source.name} not synced: {cache.last_error or 'first fetch pending'}")
        if controller is not None and not controller.nodes_synced:
            waiting.append("nodes not listed yet")
        return waiting

    def shutdown() -> None:
        if controller is not None:
            controller.stop.set()
        if elector is not None:
            elector.release()

    app = create_app(engine, telemetry, args.max_body_bytes, readiness, on_shutdown=shutdown,
                     load=load, load_weight=args.load_weight)
    # httptools and uvloop, not uvicorn's pure-Python fallbacks: a third less time per call.
    settings = {"host": args.host, "port": args.port, "log_level": args.log_level,
                "http": "httptools", "loop": "uvloop",
                "access_log": args.log_level == "debug", "timeout_keep_alive": 60}
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
        CertificateReloader(config.ssl, args.cert, args.key, args.cacert).start()
    servers = [uvicorn.Server(config)]
    if args.health_port:
        from tas_extender.api import create_health_app

        servers.append(_quiet_server(uvicorn.Config(
            create_health_app(engine, readiness), host=args.host, port=args.health_port,
            log_level=args.log_level, http="httptools", loop="uvloop", access_log=False)))
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(_serve_together(servers))
    return 0


def _quiet_server(config):
    """A uvicorn server that leaves SIGTERM and SIGINT to the main one, which stops it."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            yield

    return QuietServer(config)


async def _serve_together(servers) -> None:
    """Run the main server and any others until the main one stops (SIGTERM, SIGINT)."""
    main, *others = servers
    tasks = [asyncio.create_task(server.serve()) for server in others]
    try:
        await main.serve()
    finally:
        for server in others:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, getattr(args, "log_level", "info").upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "check-load-policy":
        from tas_extender.load.policy import load_policy_file

        try:
            policy = load_policy_file(args.path)
        except PolicyError as error:
            print(f"tas-extender: {error}", file=sys.stderr)
            return 1
        print(f"{args.path}: valid; filter above {policy.limits}, weights {policy.weights}, hot {policy.hot}")
        return 0
    if args.command == "crd":
        from tas_extender.crd import crd

        sys.stdout.write(yaml.dump(crd(), Dumper=_IndentedDumper, sort_keys=False))
        return 0
    if args.command == "evaluate":
        from tas_extender.evaluate import evaluate
        from tas_extender.metrics import Snapshot
        from tas_extender.sources.textfile import parse

        valid, invalid = load_policy_files(args.policy_file)
        if invalid:
            for key, error in invalid.items():
                print(f"tas-extender: policy {key} is invalid: {error}", file=sys.stderr)
            return 1
        now = time.time()
        with open(args.metrics_file, encoding="utf-8") as handle:
            samples = parse(handle.read(), now)
        snapshot = Snapshot.build(samples, now, float("inf"))
        nodes = sorted(snapshot.nodes)
        doc = evaluate(valid, snapshot, nodes, args.missing_metrics == "fail-closed")
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
