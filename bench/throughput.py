"""Scheduling throughput on the local cluster: pods bound per second, with and without the extender.

kube-scheduler is reconfigured for each mode (no extender; extender with NodeNames; extender
with full Node objects; each with the default adaptive percentageOfNodesToScore and with 100;
and the floors, extenders that decide nothing, with NodeNames: the Go one of bench/floor_extender
and the two Python ones of bench/floor_python) and restarted
under supervisord; then a Deployment of N pods is created and the time until every pod has a
node is measured from the API server's watch. With --rounds N the floor and tas-extender's
NodeNames mode run N times each, alternating (each round in a rotated order), so that all of them
see the same machine; each run starts once the cluster is quiet again.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import httpx
import yaml
from kubernetes import client, config, watch

from bench.latency import cpu_seconds

CLUSTER_DIR = pathlib.Path.home() / ".local" / "state" / "tas-local-cluster"
NAMESPACE = "tas-bench"


@dataclass
class Mode:
    name: str
    extender: bool
    node_cache_capable: bool
    percentage_of_nodes_to_score: int | None
    floor: str = ""  # the floor the scheduler calls instead of tas-extender: go, uvicorn or protocol


MODES = [
    Mode("no-extender", False, True, None),
    Mode("floor-node-names", True, True, None, floor="go"),
    Mode("uvicorn-floor-node-names", True, True, None, floor="uvicorn"),
    Mode("protocol-floor-node-names", True, True, None, floor="protocol"),
    Mode("node-names", True, True, None),
    Mode("full-nodes", True, False, None),
    Mode("no-extender-pct100", False, True, 100),
    Mode("node-names-pct100", True, True, 100),
    Mode("full-nodes-pct100", True, False, 100),
]


# A run starts once the cluster is about as quiet as with no pods at all (settle), or after the timeout.
SETTLE_MARGIN = 0.15  # cores
SETTLE_WINDOW = 2.0
SETTLE_TIMEOUT = 120.0

# Run --rounds times, alternating, in this order; every other mode runs once.
PAIRED = ("floor-node-names", "uvicorn-floor-node-names", "protocol-floor-node-names", "node-names")


@dataclass
class Result:
    mode: str
    round: int
    pods: int
    nodes: int
    seconds: float
    pods_per_second: float
    extender_cpu_seconds: float | None = None  # the extender's CPU while the pods were bound (--pid)
    settle_seconds: float = 0.0  # waited before the run for the cluster to be quiet (settle)


def scheduler_config(mode: Mode, extender_url: str, tls: dict[str, str]) -> dict:
    """`extender_url`: tas-extender's, or the floor's for a floor mode."""
    cfg: dict = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(CLUSTER_DIR / "scheduler.kubeconfig"),
            # Raised so that binding, not the API client, is never the limit.
            "qps": 5000,
            "burst": 10000,
        },
        "leaderElection": {"leaderElect": False},
    }
    if mode.percentage_of_nodes_to_score is not None:
        cfg["percentageOfNodesToScore"] = mode.percentage_of_nodes_to_score
    if mode.extender:
        cfg["extenders"] = [
            {
                "urlPrefix": extender_url,
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "enableHTTPS": extender_url.startswith("https"),
                "tlsConfig": tls,
                "nodeCacheCapable": mode.node_cache_capable,
                "httpTimeout": "30s",
                "managedResources": [{"name": "telemetry/scheduling", "ignoredByScheduler": True}],
                "ignorable": False,
            }
        ]
    return cfg


def restart_scheduler(supervisorctl: str) -> None:
    conf = str(CLUSTER_DIR / "supervisord.conf")
    subprocess.run([supervisorctl, "-c", conf, "restart", "kube-scheduler"], check=True,
                   stdout=subprocess.DEVNULL)


class Probe(Protocol):
    """Measurements taken right around the binding window (bench.profile's)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class CpuProbe:
    """The CPU time a process spent between start() and stop(), from /proc; then `probe`'s own."""

    def __init__(self, pid: int | None, probe: Probe | None):
        self.pid, self.probe = pid, probe
        self.seconds: float | None = None
        self._start = 0.0

    def start(self) -> None:
        if self.probe is not None:
            self.probe.start()
        if self.pid is not None:
            self._start = cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.pid is not None:
            self.seconds = round(cpu_seconds(self.pid) - self._start, 2)
        if self.probe is not None:
            self.probe.stop()


def cluster_pids(supervisorctl: str) -> dict[str, int]:
    """The local cluster's processes under supervisord: name -> pid."""
    status = subprocess.run([supervisorctl, "-c", str(CLUSTER_DIR / "supervisord.conf"), "status"],
                            capture_output=True, text=True, check=False).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+RUNNING\s+pid (\d+)", status, re.M)}


def cluster_cores(supervisorctl: str) -> float:
    """Cores the cluster's processes used together over the next SETTLE_WINDOW seconds."""
    pids = cluster_pids(supervisorctl).values()
    before = sum(_cpu_or_zero(pid) for pid in pids)
    time.sleep(SETTLE_WINDOW)
    return (sum(_cpu_or_zero(pid) for pid in pids) - before) / SETTLE_WINDOW


def settle(supervisorctl: str, idle: float) -> float:
    """Wait until the cluster's processes use no more than `idle` cores (theirs with no pods to
    place: the fake nodes' heartbeats alone keep kube-apiserver busy) plus SETTLE_MARGIN, at most
    SETTLE_TIMEOUT seconds; the seconds waited. The pods of the last run are gone from the API
    when `measure` returns, but their deletion (events, garbage collection, KWOK) goes on for a
    while, and would fall into the next run."""
    start = time.monotonic()
    while time.monotonic() - start < SETTLE_TIMEOUT and cluster_cores(supervisorctl) > idle + SETTLE_MARGIN:
        pass
    return round(time.monotonic() - start, 1)


def _cpu_or_zero(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except FileNotFoundError:  # restarted meanwhile
        return 0.0


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll `condition` until truthy, else TimeoutError. Not tests.support.wait_for: that one fails
    through pytest.fail, an exception meant for pytest's runner, not for a benchmark's caller."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - keep polling until the deadline
            pass
        time.sleep(0.5)
    raise TimeoutError(what)


def deployment(pods: int, with_extender: bool) -> client.V1Deployment:
    labels = {"app": "bench"}
    resources = None
    if with_extender:
        labels["telemetry-policy"] = "demo-policy"  # the policy bench.latency writes
        resources = client.V1ResourceRequirements(
            limits={"telemetry/scheduling": "1"}, requests={"telemetry/scheduling": "1"}
        )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name="bench"),
        spec=client.V1DeploymentSpec(
            replicas=pods,
            selector=client.V1LabelSelector(match_labels={"app": "bench"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="app", image="registry.example/bench:1",
                                                   resources=resources)]
                ),
            ),
        ),
    )


