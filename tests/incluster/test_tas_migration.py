"""Coming from Intel TAS with its monitoring unchanged, on the real-node cluster.

A TAS user's metrics pipeline is there first (tas-monitoring.yaml, from TAS's Helm charts and
docs): node-exporter reading a textfile directory on each node, a Prometheus that finds the nodes
through the API (so `instance` is the node's name), and the custom metrics adapter with TAS's
rules, whose `node_.*` rule serves node_health_metric as node metric health_metric, behind its
own APIService. Our adapter is removed first: a TAS user has only theirs. Then site.yml, as
docs/extender.md's "Coming from TAS" says: prometheus_adapter_deploy_mode existing, pointed at
their adapter, with prometheus_adapter_existing_rules false (their rule already serves the
metric). TAS's own policy file is applied unchanged, health values are written into their
textfiles the way TAS's set-health.sh writes them, and the demo's decisions follow: filtered,
labelled violating, placed on the healthy node. Nothing of the user's changes, and no pod of
theirs is replaced. Afterwards their pipeline goes and ours comes back, for the modules after.
"""

from __future__ import annotations

import datetime
import json
import shutil
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from support import REPO, served_health, wait_for
from support.incluster import (DEADLINE, DEMO_NS, DEMO_POLICY, WORKERS, ansible_playbook, client_tls, filter_answers,
                               kubectl, node_path, place_demo_pods, violating)

MANIFEST = REPO / "tests" / "incluster" / "tas-monitoring.yaml"
POLICY = REPO / "tests" / "fixtures" / "tas" / "health-policy.yaml"
ADAPTER = "tests/incluster/adapter.yml"
TEXTFILE = "/var/lib/node-exporter/tas-node-metrics"  # their chart's /tmp/node-metrics, per node here
ADAPTER_NS, ADAPTER_NAME = "custom-metrics", "custom-metrics-apiserver"
# What a TAS user sets, as docs/extender.md gives it.
TAS_USER = {"prometheus_adapter_deploy_mode": "existing",
            "prometheus_adapter_existing_namespace": ADAPTER_NS,
            "prometheus_adapter_existing_configmap": "adapter-config",
            "prometheus_adapter_existing_deployment": ADAPTER_NAME,
            "prometheus_adapter_existing_rules": False}
THEIR_PODS = {("kube-system", "k8s-app=node-exporter"), ("monitoring", "app=prometheus-server"),
              (ADAPTER_NS, "app=custom-metrics-apiserver")}


def set_their_health(node: str, value: int) -> None:
    """The line TAS's set-health.sh writes (`echo 'node_health_metric ' "$2"`), into the node's
    textfile of their node-exporter; replaced whole, so no scrape reads half a file."""
    directory = node_path(node, TEXTFILE)
    (directory / "text.tmp").write_text(f"node_health_metric  {value}\n")
    (directory / "text.tmp").replace(directory / "text.prom")


def serving_secret() -> client.V1Secret:
    """The adapter's serving pair, self-signed for its Service's name, as TAS's docs make it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{ADAPTER_NAME}.{ADAPTER_NS}.svc")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName(f"{ADAPTER_NAME}.{ADAPTER_NS}.svc")]),
                                  critical=False)
                   .sign(key, hashes.SHA256()))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return client.V1Secret(metadata=client.V1ObjectMeta(name="cm-adapter-serving-certs"), type="kubernetes.io/tls",
                           string_data={"tls.crt": certificate.public_bytes(serialization.Encoding.PEM).decode(),
                                        "tls.key": pem.decode()})


def theirs(api_client) -> dict[str, object]:
    """What belongs to the user: the Prometheus and adapter configurations, the workloads' specs
    and generations, the Services' and the APIService's specs."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    spec = api_client.sanitize_for_serialization
    daemonset = apps.read_namespaced_daemon_set("node-exporter", "kube-system")
    workloads = {name: apps.read_namespaced_deployment(name, ns)
                 for ns, name in (("monitoring", "prometheus-deployment"), (ADAPTER_NS, ADAPTER_NAME))}
    return {"configs": [core.read_namespaced_config_map(name, ns).data
                        for ns, name in (("monitoring", "prometheus-server-conf"), (ADAPTER_NS, "adapter-config"))],
            "daemonset": (daemonset.metadata.generation, spec(daemonset.spec)),
            "deployments": {n: (d.metadata.generation, spec(d.spec)) for n, d in workloads.items()},
            "services": [spec(core.read_namespaced_service(name, ns).spec) for ns, name in (
                ("monitoring", "prom-service"), ("monitoring", "prometheus-service"), (ADAPTER_NS, ADAPTER_NAME))],
            "apiservice": spec(client.ApiregistrationV1Api(api_client)
                               .read_api_service("v1beta1.custom.metrics.k8s.io").spec)}


