"""The descheduler role's policy: the caps, the label selector and the namespace scope land where
the descheduler reads them, in the format its version reads; and its CronJob, whose dry run
may not evict.

The template is rendered with Jinja and the two Ansible plugins it uses (the `version` test and
`to_json`); the result is parsed as the descheduler would, as YAML. That the real descheduler
v0.36.0 accepts it and evicts by it is shown on the clusters (molecule scenarios).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml

from support.descheduler import DEFAULTS, ROLE, policy, template_environment


def test_the_defaults_cap_each_run_per_node_namespace_and_in_total():
    rendered = policy("0.36.0")
    assert (rendered["maxNoOfPodsToEvictPerNode"], rendered["maxNoOfPodsToEvictPerNamespace"],
            rendered["maxNoOfPodsToEvictTotal"]) == (5, 10, 20)
    assert rendered["evictionFailureEventNotification"] is True


def test_only_pods_of_a_telemetry_policy_are_evicted_for_node_affinity():
    args = {c["name"]: c["args"] for c in policy("0.36.0")["profiles"][0]["pluginConfig"]}
    assert args["RemovePodsViolatingNodeAffinity"]["labelSelector"] == {
        "matchExpressions": [{"key": "telemetry-policy", "operator": "Exists"}]}
    assert args["DefaultEvictor"] == {"nodeFit": True}
    assert "namespaces" not in args["RemovePodsViolatingNodeAffinity"]


def test_a_null_cap_is_no_cap():
    rendered = policy("0.36.0", descheduler_max_evictions_per_node=None, descheduler_max_evictions_total=None)
    assert "maxNoOfPodsToEvictPerNode" not in rendered and "maxNoOfPodsToEvictTotal" not in rendered
    assert rendered["maxNoOfPodsToEvictPerNamespace"] == 10


@pytest.mark.parametrize(("key", "names"), [("include", ["shop", "batch"]), ("exclude", ["kube-system"])])
def test_the_namespace_scope_goes_to_the_plugin(key, names):
    rendered = policy("0.36.0", **{f"descheduler_namespaces_{key}": names})
    args = {c["name"]: c["args"] for c in rendered["profiles"][0]["pluginConfig"]}
    assert args["RemovePodsViolatingNodeAffinity"]["namespaces"] == {key: names}


def test_versions_before_the_event_setting_do_not_get_it():
    assert "evictionFailureEventNotification" not in policy("0.32.0")


def test_the_v1alpha1_format_gets_the_caps_it_knows():
    rendered = policy("0.23.1", descheduler_max_evictions_total=None, descheduler_namespaces_exclude=["kube-system"])
    assert rendered["apiVersion"] == "descheduler/v1alpha1"
    assert (rendered["maxNoOfPodsToEvictPerNode"], rendered["maxNoOfPodsToEvictPerNamespace"]) == (5, 10)
    assert "maxNoOfPodsToEvictTotal" not in rendered
    params = rendered["strategies"]["RemovePodsViolatingNodeAffinity"]["params"]
    assert params["namespaces"] == {"exclude": ["kube-system"]}


def cronjob(**overrides) -> dict[str, dict]:
    """The kubernetes mode's objects by kind, the policy itself left out (rendered above); the image
    and pull Secrets as the defaults give them with no registry (test_image_registry.py renders them)."""
    environment = template_environment()
    environment.globals["lookup"] = lambda kind, name: "{}"
    values = {**DEFAULTS, "descheduler_image": "registry.k8s.io/descheduler/descheduler",
              "_descheduler_image_pull_secrets": [], **overrides}
    text = environment.from_string((ROLE / "templates/cronjob.yaml.j2").read_text()).render(values)
    return {document["kind"]: document for document in yaml.safe_load_all(text) if document}


def test_the_descheduler_evicts_and_records_events_by_default():
    objects = cronjob()
    container = objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert "--dry-run" not in container["command"]
    granted = {(resource, verb) for rule in objects["ClusterRole"]["rules"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert {("pods/eviction", "create"), ("events", "create")} <= granted


def test_a_dry_run_is_told_so_and_may_not_evict_or_write_anything():
    objects = cronjob(descheduler_dry_run=True)
    container = objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "--dry-run"
    verbs = {verb for rule in objects["ClusterRole"]["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}


# --- rebalancing by load --------------------------------------------------------------------

def load_profile(rendered: dict) -> dict:
    profiles = {profile["name"]: profile for profile in rendered["profiles"]}
    return profiles.get("telemetry-aware-scheduling-load", {})


def test_rebalancing_by_load_is_off_unless_asked():
    rendered = policy("0.36.0", descheduler_rebalance_by_load=False)
    assert [p["name"] for p in rendered["profiles"]] == ["telemetry-aware-scheduling"]
    assert "metricsProviders" not in rendered and "nodeSelector" not in rendered


def test_rebalancing_by_load_reads_prometheus_and_moves_pods_off_hot_nodes_only_outside_ours():
    rendered = policy("0.36.0", descheduler_rebalance_by_load=True, descheduler_namespaces_exclude=["batch"])
    # every node looked at needs a load sample, and control planes run no node-exporter
    assert rendered["nodeSelector"] == "!node-role.kubernetes.io/control-plane"
    assert rendered["metricsProviders"] == [
        {"source": "Prometheus", "prometheus": {"url": "http://tas-prometheus.monitoring.svc:9090"}}]
    profile = load_profile(rendered)
    assert profile["plugins"] == {"balance": {"enabled": ["LowNodeUtilization"]}}
    args = {c["name"]: c["args"] for c in profile["pluginConfig"]}
    assert args["DefaultEvictor"] == {"nodeFit": True}
    low = args["LowNodeUtilization"]
    # with Prometheus as the source the descheduler takes exactly one resource, MetricResource
    assert (low["thresholds"], low["targetThresholds"]) == ({"MetricResource": 30}, {"MetricResource": 65})
    assert low["metricsUtilization"] == {"source": "Prometheus", "prometheus": {"query": DEFAULTS["descheduler_load_query"]}}
    assert low["evictableNamespaces"] == {
        "exclude": ["kube-system", "telemetry-aware-scheduling", "monitoring", "custom-metrics", "batch"]}
    # the node-affinity profile keeps its caps, which apply to both profiles of a run
    assert rendered["maxNoOfPodsToEvictPerNode"] == 5


def load_rules() -> str:
    prometheus_role = ROLE.parent / "prometheus"
    variables = {**yaml.safe_load((prometheus_role / "defaults/main.yml").read_text()), "ansible_managed": "managed"}
    return template_environment().from_string((prometheus_role / "templates/load-rules.yml.j2").read_text()).render(
        variables)


def test_the_default_load_query_gives_each_node_its_cpu_use_as_the_descheduler_reads_it(tmp_path):
    """promtool (the Prometheus release's rule tester) evaluates the prometheus role's load rules
    over node-exporter's idle counters of two nodes, then the descheduler's default query: one
    sample per node, labelled instance=<node name> (what the descheduler matches nodes by), valued
    0 to 1. A series without a node label (another job's) is left out."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not pathlib.Path(promtool).exists():
        pytest.fail(f"promtool not found at {promtool}: `make prometheus-tools` installs it")
    (tmp_path / "load-rules.yml").write_text(load_rules())
    idle = 'node_cpu_seconds_total{{mode="idle", cpu="0", instance="{ip}:9100", node="{node}"}}'
    test = {"rule_files": ["load-rules.yml"], "evaluation_interval": "30s", "tests": [{
        "interval": "15s",
        "input_series": [
            # idle 0.25 s a second: 75 % busy; idle 0.875 s a second: 12.5 % busy
            {"series": idle.format(ip="10.0.0.1", node="node-1"), "values": "0+3.75x60"},
            {"series": idle.format(ip="10.0.0.3", node="node-3"), "values": "0+13.125x60"},
            {"series": 'node_cpu_seconds_total{mode="idle", cpu="0", instance="10.9.9.9:9100"}', "values": "0+1x60"}],
        "promql_expr_test": [{"expr": DEFAULTS["descheduler_load_query"], "eval_time": "12m", "exp_samples": [
            {"labels": '{instance="node-1", node="node-1"}', "value": 0.75},
            {"labels": '{instance="node-3", node="node-3"}', "value": 0.125}]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
