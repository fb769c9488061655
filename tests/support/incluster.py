"""Helpers of the in-cluster checks (tests/incluster): the real-node cluster after
playbooks/site.yml ran on it with the roles' defaults (molecule scenario realnode). Its
namespaces and workers, a node's own directories seen from this machine, Ansible and kubectl
against it, and what the checks ask of the pods it runs: the extender replicas' answers and
counts, the demo's pods, the descheduler's runs."""

from __future__ import annotations

import contextlib
import datetime
import os
import pathlib
import re
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator

import httpx
import yaml
from cryptography import x509
from kubernetes import client

from .cluster import EXTENDER_IMAGE, real_control_planes
from .paths import REAL_CLUSTER_DIR, REPO
from .waits import wait_for

EXTENDER_NS, MONITORING_NS, ADAPTER_NS = "telemetry-aware-scheduling", "monitoring", "custom-metrics"
WORKERS = ["node-1", "node-2", "node-3"]

# Set by molecule's verify, which removes everything right after these tests: a module that
# changed the install's variables then leaves them so, instead of a site.yml run (minutes here)
# that puts the defaults back for nobody. Run by hand, the tests leave the defaults behind.
REMOVAL_FOLLOWS = os.environ.get("TAS_REMOVAL_FOLLOWS") == "1"

# A node's own directories, as realnode.sh bind-mounts them from nodes/<node>/fs/.
NODE_DIRS = {"/etc/kubernetes": "etc-kubernetes", "/etc/tas": "etc-tas",
             "/var/lib/node-exporter": "var-lib-node-exporter", "/var/log/kubernetes": "var-log-kubernetes"}


def node_path(node: str, path: str) -> pathlib.Path:
    """Where a path of one node's own directories (/etc/tas, /tmp ...) is seen from this machine."""
    for root, flat in NODE_DIRS.items():
        if path == root or path.startswith(root + "/"):
            return REAL_CLUSTER_DIR / "nodes" / node / "fs" / flat / path[len(root):].lstrip("/")
    raise ValueError(f"{path} is not in one of a node's own directories {sorted(NODE_DIRS)}")


def run_ansible(program: str, *args: str, succeed: bool = True, inventory: str = "real") -> subprocess.CompletedProcess:
    """Run ansible-playbook or ansible against the real-node cluster's inventory (inventory/real,
    as make demo does, or another under inventory/); its output read as plain text (molecule
    forces colours in its environment). Asserts that it succeeded, unless succeed is False."""
    env = dict(os.environ, KUBECONFIG=str(REAL_CLUSTER_DIR / "kubeconfig"),
               PATH=f"{REAL_CLUSTER_DIR / 'bin'}:{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run([str(pathlib.Path(sys.executable).with_name(program)),
                             "-i", str(REPO / "inventory" / inventory), *args],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if succeed:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result


def kubectl(*args: str) -> None:
    """kubectl against the real-node cluster (apply and delete of a manifest, as a user would)."""
    subprocess.run([str(REAL_CLUSTER_DIR / "bin" / "kubectl"), "--kubeconfig", str(REAL_CLUSTER_DIR / "kubeconfig"),
                    *args], check=True, capture_output=True, text=True)


def ansible_playbook(*args: str, succeed: bool = True, inventory: str = "real") -> subprocess.CompletedProcess:
    """Run a playbook against the real-node cluster, as make demo does."""
    return run_ansible("ansible-playbook", *args, succeed=succeed, inventory=inventory)


DEADLINE = 180


DEMO_NS, DEMO_POLICY = "health-metric-demo", "demo-policy"


def node_ip(core: client.CoreV1Api, name: str) -> str:
    node = core.read_node(name)
    return next(a.address for a in node.status.addresses if a.type == "InternalIP")


