"""The real-node cluster is a kubeadm cluster whose kubelets run real containers.

Every check reads the cluster's state or asks the pods' own processes; nothing here trusts the
role that built the cluster.
"""

from __future__ import annotations

import uuid

import yaml
from kubernetes import client
from kubernetes.stream import stream

import pytest
from support import EXTENDER_IMAGE, real_cluster, real_control_planes, wait_for
from support.incluster import sleeper_on_every_worker

IMAGE = EXTENDER_IMAGE  # a Python image built from the project's files
DEADLINE = 180
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"

# A process that answers with the pod and node it runs on, and logs each request.
ECHO_SERVER = """
import http.server, os
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("%s on %s\\n" % (os.environ["POD_NAME"], os.environ["NODE_NAME"])).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("", 8080), Echo).serve_forever()
"""
FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip())"


def is_ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def workers(core: client.CoreV1Api) -> list[client.V1Node]:
    return [n for n in core.list_node().items if CONTROL_PLANE_LABEL not in (n.metadata.labels or {})]


def downward_env() -> list[client.V1EnvVar]:
    def field(name: str, path: str) -> client.V1EnvVar:
        return client.V1EnvVar(name=name, value_from=client.V1EnvVarSource(
            field_ref=client.V1ObjectFieldSelector(field_path=path)))

    return [field("POD_NAME", "metadata.name"), field("NODE_NAME", "spec.nodeName")]


def container(name: str, command: list[str], port: int | None = None) -> client.V1Container:
    return client.V1Container(
        name=name,
        image=IMAGE,
        image_pull_policy="Never",
        command=command,
        env=downward_env(),
        ports=[client.V1ContainerPort(container_port=port)] if port else None,
        readiness_probe=client.V1Probe(
            tcp_socket=client.V1TCPSocketAction(port=port), period_seconds=1) if port else None,
    )


def running(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            and all(c.ready for c in p.status.container_statuses or [])]


def exec_in(api_client, namespace: str, pod: str, command: list[str]) -> str:
    return stream(client.CoreV1Api(api_client).connect_get_namespaced_pod_exec, pod, namespace,
                  command=command, stderr=True, stdin=False, stdout=True, tty=False)


def test_nodes_are_the_described_control_planes_and_at_least_three_real_workers(api_client):
    nodes = client.CoreV1Api(api_client).list_node().items
    control_planes = [n.metadata.name for n in nodes if CONTROL_PLANE_LABEL in (n.metadata.labels or {})]
    described = real_cluster()["nodes"]
    assert sorted(control_planes) == sorted(n["name"] for n in described if n["control_plane"])
    assert sorted(n.metadata.name for n in nodes) == sorted(n["name"] for n in described)
    assert len(nodes) - len(control_planes) >= 3, [n.metadata.name for n in nodes]
    for node in nodes:
        info = node.status.node_info
        assert is_ready(node), f"{node.metadata.name} is not Ready"
        assert KWOK_ANNOTATION not in (node.metadata.annotations or {}), node.metadata.name
        assert info.kubelet_version == "v1.36.3", (node.metadata.name, info.kubelet_version)
        assert info.container_runtime_version.startswith("containerd://2."), info.container_runtime_version
    addresses = [a.address for n in nodes for a in n.status.addresses if a.type == "InternalIP"]
    assert len(set(addresses)) == len(nodes), f"nodes share an address: {addresses}"


@pytest.mark.parametrize("name", real_control_planes())
def test_each_control_plane_runs_as_kubeadm_static_pods(api_client, real_cluster_dir, name):
    core = client.CoreV1Api(api_client)
    etc = real_cluster_dir / "nodes" / name / "fs" / "etc-kubernetes"  # its /etc/kubernetes
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
        manifest = yaml.safe_load((etc / "manifests" / f"{component}.yaml").read_text())
        assert manifest["kind"] == "Pod", component
        pod = core.read_namespaced_pod(f"{component}-{name}", "kube-system")
        assert "kubernetes.io/config.mirror" in pod.metadata.annotations, f"{component} is not a static pod"
        assert pod.spec.node_name == name and pod.status.phase == "Running", component
        assert pod.status.container_statuses[0].ready, component
    for path in ("pki/ca.crt", "pki/apiserver.crt", "pki/etcd/ca.crt", "admin.conf",
                 "controller-manager.conf", "scheduler.conf", "kubelet.conf"):
        assert (etc / path).is_file(), f"/etc/kubernetes/{path} missing on {name}"


def test_pods_answer_by_service_name_and_pod_ip_from_other_nodes(api_client, namespace):
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    count = len(workers(core))
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="echo"),
        spec=client.V1DeploymentSpec(
            replicas=count,
            selector=client.V1LabelSelector(match_labels={"app": "echo"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "echo"}),
                spec=client.V1PodSpec(
                    containers=[container("echo", ["python3", "-c", ECHO_SERVER], port=8080)],
                    # one per worker: the spread is what the test is about
                    topology_spread_constraints=[client.V1TopologySpreadConstraint(
                        max_skew=1, topology_key="kubernetes.io/hostname",
                        when_unsatisfiable="DoNotSchedule",
                        label_selector=client.V1LabelSelector(match_labels={"app": "echo"}))],
                ),
            ),
        ),
    ))
    core.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name="echo"),
        spec=client.V1ServiceSpec(selector={"app": "echo"},
                                  ports=[client.V1ServicePort(port=80, target_port=8080)]),
    ))
    sleeper_on_every_worker(api_client, namespace)
    echoes = wait_for(lambda: len(running(core, namespace, "echo")) == count and running(core, namespace, "echo"),
                      DEADLINE, f"{count} echo pods Running and Ready")
    clients = wait_for(lambda: len(running(core, namespace, "client")) == count and running(core, namespace, "client"),
                       DEADLINE, f"a client pod Running on each of the {count} workers")
    assert len({p.spec.node_name for p in echoes}) == count, [p.spec.node_name for p in echoes]

    service_answers = set()
    for pod in clients:
        # every echo pod on another node, straight over the pod network
        for echo in (e for e in echoes if e.spec.node_name != pod.spec.node_name):
            token = uuid.uuid4().hex
            answer = exec_in(api_client, namespace, pod.metadata.name,
                             ["python3", "-c", FETCH, f"http://{echo.status.pod_ip}:8080/{token}"])
            assert answer.strip() == f"{echo.metadata.name} on {echo.spec.node_name}", answer
            # the request reached that pod's own process, which logged it
            wait_for(lambda: token in core.read_namespaced_pod_log(echo.metadata.name, namespace),
                     30, f"{echo.metadata.name}'s log to show the request {token}")
        # and by the Service's DNS name, through CoreDNS and kube-proxy
        for _ in range(3 * count):
            answer = exec_in(api_client, namespace, pod.metadata.name,
                             ["python3", "-c", FETCH, f"http://echo.{namespace}.svc.cluster.local/"])
            service_answers.add(answer.strip())
    assert service_answers <= {f"{e.metadata.name} on {e.spec.node_name}" for e in echoes}, service_answers
    assert len(service_answers) >= 2, f"the Service only ever reached {service_answers}"
