"""The control plane: Prometheus targets, certificates, the scheduler's extender config."""

from __future__ import annotations

import base64
import json

import yaml

testinfra_hosts = ["ansible://control_plane"]


def test_prometheus_scrapes_every_node_with_its_node_label(host, var):
    body = host.run(f"curl -sf 'http://{var('prometheus_listen_address', '127.0.0.1:9090')}/api/v1/targets?state=active'")
    assert body.rc == 0
    targets = [t for t in json.loads(body.stdout)["data"]["activeTargets"] if t["labels"]["job"] == "tas-node-exporter"]
    assert sorted(t["labels"]["node"] for t in targets) == ["node-1", "node-2", "node-3"]
    assert {t["health"] for t in targets} == {"up"}


def test_private_keys_are_readable_by_their_owner_only(host, var):
    directory = var("certificates_dir")
    for name in ("ca", "extender", "kube-scheduler/scheduler-client", "prometheus-client", "prometheus-adapter"):
        key = host.file(f"{directory}/{name}.key")
        assert key.exists and key.mode == 0o600, f"{name}.key has mode {oct(key.mode)}"
    assert host.file(var("extender_kubeconfig_path")).mode == 0o600


def test_scheduler_config_registers_the_extender(host, var):
    config = yaml.safe_load(host.file(var("scheduler_config_path")).content_string)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["clientConnection"]["kubeconfig"], "existing settings were kept"
    (extender,) = [e for e in config["extenders"] if e["urlPrefix"] == var("scheduler_config_extender_url")]
    assert extender["filterVerb"] == "filter" and extender["prioritizeVerb"] == "prioritize"
    assert extender["nodeCacheCapable"] is True and extender["enableHTTPS"] is True
    assert extender["managedResources"] == [{"name": "telemetry/scheduling", "ignoredByScheduler": True}]
    assert set(extender["tlsConfig"]) == {"certFile", "keyFile", "caFile"}


def test_extender_answers_only_with_a_client_certificate(host, var):
    url = "https://127.0.0.1:9001/readyz"
    with_cert = host.run(f"curl -sf --cacert {var('extender_cacert')} --cert {var('extender_probe_cert')} "
                         f"--key {var('extender_probe_key')} {url}")
    assert with_cert.rc == 0 and json.loads(with_cert.stdout)["status"] == "ready"
    without = host.run(f"curl -sf --cacert {var('extender_cacert')} {url}")
    assert without.rc != 0


def test_the_extender_s_prometheus_source_reads_every_node(var):
    from tas_extender.sources.prometheus import PrometheusSource

    url = f"http://{var('prometheus_listen_address', '127.0.0.1:9090')}"
    samples = PrometheusSource(url).fetch({"health_metric"})
    assert sorted(samples["health_metric"]) == ["node-1", "node-2", "node-3"]


def test_the_api_server_checks_the_adapter_by_our_ca(host, var):
    """The custom metrics APIService trusts the certificates role's CA (no insecureSkipTLSVerify),
    and the adapter serves the certificate that CA signed for the name the API server checks."""
    apiservice = json.loads(host.run(f"{var('prometheus_adapter_kubectl')} --kubeconfig {var('prometheus_adapter_kubeconfig')}"
                                     " get apiservice v1beta1.custom.metrics.k8s.io -o json").stdout)
    ca = host.file(f"{var('certificates_dir')}/ca.crt").content_string
    assert "insecureSkipTLSVerify" not in apiservice["spec"]
    assert base64.b64decode(apiservice["spec"]["caBundle"]).decode() == ca
    assert {c["type"]: c["status"] for c in apiservice["status"]["conditions"]}["Available"] == "True"
    name = f"prometheus-adapter.{var('prometheus_adapter_namespace', 'custom-metrics')}.svc"
    port = var("prometheus_adapter_secure_port")
    checked = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' --cacert {var('certificates_dir')}/ca.crt "
                       f"--resolve {name}:{port}:127.0.0.1 https://{name}:{port}/livez")
    assert checked.rc == 0 and checked.stdout == "200", checked.stderr