def their_pods(core: client.CoreV1Api) -> set[str]:
    """The uids of the user's monitoring pods: the same set means none was replaced."""
    return {p.metadata.uid for ns, selector in THEIR_PODS
            for p in core.list_namespaced_pod(ns, label_selector=selector).items if not p.metadata.deletion_timestamp}


def demo_policy(api_client) -> dict:
    return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "telemetry.intel.com", "v1alpha1", DEMO_NS, "taspolicies", DEMO_POLICY)


def all_ready(core: client.CoreV1Api) -> bool:
    pods = [p for ns, selector in THEIR_PODS for p in core.list_namespaced_pod(ns, label_selector=selector).items]
    return len(pods) == len(WORKERS) + 2 and all(
        p.status.phase == "Running" and all(c.ready for c in p.status.container_statuses or []) for p in pods)


@pytest.fixture(scope="module")
def migrated(api_client):
    """Their pipeline in place of ours, then site.yml over it; afterwards theirs removed and ours
    back, every worker's health 0 again."""
    core = client.CoreV1Api(api_client)
    for node in WORKERS:
        node_path(node, TEXTFILE).mkdir(exist_ok=True)
        set_their_health(node, 0)
    ansible_playbook(ADAPTER, "-e", "tas_state=absent")
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ADAPTER_NS)))
        core.create_namespaced_secret(ADAPTER_NS, serving_secret())
        kubectl("apply", "-f", str(MANIFEST))
        wait_for(lambda: all_ready(core), DEADLINE, "the user's node-exporters, Prometheus and adapter running")
        wait_for(lambda: set(served_health(api_client)) >= set(WORKERS), DEADLINE,
                 "their adapter serving every worker's health_metric")
        before, pods = theirs(api_client), their_pods(core)
        # site.yml's adapter role alone (its tag): it is the one that reads these variables, and
        # the rest of the stack is installed already (a second site.yml run changes nothing)
        ansible_playbook("playbooks/site.yml", "--tags", "prometheus_adapter", "-e", json.dumps(TAS_USER))
        # the policy a TAS user has, from TAS's own file, over the demo's (the same policy)
        generation = demo_policy(api_client)["metadata"]["generation"]
        kubectl("apply", "-f", str(POLICY))
        yield before, pods, generation
    finally:
        kubectl("delete", "--wait", "--ignore-not-found", "-f", str(MANIFEST))
        ansible_playbook(ADAPTER)
        for node in WORKERS:
            shutil.rmtree(node_path(node, TEXTFILE), ignore_errors=True)
    wait_for(lambda: set(served_health(api_client)) >= set(WORKERS), DEADLINE, "our adapter serving every worker again")
    wait_for(lambda: not any(violating(core, n) for n in WORKERS), DEADLINE, "no worker labelled violating")


def test_tas_policy_file_is_accepted_unchanged_and_is_the_demo_policy(api_client, migrated):
    policy = demo_policy(api_client)
    assert policy["metadata"]["generation"] == migrated[2]  # applying TAS's file changed no field
    assert {(c["type"], c["status"]) for c in policy["status"]["conditions"]} >= {("Valid", "True")}


def test_the_demo_decisions_follow_health_written_as_tas_writes_it(api_client, migrated):
    core = client.CoreV1Api(api_client)
    assert client.ApiregistrationV1Api(api_client).read_api_service(
        "v1beta1.custom.metrics.k8s.io").spec.service.name == ADAPTER_NAME  # theirs serves the metric
    names = [f"tas-user-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    set_their_health("node-2", 1)
    set_their_health("node-3", 2)
    try:
        wait_for(lambda: served_health(api_client) == {"node-1": "0", "node-2": "1", "node-3": "2"}, DEADLINE,
                 "their adapter serving the health just written")

        def filtered() -> bool:
            answers = filter_answers(core, client_tls())
            return bool(answers) and all(set(failed) == {"node-2", "node-3"} for failed in answers)
        wait_for(filtered, DEADLINE, "every extender replica's filter rejecting node-2 and node-3")
        wait_for(lambda: violating(core, "node-3"), DEADLINE, f"node-3 labelled {DEMO_POLICY}=violating")
        assert not violating(core, "node-2")
        placed = place_demo_pods(core, names, "the TAS user's pods running")
        assert set(placed.values()) == {"node-1"}, placed
    finally:
        for name in names:
            try:
                core.delete_namespaced_pod(name, DEMO_NS, grace_period_seconds=0)
            except client.ApiException as error:
                if error.status != 404:
                    raise
        for node in WORKERS:
            set_their_health(node, 0)
    wait_for(lambda: not violating(core, "node-3"), DEADLINE, "node-3's violating label lifted")


def test_nothing_of_the_users_monitoring_changed_and_no_pod_of_theirs_was_replaced(api_client, migrated):
    before, pods, _ = migrated
    assert theirs(api_client) == before
    assert their_pods(client.CoreV1Api(api_client)) == pods
