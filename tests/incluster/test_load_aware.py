"""Load-aware mode on the real-node cluster, both ways a user turns it on; one module, so that
the defaults come back once, after both (a site.yml run with a full rollout is minutes here).

With the roles' defaults (`site.yml -e tas_load_aware=true` and nothing else but where the load
comes from): crane's annotations on every worker, a new pod on the idle node, and pods moved off a
hot node by the descheduler's LowNodeUtilization, one a run, their replacements placed by load.

Coming from crane with its monitoring unchanged: a crane user's Prometheus is there first
(crane-monitoring.yaml): node-exporter scraped by address, so every series is keyed by
`instance="<node IP>:9100"` and has no `node` label, and crane's recording rules exactly as crane's
README gives them (tests/fixtures/crane/rules.yaml). Then site.yml turns load-aware scheduling on
against that Prometheus, as docs/extender.md's "Keeping your Prometheus" says:
`extender_load_prometheus_url` pointing at it, crane's policy file unchanged as
`extender_load_policy`, and the prometheus role's own load rules off (the user's are there). The
extender matches each series to its node by address, every worker gets crane's annotations, a new
pod goes to the idle node, and nothing of the user's changes.

This module runs after every other (conftest.py's LAST). At its end site.yml with the defaults
turns load-aware mode off again and the annotations go (`defaults_afterwards`), unless the removal
follows (molecule's verify): the uninstall then takes load-aware mode out as it is, annotations and
all. Turning it off is also shown on the KWOK cluster (tests/reliability/test_load_aware.py).

Simulated load, named as such: the real nodes share this machine's CPUs, so node-exporter's CPU
counters are the same on every node. With the defaults each node's textfile collector reports
`simulated_cpu_usage_percent` (and memory alike) instead, and the prometheus role's load rules read
it (`prometheus_load_rules_*_expr`, as the KWOK inventory sets them); everything after the rules
(annotator, filter, scores, the descheduler's query and its evictions) is what runs with real load.
Coming from crane, the kernel's CPU and memory figures the user's node-exporter reads
(KernelFigures) are simulated, for the same reason.
"""

from __future__ import annotations

import datetime
import json
import shutil
import threading
import time
import uuid

import httpx
import pytest
import yaml
from kubernetes import client

from support import REPO, wait_for, write_simulated_loads
from support.incluster import (DEADLINE, DEMO_NS, REMOVAL_FOLLOWS, WORKERS, ansible_playbook, client_tls, crowd_node_1,
                               descheduler_paused, descheduler_run_now, eviction_lines, kubectl, node_path,
                               placed_probe, prioritize_answers, ready_pods)

LOAD = {"node-1": 95, "node-2": 50, "node-3": 10}  # percent busy, CPU and memory alike: hot, between the marks, idle
# coming from crane: each node at least 5 points off LOAD, node-2 under crane's 65 % filter
THEIR_LOAD = {"node-1": 80, "node-2": 60, "node-3": 3}
SIMULATED = ["-e", json.dumps({f"prometheus_load_rules_{kind}_expr": f"max by (instance, node) (simulated_{kind}_usage_percent)"
                               for kind in ("cpu", "mem")})]
MANAGED_KEY = "telemetry.intel.com/load-annotations"
THEIR_NS = "platform-monitoring"
THEIR_PODS = "app.kubernetes.io/name=their-prometheus"  # their Prometheus's pods
THEIR_PROMETHEUS = f"http://prometheus.{THEIR_NS}.svc:9090"
MANIFEST = REPO / "tests" / "incluster" / "crane-monitoring.yaml"
CRANE = REPO / "tests" / "fixtures" / "crane"
TEXTFILE = "/var/lib/node-exporter/their-textfile"
MEMORY = 8 * 2**30  # bytes each simulated node has
ANNOTATED = ("cpu_usage_avg_5m", "mem_usage_avg_5m")  # what crane's rules give within minutes of a start