def placed_probe(core: client.CoreV1Api) -> str:
    """The node a bare pod (no policy label, so placed by load alone in load-aware mode) is bound to
    in the demo's namespace; the pod is deleted afterwards."""
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(DEMO_NS, client.V1Pod(metadata=client.V1ObjectMeta(name=probe), spec=client.V1PodSpec(
        containers=[client.V1Container(name="app", image="registry.k8s.io/pause:3.10.2")])))
    try:
        return wait_for(lambda: core.read_namespaced_pod(probe, DEMO_NS).spec.node_name, DEADLINE, f"{probe} placed")
    finally:
        core.delete_namespaced_pod(probe, DEMO_NS, grace_period_seconds=0)


def ready_pods(core: client.CoreV1Api, namespace: str, selector: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            and all(c.ready for c in p.status.container_statuses or [])]


def serving_serials(core: client.CoreV1Api) -> set[int]:
    """The serial numbers of the certificates the ready extender replicas serve."""
    serials = set()
    for pod in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender"):
        with socket.create_connection((pod.status.pod_ip, 9001), timeout=10) as raw:
            with client_tls(verify=False).wrap_socket(raw) as tls:
                serials.add(x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number)
    return serials


def wait_until_every_replica_serves(core: client.CoreV1Api, serial: int, deadline: float) -> None:
    """The kubelet writes a Secret's new data into a pod's volume when it next syncs the pod (a
    minute and more after the change); a changed annotation makes it sync now. The pods are not
    restarted: each replica takes the renewed certificate from its volume."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
    for pod in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender"):
        core.patch_namespaced_pod(pod.metadata.name, EXTENDER_NS,
                                  {"metadata": {"annotations": {"tas-test/resync": stamp}}})
    wait_for(lambda: serving_serials(core) == {serial}, deadline,
             "every extender replica to serve the renewed certificate")


def place_a_demo_pod_through_the_extender(core: client.CoreV1Api, deadline: float) -> None:
    """A demo pod is scheduled, and kube-scheduler called the extender's filter for it."""
    before = filter_calls(core, client_tls())
    name = f"probe-{uuid.uuid4().hex[:6]}"
    create_demo_pod(core, name)
    try:
        wait_for(lambda: core.read_namespaced_pod(name, DEMO_NS).spec.node_name, deadline, f"{name} scheduled")
        wait_for(lambda: filter_calls(core, client_tls()) > before, 30, "the scheduler's call to the extender")
    finally:
        core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)


def set_health(node: str, value: int) -> None:
    ansible_playbook("playbooks/set_health.yml", "-e", f"node={node}", "-e", f"value={value}")


# kube-scheduler's client pair on the control plane, without .crt/.key.
SCHEDULER_PAIR = "/etc/tas/pki/kube-scheduler/scheduler-client"


def client_tls(verify: bool = True, pair: str = SCHEDULER_PAIR) -> ssl.SSLContext:
    """The kube-scheduler's client certificate as it is on the control plane now (pair: where
    a release keeps it); the extender is reached by pod IP, so its name is not checked."""
    if verify:
        context = ssl.create_default_context(cafile=str(node_path("control-plane", "/etc/tas/pki/ca.crt")))
        context.check_hostname = False
    else:
        context = ssl.create_default_context()
        context.check_hostname = False  # must go before verify_mode may be CERT_NONE
        context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(node_path("control-plane", f"{pair}.crt")), str(node_path("control-plane", f"{pair}.key")))
    return context


def replica_values(core: client.CoreV1Api, tls: ssl.SSLContext, series: str) -> list[float]:
    """The value of one series on each ready extender replica's own /metrics (0 where it has none)."""
    values = []
    for pod in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender"):
        text = httpx.get(f"https://{pod.status.pod_ip}:9001/metrics", verify=tls, timeout=10).text
        match = re.search(f"^{re.escape(series)} (\\S+)$", text, re.M)
        values.append(float(match.group(1)) if match else 0.0)
    return values


def filter_calls(core: client.CoreV1Api, tls: ssl.SSLContext) -> float:
    """The scheduler's filter calls counted by every extender replica."""
    return sum(replica_values(core, tls, 'tas_extender_request_duration_seconds_count{verb="filter"}'))


