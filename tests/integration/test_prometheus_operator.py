"""A cluster whose monitoring prometheus-operator runs (kube-prometheus-stack and the like).

Where the operator's ServiceMonitor and PrometheusRule CRDs are served, the prometheus role gives
the operator's Prometheus what the collection's own Prometheus is given: the node-exporter and
extender scrape jobs (every series labelled with its node's name) and the load rules and alerts.
Here the real operator (v0.85.0, built from its module, with the CRDs its module ships) runs on
the machine against the KWOK cluster's API server, with a `Prometheus` object selecting
`release: platform`, as kube-prometheus-stack's selects its release. The role runs with
`prometheus_deploy_mode: none` (no Prometheus of the collection's), and what the operator makes
of the objects is read back: the Prometheus configuration it generates and the rule files it
mounts, which promtool must accept. The Prometheus pods themselves are KWOK's (not run).
"""

from __future__ import annotations

import base64
import datetime
import gzip
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.rest import ApiException

from support import DEFAULT_CLUSTER_DIR, REPO, free_port, wait_for

BIN = pathlib.Path(sys.executable).parent
CLUSTER_BIN = DEFAULT_CLUSTER_DIR / "bin"
PKI = DEFAULT_CLUSTER_DIR / "pki"
CRDS = f"{CLUSTER_BIN / 'prometheus-operator-crds'}/"  # a link to a directory: kubectl needs the slash
MONITORING = "monitoring"  # prometheus_namespace and tas_node_exporter_namespace, the defaults
PLATFORM = "platform-monitoring"  # where the platform team's Prometheus object lives
SELECTED = {"release": "platform"}
DEADLINE = 60
CRD_NAMES = ["servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"]
GROUP, VERSION = "monitoring.coreos.com", "v1"