class KernelFigures(threading.Thread):
    """What node-exporter's cpu and meminfo collectors would read from /proc on each worker at its
    simulated load, written into the user's node-exporter's textfile directory four times a
    second: the CPU's idle counter rises at the node's idle fraction, available memory is the
    node's free fraction. crane's rules compute the usage from them as from a kernel's."""

    def __init__(self, loads: dict[str, int]):
        super().__init__(name="kernel-figures", daemon=True)
        self.loads, self.stopped, self.began = loads, threading.Event(), time.monotonic()

    def write(self) -> None:
        elapsed = time.monotonic() - self.began
        for node, busy in self.loads.items():
            directory = node_path(node, TEXTFILE)
            temporary = directory / "kernel.tmp"  # not *.prom: the collector reads only those
            temporary.write_text(
                "# TYPE node_cpu_seconds_total counter\n"
                f'node_cpu_seconds_total{{cpu="0",mode="idle"}} {1000 + elapsed * (100 - busy) / 100:.3f}\n'
                f"node_memory_MemTotal_bytes {MEMORY}\n"
                f"node_memory_MemAvailable_bytes {MEMORY * (100 - busy) // 100}\n")
            temporary.replace(directory / "kernel.prom")

    def run(self) -> None:
        while not self.stopped.wait(0.25):
            self.write()


def addresses(core: client.CoreV1Api) -> dict[str, str]:
    """Worker -> its InternalIP."""
    return {n: next(a.address for a in core.read_node(n).status.addresses if a.type == "InternalIP") for n in WORKERS}


def their_configuration(core: client.CoreV1Api) -> dict[str, str]:
    """The user's prometheus.yml (node-exporter scraped by address every 15 s, as crane's README
    asks: under 30 s) and crane's rules, unchanged."""
    config = {"global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
              "rule_files": ["/etc/prometheus/crane-rules.yaml"],
              "scrape_configs": [{"job_name": "node-exporter", "static_configs": [
                  {"targets": [f"{ip}:9100" for ip in addresses(core).values()]}]}]}
    return {"prometheus.yml": yaml.safe_dump(config), "crane-rules.yaml": (CRANE / "rules.yaml").read_text()}


def their_values(core: client.CoreV1Api, record: str) -> dict[str, float]:
    """instance -> value of one of crane's records, asked of the user's Prometheus."""
    pod = ready_pods(core, THEIR_NS, THEIR_PODS)[0]
    body = httpx.get(f"http://{pod.status.pod_ip}:9090/api/v1/query", params={"query": record}, timeout=10).json()
    return {s["metric"].get("instance", ""): float(s["value"][1]) for s in body["data"]["result"]}


def theirs(api_client) -> dict[str, object]:
    """What belongs to the user: the Prometheus configuration and rules, the workloads' specs and
    generations, the Service's spec."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    spec = api_client.sanitize_for_serialization
    daemonset = apps.read_namespaced_daemon_set("node-exporter", THEIR_NS)
    deployment = apps.read_namespaced_deployment("prometheus", THEIR_NS)
    return {"config": core.read_namespaced_config_map("prometheus", THEIR_NS).data,
            "daemonset": (daemonset.metadata.generation, spec(daemonset.spec)),
            "deployment": (deployment.metadata.generation, spec(deployment.spec)),
            "service": spec(core.read_namespaced_service("prometheus", THEIR_NS).spec)}


def annotations(core: client.CoreV1Api) -> dict[str, dict[str, str]]:
    return {n: core.read_node(n).metadata.annotations or {} for n in WORKERS}


def crane_fraction(annotation: str) -> float:
    """The value of crane's "<fraction>,<time>Z"."""
    return float(annotation.split(",")[0])


def write_loads(loads: dict[str, int] | None) -> None:
    write_simulated_loads({node: node_path(node, "/var/lib/node-exporter") for node in WORKERS}, loads)