def filter_answers(core: client.CoreV1Api, tls: ssl.SSLContext, pod: dict | None = None) -> list[dict[str, str]]:
    """Each ready extender replica's FailedNodes over the workers for a pod's metadata (a demo
    pod's by default), as the scheduler asks."""
    pod = pod or {"name": "probe", "namespace": DEMO_NS, "labels": {"telemetry-policy": DEMO_POLICY}}
    request = {"Pod": {"metadata": pod}, "NodeNames": WORKERS}
    return [httpx.post(f"https://{p.status.pod_ip}:9001/scheduler/filter", json=request,
                       verify=tls, timeout=10).json()["FailedNodes"]
            for p in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")]


def prioritize_answers(core: client.CoreV1Api, tls: ssl.SSLContext) -> list[dict[str, int]]:
    """Each ready extender replica's scores of the workers for a bare pod (no policy label: in
    load-aware mode, scored by load alone), as the scheduler asks."""
    request = {"Pod": {"metadata": {"name": "probe", "namespace": DEMO_NS}}, "NodeNames": WORKERS}
    return [{h["Host"]: h["Score"] for h in httpx.post(f"https://{p.status.pod_ip}:9001/scheduler/prioritize",
                                                       json=request, verify=tls, timeout=10).json()}
            for p in ready_pods(core, EXTENDER_NS, "app.kubernetes.io/name=tas-extender")]


def filter_rejects(core: client.CoreV1Api, tls: ssl.SSLContext, node: str) -> bool:
    """True when every extender replica's filter rejects `node` for a demo pod."""
    answers = filter_answers(core, tls)
    return bool(answers) and all(node in failed for failed in answers)


def demo_pod(name: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"telemetry-policy": DEMO_POLICY, "app": "probe"}),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="app", image="registry.k8s.io/pause:3.10.2", image_pull_policy="IfNotPresent",
            resources=client.V1ResourceRequirements(limits={"telemetry/scheduling": "1"}))]))


def create_demo_pod(core: client.CoreV1Api, name: str) -> None:
    """Create a demo pod. Should the API server refuse, the failure carries what each control
    plane's audit log says of that request (which API server answered, and how): one run saw a
    404 "pods <name> not found" answer a creation, which no other log explained."""
    try:
        core.create_namespaced_pod(DEMO_NS, demo_pod(name))
    except client.ApiException as error:
        audit_id = (error.headers or {}).get("Audit-Id", "")
        raise AssertionError(f"creating pod {DEMO_NS}/{name}: {error.status} {error.reason} {error.body}; "
                             f"audited: {audited(audit_id) or 'nothing'}") from error


def audited(audit_id: str) -> list[str]:
    """The audit log lines of one request (by its Audit-Id), with the control plane that wrote each."""
    found = []
    for node in real_control_planes():
        for path in sorted(node_path(node, "/var/log/kubernetes").glob("audit*.log")):
            found += [f"{node}: {line}" for line in path.read_text().splitlines() if audit_id and audit_id in line]
    return found


def place_demo_pods(core: client.CoreV1Api, names: list[str], waited_for: str) -> dict[str, str]:
    """Create a demo pod per name, wait until every one runs, and say where each landed."""
    for name in names:
        create_demo_pod(core, name)
    wait_for(lambda: all(core.read_namespaced_pod(n, DEMO_NS).status.phase == "Running" for n in names),
             DEADLINE, waited_for)
    return {n: core.read_namespaced_pod(n, DEMO_NS).spec.node_name for n in names}