def measure(api: client.ApiClient, mode: Mode, pods: int, probe: Probe | None = None) -> float:
    """Create the Deployment and return seconds until every pod is bound to a node.

    `probe.start()` and `probe.stop()`, when given, run right around that window (bench.profile).
    """
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    bound: set[str] = set()
    if probe is not None:
        probe.start()
    start = time.monotonic()
    apps.create_namespaced_deployment(NAMESPACE, deployment(pods, mode.extender))
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, NAMESPACE, label_selector="app=bench",
                          timeout_seconds=1800):
        pod = event["object"]
        if pod.spec.node_name:
            bound.add(pod.metadata.name)
        if len(bound) >= pods:
            w.stop()
    elapsed = time.monotonic() - start
    if probe is not None:
        probe.stop()
    apps.delete_namespaced_deployment("bench", NAMESPACE)
    wait_until(lambda: not core.list_namespaced_pod(NAMESPACE, label_selector="app=bench").items,
               600, "bench pods deleted")
    return elapsed


def plan(modes: list[Mode], rounds: int) -> list[tuple[Mode, int]]:
    """(mode, round) in the order they run: the paired modes `rounds` times, where the first of
    them stands, each round in another order (round r starts r - 1 places further on), so that
    no mode always runs first or last in its round; the others once."""
    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1 (got {rounds})")
    paired = [m for m in modes if m.name in PAIRED]
    order: list[tuple[Mode, int]] = []
    for mode in modes:
        if mode not in paired:
            order.append((mode, 1))
        elif mode is paired[0]:
            for r in range(1, rounds + 1):
                turn = (r - 1) % len(paired)
                order += [(m, r) for m in paired[turn:] + paired[:turn]]
    return order