@pytest.fixture(scope="module", autouse=True)
def defaults_afterwards(api_client):
    """site.yml with the defaults once every test here has run, load-aware mode off again; not
    when the removal follows."""
    yield
    if REMOVAL_FOLLOWS:
        return
    ansible_playbook("playbooks/site.yml")
    core = client.CoreV1Api(api_client)
    wait_for(lambda: not any(MANAGED_KEY in a or "cpu_usage_avg_5m" in a for a in annotations(core).values()),
             DEADLINE, "the load annotations taken off the nodes")


@pytest.fixture(scope="module", autouse=True)
def their_monitoring(api_client):
    """The crane user's monitoring, started with the module so that their Prometheus has recorded
    crane's rules by the time the migration's tests ask for it (it runs beside ours meanwhile, as
    it would on their cluster); removed at the end, before the defaults come back."""
    core = client.CoreV1Api(api_client)
    for node in WORKERS:
        node_path(node, TEXTFILE).mkdir(exist_ok=True)
    figures = KernelFigures(THEIR_LOAD)
    figures.write()
    figures.start()
    try:
        kubectl("apply", "-f", str(MANIFEST))
        core.create_namespaced_config_map(THEIR_NS, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="prometheus"), data=their_configuration(core)))
        yield
    finally:
        figures.stopped.set()
        kubectl("delete", "--wait", "--ignore-not-found", "-f", str(MANIFEST))
        for node in WORKERS:
            shutil.rmtree(node_path(node, TEXTFILE), ignore_errors=True)


def test_pods_move_off_a_hot_node_one_a_run_and_go_where_the_load_is_low(api_client):
    core, apps, batch = client.CoreV1Api(api_client), client.AppsV1Api(api_client), client.BatchV1Api(api_client)
    name = f"busy-{uuid.uuid4().hex[:6]}"
    # placed while load-aware mode is off, all on node-1 (the others cordoned meanwhile)
    crowd_node_1(core, apps, name, 4)
    try:
        # the load written first, so that the annotator's first sync (when the new extender
        # leads) finds it in the rolled Prometheus rather than waiting a sync period (3 min)
        write_loads(LOAD)
        ansible_playbook("playbooks/site.yml", "-e", "tas_load_aware=true", *SIMULATED)
        # the descheduler runs when the test starts it: a pod moved before the extender knows the
        # load could be placed anywhere
        with descheduler_paused(batch):
            # the leader annotates each worker in crane's format: "<fraction>,<UTC time>Z"
            wait_for(lambda: all((a := annotations(core)[n]).get("cpu_usage_avg_5m", "").startswith(f"{LOAD[n] / 100:.5f},")
                                 and MANAGED_KEY in a for n in WORKERS), DEADLINE * 2, "crane's load annotations on every worker")

            # a new pod goes to the idle node
            assert placed_probe(core) == "node-3"
            resumed = datetime.datetime.now(datetime.UTC)

            # node-1 above the high mark (65 %), node-3 below the low one (30 %): a run moves one
            # pod off node-1 (the crowd's or the demo's), though more could go: LowNodeUtilization
            # cannot tell how much of a Prometheus figure one pod makes, so it moves one per hot
            # node and run. The extender places its replacement off node-1. A run may find no
            # figure yet (the descheduler reads Prometheus itself): runs until one moves a pod.
            counts = []
            for _ in range(5):
                _, evicted, log = descheduler_run_now(core, batch)
                counts.append(evicted)
                if evicted:
                    break
            assert counts[-1] == 1 and not any(counts[:-1]), (counts, eviction_lines(log))

        def replacements() -> list[client.V1Pod]:
            pods = core.list_namespaced_pod(DEMO_NS).items
            return [p for p in pods if p.metadata.creation_timestamp > resumed and not p.metadata.deletion_timestamp]

        wait_for(lambda: replacements() and all(p.spec.node_name for p in replacements()), DEADLINE,
                 "the replacement placed")
        placed = {p.metadata.name: p.spec.node_name for p in replacements()}
        assert "node-1" not in placed.values(), placed
    finally:
        apps.delete_namespaced_deployment(name, DEMO_NS)
        write_loads(None)