def active_alerts(core: client.CoreV1Api, name: str) -> list[dict[str, str]]:
    """The labels of each pending or firing alert `name` of the bundled Prometheus: its condition
    holds (firing follows after prometheus_alerts_for)."""
    pod = ready_pods(core, MONITORING_NS, "app.kubernetes.io/name=tas-prometheus")[0]
    alerts = httpx.get(f"http://{pod.status.pod_ip}:9090/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return [alert["labels"] for alert in alerts if alert["labels"]["alertname"] == name]


def demo_deployment(name: str, replicas: int) -> client.V1Deployment:
    """Pods as the demo's: the policy label, the extended resource and the policy's node affinity."""
    affinity = client.V1Affinity(node_affinity=client.V1NodeAffinity(
        required_during_scheduling_ignored_during_execution=client.V1NodeSelector(node_selector_terms=[
            client.V1NodeSelectorTerm(match_expressions=[client.V1NodeSelectorRequirement(
                key=DEMO_POLICY, operator="NotIn", values=["violating"])])])))
    template = demo_pod(name)
    template.metadata.labels = {"telemetry-policy": DEMO_POLICY, "app": name}
    template.spec.affinity = affinity
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(replicas=replicas, selector=client.V1LabelSelector(match_labels={"app": name}),
                                     template=client.V1PodTemplateSpec(metadata=template.metadata, spec=template.spec)))


def cron_job_run_now(batch: client.BatchV1Api, cron_job: str) -> str:
    """A run of a CronJob in kube-system started now, as `kubectl create job --from=cronjob/<name>`
    starts one: a Job from the CronJob's template, owned by it (so that its history limit and the
    uninstall remove it as its own runs). Returns the Job's name."""
    owner_object = batch.read_namespaced_cron_job(cron_job, "kube-system")
    name = f"{cron_job}-now-{uuid.uuid4().hex[:6]}"
    owner = client.V1OwnerReference(api_version="batch/v1", kind="CronJob", name=owner_object.metadata.name,
                                    uid=owner_object.metadata.uid, controller=True)
    labels = (owner_object.spec.job_template.metadata or client.V1ObjectMeta()).labels
    batch.create_namespaced_job("kube-system", client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels=labels,
                                     annotations={"cronjob.kubernetes.io/instantiate": "manual"},
                                     owner_references=[owner]),
        spec=owner_object.spec.job_template.spec))
    return name


def descheduler_run_now(core: client.CoreV1Api, batch: client.BatchV1Api) -> tuple[str, int, str]:
    """One descheduler run started now (cron_job_run_now). Waits until the run's pod has finished;
    its name, its count of evictions and its log. Call it with the schedule paused
    (descheduler_paused), so that no run of the CronJob's own interleaves."""
    name = cron_job_run_now(batch, "tas-descheduler")

    def finished() -> client.V1Pod | None:
        pods = core.list_namespaced_pod("kube-system", label_selector=f"batch.kubernetes.io/job-name={name}").items
        done = [p for p in pods if p.status.phase in ("Succeeded", "Failed")]
        return done[0] if done else None

    pod = wait_for(finished, DEADLINE * 2, f"the descheduler run {name} to finish")
    log = core.read_namespaced_pod_log(pod.metadata.name, "kube-system")
    counted = re.search(r"totalEvicted=(\d+)", log)
    assert pod.status.phase == "Succeeded" and counted, \
        f"{pod.metadata.name} {pod.status.phase}, without its count of evictions:\n{log[-2000:]}"
    return pod.metadata.name, int(counted.group(1)), log


def eviction_lines(log: str) -> list[str]:
    """What a descheduler run logged about evicting, for a failure's message."""
    return [line[-300:] for line in log.splitlines() if re.search(r"[Ee]vict|fit|error|limit", line)][-30:]


def crowd_node_1(core: client.CoreV1Api, apps: client.AppsV1Api, name: str, replicas: int) -> None:
    """A demo Deployment `name` whose replicas all run on node-1: the other workers are cordoned
    while they are placed."""
    for node in ("node-2", "node-3"):
        core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        apps.create_namespaced_deployment(DEMO_NS, demo_deployment(name, replicas))
        wait_for(lambda: len([p for p in on_node_1(core, name) if p.status.phase == "Running"]) == replicas, DEADLINE,
                 f"{replicas} pods of {name} Running on node-1")
    finally:
        for node in ("node-2", "node-3"):
            core.patch_node(node, {"spec": {"unschedulable": False}})