def filter_calls(url_prefix: str, tls: dict[str, str]) -> float:
    """Filter calls the extender at `url_prefix` has answered, from its /metrics (tas-extender's
    request histogram, the floor's counter)."""
    context = ssl.create_default_context(cafile=tls["caFile"])
    context.load_cert_chain(tls["certFile"], tls["keyFile"])
    base = url_prefix.removesuffix("/scheduler")
    with httpx.Client(verify=context, timeout=10) as http:
        text = http.get(f"{base}/metrics").raise_for_status().text
    found = re.search(r'^\w+(?:_count|_total)\{verb="filter"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def ensure_namespace(api: client.ApiClient) -> None:
    """The namespace, with no bench pods left in it: a run cut off keeps its Deployment in the
    cluster's state, and the next run's watch would count those pods, bound already, as its own."""
    core = client.CoreV1Api(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    except client.ApiException as error:
        if error.status != 409:
            raise
    try:
        client.AppsV1Api(api).delete_namespaced_deployment("bench", NAMESPACE)
    except client.ApiException as error:
        if error.status != 404:
            raise
    wait_until(lambda: not core.list_namespaced_pod(NAMESPACE, label_selector="app=bench").items,
               600, "bench pods left by an earlier run deleted")


def main(argv: list[str] | None = None, probe: Probe | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--modes", default=",".join(m.name for m in MODES))
    parser.add_argument("--extender-url", default="https://127.0.0.1:9001/scheduler")
    parser.add_argument("--floor-url", action="append", default=[], metavar="FLOOR=URL",
                        help="a floor's URL prefix, for its mode: go=... (bench.floor), uvicorn=... and "
                        "protocol=... (bench.floor_python); repeat for each")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each of the paired modes, alternating")
    parser.add_argument("--pid", action="append", default=[], metavar="NAME=PID",
                        help="the process of tas-extender (tas=PID) or of a floor (go=, uvicorn=, protocol=), "
                        "whose CPU time is recorded for its runs; repeat for each")
    parser.add_argument("--tls-cert", default="")
    parser.add_argument("--tls-key", default="")
    parser.add_argument("--tls-ca", default="")
    parser.add_argument("--supervisorctl", default="supervisorctl")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)

    api = config.new_client_from_config(config_file=str(CLUSTER_DIR / "kubeconfig"))
    nodes = len(client.CoreV1Api(api).list_node(label_selector="type=kwok").items)
    tls = {"certFile": args.tls_cert, "keyFile": args.tls_key, "caFile": args.tls_ca}
    config_path = CLUSTER_DIR / "kube-scheduler" / "config.yaml"
    original = config_path.read_text()
    modes = plan([m for m in MODES if m.name in args.modes.split(",")], args.rounds)
    floors = dict(item.split("=", 1) for item in args.floor_url if "=" in item)
    pids = {name: int(pid) for name, pid in (item.split("=", 1) for item in args.pid)}
    missing = sorted({m.floor for m, _ in modes if m.floor and m.floor not in floors})
    if missing:
        parser.error("--floor-url " + ", ".join(f"{floor}=URL" for floor in missing) + " is required for the modes "
                     + ", ".join(m.name for m in MODES if m.floor in missing))
    # The extender reads its policy from a file; the cluster only needs the namespace.
    ensure_namespace(api)
    results = []
    # The cluster's own load with no pods to place, before the first run: the least of three windows.
    idle = min(cluster_cores(args.supervisorctl) for _ in range(3))
    print(f"the cluster at rest: {idle:.2f} cores", flush=True)
    try:
        for mode, run in modes:
            url = floors[mode.floor] if mode.floor else args.extender_url
            config_path.write_text(yaml.safe_dump(scheduler_config(mode, url, tls)))
            restart_scheduler(args.supervisorctl)
            wait_until(lambda: subprocess.run(
                ["curl", "-skf", "https://127.0.0.1:10259/healthz"], capture_output=True
            ).returncode == 0, 60, "kube-scheduler healthy")
            # A run counts only if the scheduler asked the extender about every pod: once, right
            # after a restart, a run bound every pod faster than with no extender at all.
            waited = settle(args.supervisorctl, idle)
            cpu = CpuProbe(pids.get(mode.floor or "tas") if mode.extender else None, probe)
            for _attempt in (1, 2):
                calls = filter_calls(url, tls) if mode.extender else 0.0
                seconds = measure(api, mode, args.pods, cpu)
                if not mode.extender or filter_calls(url, tls) - calls >= args.pods:
                    break
                print(f"{mode.name} round {run}: the extender was not asked about every pod; run again", flush=True)
            else:
                raise RuntimeError(f"{mode.name}: kube-scheduler did not call the extender for every pod, twice")
            results.append(Result(mode.name, run, args.pods, nodes, round(seconds, 2),
                                  round(args.pods / seconds, 1), cpu.seconds, waited))
            print(json.dumps(asdict(results[-1])), flush=True)
    finally:
        config_path.write_text(original)
        restart_scheduler(args.supervisorctl)
    args.out.write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
