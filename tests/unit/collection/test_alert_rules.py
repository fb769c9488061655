"""The prometheus role's alert rules: each fires when its condition holds, and only then.

The template is rendered with the role's defaults (Jinja with Ansible's `to_json`), then
`promtool test rules` (the Prometheus release's own rule tester, from the `prometheus` Debian
package that `make unit` installs) evaluates each alert over series written for it: the
condition holding for longer than `for`, and a healthy twin that must stay silent.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
from dataclasses import dataclass

import jinja2
import pytest
import yaml

ROLE = pathlib.Path(__file__).resolve().parents[3] / "collections/ansible_collections/intel/tas/roles/prometheus"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def rules(**overrides) -> str:
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    environment.filters["to_json"] = json.dumps
    variables = {**DEFAULTS, "ansible_managed": "managed", **overrides}
    return environment.from_string((ROLE / "templates/alert-rules.yml.j2").read_text()).render(variables)


BUCKET = "tas_extender_request_duration_seconds_bucket"


CERTIFICATE_EXPIRING = (
    "The {certificate} certificate expires in 10d 0h 0m 0s. The certificates role renews a certificate that expires"
    " within 30 days when it runs, and on the control planes the CronJob tas-certificate-renewal does between runs:"
    " see its log, or run the role, before the scheduler can no longer reach the extender.")


@dataclass(frozen=True)
class Case:
    series: dict[str, str]  # series -> values at 1m steps, the condition and a healthy twin
    labels: dict[str, str]  # what the alert must carry
    description: str  # as Prometheus expands it


CASES = {
    "TASExtenderDown": Case(
        {'up{job="tas-extender", pod="tas-extender-a"}': "0x10",
         'up{job="tas-extender", pod="tas-extender-b"}': "1x10"},
        {"job": "tas-extender", "pod": "tas-extender-a"},
        "Pods that request telemetry/scheduling wait (or, with ignorable: true, are placed without their policy)"
        " while no extender answers."),
    "TASExtenderBadRequests": Case(
        {'tas_extender_bad_requests_total{verb="filter", status="400"}': "0+6x10",
         'tas_extender_bad_requests_total{verb="prioritize", status="400"}': "0x10"},
        {"verb": "filter", "status": "400"},
        "The scheduler (or another client) sends filter requests the extender refuses with 400:"
        " a version mismatch or a misconfigured client."),
    "TASExtenderSlowRequests": Case(
        {f'{BUCKET}{{verb="filter", le="1"}}': "0x10", f'{BUCKET}{{verb="filter", le="2.5"}}': "0+60x10",
         f'{BUCKET}{{verb="filter", le="+Inf"}}': "0+60x10", f'{BUCKET}{{verb="prioritize", le="1"}}': "0+60x10",
         f'{BUCKET}{{verb="prioritize", le="+Inf"}}': "0+60x10"},
        {"verb": "filter"},
        "99% of filter calls take up to 2.485s; kube-scheduler waits for every one."),
    "TASMetricSourceDown": Case(
        {'tas_extender_metric_source_up{source="custom-metrics", pod="tas-extender-a"}': "0x10",
         'tas_extender_metric_source_up{source="custom-metrics", pod="tas-extender-b"}': "1x10"},
        {"source": "custom-metrics", "pod": "tas-extender-a"},
        "The last fetch from custom-metrics failed on tas-extender-a: decisions stand on ageing values,"
        " then on the missing-metric policy."),
    "TASTelemetryStale": Case(
        {'tas_extender_metric_age_seconds{metric="health_metric", pod="a"}': "0+60x10",
         'tas_extender_metric_age_seconds{metric="temperature", pod="a"}': "5x10"},
        {"metric": "health_metric"},
        "The newest sample of health_metric is 10m 0s old: its node-exporter, scrape or adapter may be stuck."),
    "TASPolicyInvalid": Case(
        {'tas_extender_policies{state="invalid", pod="a"}': "1x10",
         'tas_extender_policies{state="valid", pod="a"}': "3x10"},
        {},
        "Invalid TASPolicy objects: 1. They enforce nothing; the status of each says which field is wrong and why."),
    "TASSchedulerCannotCallExtender": Case(
        {'tas_extender_scheduler_call_failures_total{scheduler="default-scheduler", pod="a"}': "0 0 0 0 0 0 1 1 1 2 2",
         'tas_extender_scheduler_call_failures_total{scheduler="default-scheduler", pod="b"}': "0 0 0 0 0 0 1 1 1 2 2",
         'tas_extender_scheduler_call_failures_total{scheduler="other-scheduler", pod="a"}': "3x10"},
        {"scheduler": "default-scheduler"},
        "default-scheduler reported pods it could not schedule because its call to the extender failed"
        " (FailedScheduling Events naming the extender): with ignorable: false they wait. The Events and the"
        " scheduler's log name the cause: its client certificate or CA, the extender's address, a network rule,"
        " or the extender answering an error."),
    # time() is 600 at 10m: 10 days and 600 s from the start is 10 days from then, 30 days is far off
    "TASCertificateExpiring": Case(
        {'tas_extender_certificate_expiry_timestamp_seconds{certificate="serving", pod="a"}': f"{10 * 86400 + 600}x10",
         'tas_extender_certificate_expiry_timestamp_seconds{certificate="ca", pod="a"}': f"{30 * 86400}x10"},
        {"certificate": "serving"},
        CERTIFICATE_EXPIRING.format(certificate="serving")),
    # one replica saw a run evict 5 from a node (the default cap), another saw 4 of it so far
    "TASDeschedulerAtEvictionCap": Case(
        {'tas_extender_descheduler_busiest_run_evictions{pod="a"}': "0 0 0 0 0 5 5 5 5 5 5",
         'tas_extender_descheduler_busiest_run_evictions{pod="b"}': "0 0 0 0 0 4 4 4 4 4 4"},
        {},
        "A descheduler run of the last 10 minutes evicted 5 pods from one node, its per-node cap: more pods there"
        " break their policy than one run may move. Later runs move the rest; if this keeps firing, a node keeps"
        " failing its policy, or the cap is too low for the cluster."),
}

RULES = {r["alert"]: r for r in yaml.safe_load(rules())["groups"][0]["rules"]}
SEVERITY = {name: rule["labels"]["severity"] for name, rule in RULES.items()}
SUMMARY = {name: rule["annotations"]["summary"] for name, rule in RULES.items()}


def promtool_test(tmp_path: pathlib.Path, rendered: str, alert: str, fires: bool) -> None:
    case = CASES[alert]
    (tmp_path / "alert-rules.yml").write_text(rendered)
    expected = [{"exp_labels": {**case.labels, "alertname": alert, "severity": SEVERITY[alert]},
                 "exp_annotations": {"summary": SUMMARY[alert], "description": case.description}}] if fires else []
    test = {"rule_files": ["alert-rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": values} for series, values in case.series.items()],
        "alert_rule_test": [{"eval_time": "10m", "alertname": alert,
                             "exp_alerts": expected}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def promtool():
    if not pathlib.Path(PROMTOOL).exists():
        pytest.fail(f"promtool not found at {PROMTOOL}: `make prometheus-tools` installs it")
    return PROMTOOL


def test_the_rules_pass_promtools_check(promtool, tmp_path):
    (tmp_path / "alert-rules.yml").write_text(rules())
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "alert-rules.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(RULES) == set(CASES)


@pytest.mark.parametrize("alert", sorted(CASES))
def test_each_alert_fires_on_its_condition_and_names_what_is_wrong(promtool, tmp_path, alert):
    promtool_test(tmp_path, rules(), alert, fires=True)


@pytest.mark.parametrize("alert", sorted(CASES))
def test_a_disabled_alert_never_fires(promtool, tmp_path, alert):
    promtool_test(tmp_path, rules(prometheus_alerts_disabled=[alert]), alert, fires=False)


def test_the_first_refused_request_fires_although_rate_sees_no_increase(promtool, tmp_path):
    """A counter series that appears with value 1 has no increase for rate(); the rule still fires,
    for the 5 minutes after it appeared (less `for`): here it appears at 5m and fires at 8m."""
    (tmp_path / "alert-rules.yml").write_text(rules())
    series = 'tas_extender_bad_requests_total{verb="filter", status="400"}'
    test = {"rule_files": ["alert-rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": series, "values": "_x5 1x5"}],
        "alert_rule_test": [{"eval_time": "8m", "alertname": "TASExtenderBadRequests", "exp_alerts": [{
            "exp_labels": {"verb": "filter", "status": "400", "alertname": "TASExtenderBadRequests",
                           "severity": "warning"},
            "exp_annotations": {"summary": SUMMARY["TASExtenderBadRequests"],
                                "description": CASES["TASExtenderBadRequests"].description}}]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_eviction_cap_alert_follows_the_descheduler_cap_and_is_left_out_without_one(promtool, tmp_path):
    descheduler = yaml.safe_load((ROLE.parent / "descheduler/defaults/main.yml").read_text())
    assert DEFAULTS["prometheus_alerts_descheduler_node_cap"] == descheduler["descheduler_max_evictions_per_node"]
    assert "busiest_run_evictions) >= 8" in rules(prometheus_alerts_descheduler_node_cap=8)
    rendered = yaml.safe_load(rules(prometheus_alerts_descheduler_node_cap=None))["groups"][0]["rules"]
    assert "TASDeschedulerAtEvictionCap" not in {r["alert"] for r in rendered}
    assert len(rendered) == len(RULES) - 1


def test_a_client_certificate_about_to_expire_fires_as_its_subject_client(promtool, tmp_path):
    """The client certificates the open connections presented, by subject: the earliest across replicas."""
    (tmp_path / "alert-rules.yml").write_text(rules())
    series = {
        'tas_extender_client_certificate_expiry_timestamp_seconds{subject="CN=kube-scheduler", pod="a"}':
            f"{10 * 86400 + 600}x10",
        'tas_extender_client_certificate_expiry_timestamp_seconds{subject="CN=kube-scheduler", pod="b"}':
            f"{200 * 86400}x10",
        'tas_extender_client_certificate_expiry_timestamp_seconds{subject="CN=tas-prometheus", pod="a"}':
            f"{200 * 86400}x10",
        'tas_extender_certificate_expiry_timestamp_seconds{certificate="serving", pod="a"}': f"{200 * 86400}x10",
    }
    certificate = "CN=kube-scheduler client"
    test = {"rule_files": ["alert-rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "TASCertificateExpiring", "exp_alerts": [{
            "exp_labels": {"certificate": certificate, "alertname": "TASCertificateExpiring",
                           "severity": SEVERITY["TASCertificateExpiring"]},
            "exp_annotations": {"summary": SUMMARY["TASCertificateExpiring"],
                                "description": CERTIFICATE_EXPIRING.format(certificate=certificate)}}]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