def on_node_1(core: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(DEMO_NS, label_selector=f"app={name}").items
    return [p for p in pods if p.spec.node_name == "node-1" and not p.metadata.deletion_timestamp]


def violating(core: client.CoreV1Api, node: str) -> bool:
    """Whether the extender labels the node violating the demo policy."""
    return (core.read_node(node).metadata.labels or {}).get(DEMO_POLICY) == "violating"


def make_node_1_violate(core: client.CoreV1Api) -> None:
    """node-1 unhealthy, and labelled violating by the extender (what the descheduler acts on)."""
    set_health("node-1", 2)
    wait_for(lambda: violating(core, "node-1"), DEADLINE, "node-1 labelled violating")


def descheduler_policy_caps(core: client.CoreV1Api) -> tuple[int, int, int]:
    policy = core.read_namespaced_config_map("tas-descheduler-policy", "kube-system").data["policy.yaml"]
    policy = yaml.safe_load(policy)
    return (policy["maxNoOfPodsToEvictPerNode"], policy["maxNoOfPodsToEvictPerNamespace"],
            policy["maxNoOfPodsToEvictTotal"])


@contextlib.contextmanager
def descheduler_paused(batch: client.BatchV1Api) -> Iterator[None]:
    """Inside the block the descheduler's CronJob is suspended and no run of it is under way, so
    that no run sees a change half made; resumed after it."""
    def suspend(value: bool) -> None:
        batch.patch_namespaced_cron_job("tas-descheduler", "kube-system", {"spec": {"suspend": value}})

    suspend(True)
    try:
        wait_for(lambda: not descheduler_runs_under_way(batch), DEADLINE, "the descheduler runs under way to finish")
        yield
    finally:
        suspend(False)


def descheduler_runs_under_way(batch: client.BatchV1Api) -> list[str]:
    """The unfinished Jobs of the descheduler's CronJob: its own runs, and those started from it
    (by the extender when a node starts violating, or by a test), which its status does not list."""
    uid = batch.read_namespaced_cron_job("tas-descheduler", "kube-system").metadata.uid
    return [job.metadata.name for job in batch.list_namespaced_job("kube-system").items
            if any(owner.uid == uid for owner in job.metadata.owner_references or [])
            and not any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or [])]


def busiest_run_counts(core: client.CoreV1Api) -> set[float]:
    """The most pods one descheduler run evicted from one node, as each extender replica counts them."""
    return set(replica_values(core, client_tls(), "tas_extender_descheduler_busiest_run_evictions"))


def busiest_run_in_events(core: client.CoreV1Api, window: float = 600) -> int:
    """The same, read here from the Events the API server holds (the last `window` seconds, the
    extender's RUNS_WINDOW_SECONDS): evicted pods' Events by reporting instance (the run's pod)
    and the node their note names."""
    since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=window)
    runs: dict[tuple[str, str], int] = {}
    for event in core.list_event_for_all_namespaces(field_selector="reportingComponent=sigs.k8s.io.descheduler").items:
        where = re.search(r"\bpod eviction from (\S+) node\b", event.message or "")
        when = event.event_time or event.last_timestamp or event.metadata.creation_timestamp
        if event.type == "Normal" and where and event.reporting_instance and when >= since:
            key = (event.reporting_instance, where.group(1))
            runs[key] = runs.get(key, 0) + 1
    return max(runs.values(), default=0)


def sleeper_on_every_worker(api_client, namespace: str) -> None:
    """A DaemonSet `client` (pods labelled app=client, the extender's image, a Python) whose pods
    only sleep, for tests that exec into them."""
    containers = [client.V1Container(name="client", image=EXTENDER_IMAGE, image_pull_policy="Never",
                                     command=["python3", "-c", "import time; time.sleep(86400)"])]
    client.AppsV1Api(api_client).create_namespaced_daemon_set(namespace, client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="client"),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(match_labels={"app": "client"}),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "client"}),
                                              spec=client.V1PodSpec(containers=containers))),
    ))