@pytest.fixture(scope="module")
def migrated(api_client):
    """site.yml against the user's monitoring, after the test above, so the load comes from their
    Prometheus instead of ours: their loads differ from ours, so that no annotation left from the
    test above passes for theirs. What is theirs, as it was before site.yml."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    wait_for(lambda: apps.read_namespaced_daemon_set("node-exporter", THEIR_NS).status.number_ready == len(WORKERS)
             and ready_pods(core, THEIR_NS, THEIR_PODS), DEADLINE,
             "the user's node-exporters and Prometheus ready")
    # crane's 1-minute group first evaluates when its 30-second group has two scrapes to rate
    want = {f"{ip}:9100" for ip in addresses(core).values()}
    wait_for(lambda: all(set(their_values(core, record)) == want for record in ANNOTATED), DEADLINE,
             f"the user's Prometheus recording {ANNOTATED} for every worker, keyed by address")
    before = theirs(api_client)
    # crane's policy file as docs/extender.md says to pass it: read and parsed by Ansible
    policy = "{{ lookup('ansible.builtin.file', '%s') | from_yaml }}" % (CRANE / "policy.yaml")
    ansible_playbook("playbooks/site.yml", "-e", json.dumps({
        "tas_load_aware": True, "extender_load_prometheus_url": THEIR_PROMETHEUS, "extender_load_policy": policy,
        "prometheus_load_rules": False, "descheduler_rebalance_by_load": False}))
    return before


def test_every_worker_gets_crane_annotations_from_series_keyed_by_address(api_client, migrated):
    core = client.CoreV1Api(api_client)

    def annotated() -> bool:
        now = annotations(core)
        return all(MANAGED_KEY in now[n] and all(abs(crane_fraction(now[n].get(key, "-1,")) - THEIR_LOAD[n] / 100) < 0.05
                                                 for key in ANNOTATED) for n in WORKERS)
    wait_for(annotated, DEADLINE * 2, f"crane's annotations {ANNOTATED} on every worker, near its load")


def test_a_new_pod_goes_to_the_idle_node(api_client, migrated):
    core = client.CoreV1Api(api_client)
    wait_for(lambda: all(MANAGED_KEY in a for a in annotations(core).values()), DEADLINE * 2, "every worker annotated")

    # crane takes 10 points off a node per hot point (pods bound there in the last minutes): right
    # after site.yml the idle node has taken most of the new pods, and with a hot point or two its
    # lead over node-2 is small enough for kube-scheduler's own scores to undo. A new pod goes
    # to the idle node once that burst has passed: node-3 (97) a full 4 above node-2 (40).
    last: list[list[dict[str, int]]] = [[]]

    def settled() -> bool:
        last[0] = answers = prioritize_answers(core, client_tls())
        return bool(answers) and all(a["node-3"] - a["node-2"] >= 4 for a in answers)

    def seen() -> str:
        loads = {n: {k: v for k, v in a.items() if k.startswith(("cpu_", "mem_", "node_hot"))}
                 for n, a in annotations(core).items()}
        return (f"every extender replica scoring node-3 4 above node-2 (no hot point left); "
                f"last scores {last[0]}, annotations {loads}")
    wait_for(settled, DEADLINE * 2, seen)
    assert placed_probe(core) == "node-3"


def test_nothing_of_the_users_monitoring_changed(api_client, migrated):
    assert theirs(api_client) == migrated
    # and their Prometheus still records crane's rules, and only those
    core = client.CoreV1Api(api_client)
    pod = ready_pods(core, THEIR_NS, THEIR_PODS)[0]
    groups = httpx.get(f"http://{pod.status.pod_ip}:9090/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert sorted(r["name"] for g in groups for r in g["rules"]) == sorted(
        r["record"] for g in yaml.safe_load((CRANE / "rules.yaml").read_text())["groups"] for r in g["rules"])