def run_role(tmp_path: pathlib.Path, **values) -> subprocess.CompletedProcess:
    """The prometheus role on this machine (local connection), against the KWOK cluster."""
    inventory = {"all": {"children": {"tas_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "roles": ["intel.tas.prometheus"]}]))
    settings = {"prometheus_deploy_mode": "none", "prometheus_operator_labels": SELECTED,
                "tas_load_aware": True, "prometheus_grafana_namespace": "none", **values}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "K8S_AUTH_KUBECONFIG": str(DEFAULT_CLUSTER_DIR / "kubeconfig"), "KUBECONFIG": str(DEFAULT_CLUSTER_DIR / "kubeconfig")}
    run = subprocess.run([BIN / "ansible-playbook", "-i", tmp_path / "inventory.yml", tmp_path / "play.yml",
                          "--extra-vars", json.dumps(settings)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return run


def kubectl(*args: str) -> None:
    run = subprocess.run([CLUSTER_BIN / "kubectl", "--kubeconfig", DEFAULT_CLUSTER_DIR / "kubeconfig", *args],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"kubectl {' '.join(args)}: {run.stderr[-2000:]}"


def ours(custom: client.CustomObjectsApi, plural: str) -> list[str]:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, MONITORING, plural)["items"]
    return sorted(item["metadata"]["name"] for item in items)


def client_pair() -> dict[str, str]:
    """A client pair and its CA, as the certificates role stores them for Prometheus."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "prometheus")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .sign(key, hashes.SHA256()))
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    return {"tls.crt": pem, "ca.crt": pem,
            "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode()}


def generated_configuration(core: client.CoreV1Api) -> dict:
    secret = core.read_namespaced_secret("prometheus-platform", PLATFORM)
    return yaml.safe_load(gzip.decompress(base64.b64decode(secret.data["prometheus.yaml.gz"])))


def scrape_job(core: client.CoreV1Api, name: str) -> dict | None:
    jobs = generated_configuration(core).get("scrape_configs") or []
    return next((job for job in jobs if job["job_name"] == f"serviceMonitor/{MONITORING}/{name}/0"), None)


def mounted_rules(core: client.CoreV1Api) -> str | None:
    try:
        data = core.read_namespaced_config_map("prometheus-platform-rulefiles-0", PLATFORM).data or {}
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return next((text for key, text in data.items() if key.startswith(f"{MONITORING}-tas-extender-")), None)


@pytest.fixture(scope="module")
def crds_absent(api_client):
    """The KWOK cluster as it is: no prometheus-operator CRDs (one a run cut off left is removed)."""
    extensions = client.ApiextensionsV1Api(api_client)
    for name in CRD_NAMES:
        try:
            extensions.delete_custom_resource_definition(name)
        except ApiException as error:
            if error.status != 404:
                raise
    wait_for(lambda: all(not extensions.list_custom_resource_definition(field_selector=f"metadata.name={n}").items
                         for n in CRD_NAMES), DEADLINE, "the operator's CRDs gone")
    return api_client


def test_without_the_operators_crds_the_role_makes_none_of_its_objects(crds_absent, tmp_path):
    run_role(tmp_path)
    core = client.CoreV1Api(crds_absent)
    services = core.list_service_for_all_namespaces(field_selector="metadata.name=tas-node-exporter").items
    assert not services, [f"{s.metadata.namespace}/{s.metadata.name}" for s in services]


@pytest.fixture(scope="module")
def operator(crds_absent, tmp_path_factory):
    """The operator's CRDs applied, the operator running, a Prometheus object of the platform
    team's selecting `release: platform`, and the Secret the certificates role would store."""
    api = crds_absent
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    log_dir = tmp_path_factory.mktemp("operator")
    kubectl("apply", "--server-side", "-f", CRDS)
    extensions = client.ApiextensionsV1Api(api)

    def established(name: str) -> bool:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    for name in [*CRD_NAMES, "prometheuses.monitoring.coreos.com"]:
        wait_for(lambda name=name: established(name), DEADLINE, f"the CRD {name} established")
    created = []
    for namespace in (MONITORING, PLATFORM):
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
            created.append(namespace)
        except ApiException as error:
            if error.status != 409:
                raise
    core.create_namespaced_secret(MONITORING, client.V1Secret(
        metadata=client.V1ObjectMeta(name="tas-prometheus-client"), type="kubernetes.io/tls",
        string_data=client_pair()))
    port = free_port()
    with (log_dir / "operator.log").open("w") as log:
        process = subprocess.Popen(
            [CLUSTER_BIN / "prometheus-operator", "--apiserver=https://127.0.0.1:6443",
             f"--ca-file={PKI / 'ca.crt'}", f"--cert-file={PKI / 'admin.crt'}", f"--key-file={PKI / 'admin.key'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT)
    custom.create_namespaced_custom_object(GROUP, VERSION, PLATFORM, "prometheuses", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Prometheus", "metadata": {"name": "platform"},
        "spec": {"replicas": 1, "serviceMonitorSelector": {"matchLabels": SELECTED},
                 "serviceMonitorNamespaceSelector": {}, "ruleSelector": {"matchLabels": SELECTED},
                 "ruleNamespaceSelector": {}}})
    try:
        yield api, log_dir / "operator.log"
    finally:
        process.terminate()
        process.wait(timeout=30)
        core.delete_namespaced_secret("tas-prometheus-client", MONITORING)
        for namespace in created:
            core.delete_namespace(namespace)
        kubectl("delete", "--ignore-not-found", "--wait=true", "-f", CRDS)


@pytest.fixture(scope="module")
def installed(operator, tmp_path_factory):
    api, log = operator
    run_role(tmp_path_factory.mktemp("installed"))
    return api, log


def test_the_role_makes_servicemonitors_a_service_and_a_prometheusrule(installed):
    api, _ = installed
    custom = client.CustomObjectsApi(api)
    assert ours(custom, "servicemonitors") == ["tas-extender", "tas-node-exporter"]
    assert ours(custom, "prometheusrules") == ["tas-extender"]
    service = client.CoreV1Api(api).read_namespaced_service("tas-node-exporter", MONITORING)
    assert service.spec.cluster_ip == "None" and service.spec.selector == {"app.kubernetes.io/name": "tas-node-exporter"}


def test_the_operator_turns_them_into_scrape_jobs_that_label_each_series_with_its_node(installed):
    api, log = installed
    core = client.CoreV1Api(api)
    job = wait_for(lambda: scrape_job(core, "tas-node-exporter"), DEADLINE,
                   lambda: f"the operator's node-exporter job; its log: {log.read_text()[-3000:]}")
    # The operator writes `node` itself only for endpoints that are Nodes (kubelets); ours comes
    # last, so a pod's series carries the name of the node it runs on.
    last = [rule for rule in job["relabel_configs"] if rule.get("target_label") == "node"][-1]
    assert last["source_labels"] == ["__meta_kubernetes_pod_node_name"], job["relabel_configs"]
    assert last.get("action", "replace") == "replace", last
    assert [sd["namespaces"]["names"] for sd in job["kubernetes_sd_configs"]] == [[MONITORING]]

    extender = wait_for(lambda: scrape_job(core, "tas-extender"), DEADLINE, "the operator's extender job")
    assert extender["scheme"] == "https"
    tls = extender["tls_config"]
    assert tls["server_name"] == "tas-extender.telemetry-aware-scheduling.svc"
    assert {"ca_file", "cert_file", "key_file"} <= tls.keys(), tls
    assert [sd["namespaces"]["names"] for sd in extender["kubernetes_sd_configs"]] == [["telemetry-aware-scheduling"]]


def test_the_rules_reach_the_operators_prometheus_and_promtool_accepts_them(installed, tmp_path):
    api, log = installed
    text = wait_for(lambda: mounted_rules(client.CoreV1Api(api)), DEADLINE,
                    lambda: f"our rule file among the operator's; its log: {log.read_text()[-3000:]}")
    rules = [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]
    assert {"cpu_usage_avg_5m", "mem_usage_max_avg_1d"} <= {rule.get("record") for rule in rules}
    assert {"TASExtenderDown", "TASCertificateExpiring"} <= {rule.get("alert") for rule in rules}
    (tmp_path / "rules.yaml").write_text(text)
    check = subprocess.run(["promtool", "check", "rules", tmp_path / "rules.yaml"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_second_run_changes_nothing(installed, tmp_path):
    recap = [line for line in run_role(tmp_path).stdout.splitlines() if line.startswith("localhost ")][-1]
    assert "changed=0" in recap, recap


def test_objects_turned_off_are_taken_away_and_removal_leaves_none(installed, tmp_path):
    api, _ = installed
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    run_role(tmp_path, prometheus_scrape_extender=False, prometheus_alerts=False, tas_load_aware=False)
    assert ours(custom, "servicemonitors") == ["tas-node-exporter"]
    assert ours(custom, "prometheusrules") == []

    run_role(tmp_path, tas_state="absent")
    assert ours(custom, "servicemonitors") == []
    assert not core.list_namespaced_service(MONITORING, field_selector="metadata.name=tas-node-exporter").items
    wait_for(lambda: scrape_job(core, "tas-node-exporter") is None, DEADLINE,
             "the operator's node-exporter job gone")
