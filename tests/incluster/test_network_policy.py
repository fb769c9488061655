"""The extender's NetworkPolicy where the cluster enforces NetworkPolicies (kube-network-policies
on the real-node cluster): only kube-scheduler, the prometheus role's Prometheus and the admin
host reach its TLS port; no other pod reaches any of its ports.
"""

from __future__ import annotations

import httpx
from kubernetes import client
from kubernetes.stream import stream

from support import real_control_planes, wait_for
from support.incluster import (DEADLINE, EXTENDER_NS, MONITORING_NS, node_ip, place_a_demo_pod_through_the_extender,
                               ready_pods, sleeper_on_every_worker)

# One TCP connection attempt: "open", "timeout" (the SYN dropped) or the error's name.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("open")
except TimeoutError:
    print("timeout")
except OSError as error:
    print(type(error).__name__)
"""


def attempt(api_client, namespace: str, pod: str, address: str, port: int) -> str:
    return stream(client.CoreV1Api(api_client).connect_get_namespaced_pod_exec, pod, namespace,
                  command=["python3", "-c", CONNECT, address, str(port)],
                  stderr=True, stdin=False, stdout=True, tty=False).strip()


def client_pods(api_client, namespace: str) -> list[client.V1Pod]:
    """A pod on every worker, in a namespace of its own, that only sleeps (exec runs the attempts)."""
    core = client.CoreV1Api(api_client)
    sleeper_on_every_worker(api_client, namespace)
    workers = [n for n in core.list_node().items
               if "node-role.kubernetes.io/control-plane" not in (n.metadata.labels or {})]

    def running() -> list[client.V1Pod]:
        pods = ready_pods(core, namespace, "app=client")
        return pods if len(pods) == len(workers) else []

    return wait_for(running, DEADLINE, f"a client pod Running on each of the {len(workers)} workers")


def test_only_the_scheduler_prometheus_and_the_admin_host_reach_the_extender(api_client, namespace):
    core = client.CoreV1Api(api_client)
    policy = client.NetworkingV1Api(api_client).read_namespaced_network_policy("tas-extender", EXTENDER_NS)
    allowed = [peer.ip_block.cidr for rule in policy.spec.ingress for peer in rule._from if peer.ip_block]
    # every control plane's kube-scheduler (static pods on the host network), by its node's address
    assert {f"{node_ip(core, name)}/32" for name in real_control_planes()} <= set(allowed), allowed
    replicas = ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")
    prometheus = ready_pods(core, MONITORING_NS, "app.kubernetes.io/name=tas-prometheus")[0]

    # a pod of another namespace, from every worker (the replicas' own nodes among them), reaches
    # neither port of any replica; the same pods reach Prometheus, which no policy covers
    for pod in client_pods(api_client, namespace):
        for replica in replicas:
            for port in (9001, 9002):
                answer = attempt(api_client, namespace, pod.metadata.name, replica.status.pod_ip, port)
                assert answer == "timeout", (pod.spec.node_name, replica.spec.node_name, port, answer)
        assert attempt(api_client, namespace, pod.metadata.name, prometheus.status.pod_ip, 9090) == "open"

    # the kubelet's probes still pass on the health port: every replica stays Ready
    assert len(ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")) == len(replicas)
    # kube-scheduler still calls the extender for a policy pod; this machine, the admin host the
    # inventory lets in, asks each replica how often (filter_calls)
    place_a_demo_pod_through_the_extender(core, DEADLINE)

    # Prometheus still scrapes every replica on the TLS port: each target scraped again, and up
    def extender_targets() -> dict[str, dict]:
        targets = httpx.get(f"http://{prometheus.status.pod_ip}:9090/api/v1/targets", timeout=10).json()
        return {t["scrapeUrl"]: t for t in targets["data"]["activeTargets"] if t["labels"].get("job") == "tas-extender"}

    first = extender_targets()
    assert len(first) == len(replicas), first
    wait_for(lambda: all(t["lastScrape"] != first.get(url, {}).get("lastScrape") and t["health"] == "up"
                         for url, t in extender_targets().items()), DEADLINE,
             "Prometheus to scrape every replica again, up")
