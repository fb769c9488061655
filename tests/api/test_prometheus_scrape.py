"""A real Prometheus scrapes a real `tas-extender serve` over mutual TLS, with the scrape job and
alert rules the prometheus role writes (host mode) and the dashboard the collection ships.

Prometheus is the distribution's binary (`make prometheus-tools` installs it with promtool),
run on a free port of 127.0.0.1 with a 1 s scrape interval; the role's templates are rendered
with Jinja and the Ansible filters they use, with the alerts' `for` set to 0s so that a condition fires at
the next evaluation.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule

from support import free_port, wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collections/ansible_collections/intel/tas"
REQUEST = REPO / "tests/fixtures/scheduler-requests/filter-node-names-k8s1.36.json"
ROLE = COLLECTION / "roles/prometheus"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DEADLINE = 60


def render(template: str, **variables) -> str:
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    environment.filters.update(FilterModule().filters())
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    return environment.from_string((ROLE / "templates" / template).read_text()).render(
        {**defaults, "ansible_managed": "managed", "groups": {"tas_nodes": []}, "hostvars": {}, **variables})


class Prometheus:
    def __init__(self, url: str, proc: subprocess.Popen, log: pathlib.Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def query(self, expr: str) -> list:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def alerts(self) -> dict[str, dict]:
        groups = httpx.get(f"{self.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        return {rule["name"]: rule for group in groups for rule in group["rules"]}

    def targets_up(self) -> bool:
        targets = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        return bool(targets) and all(t["health"] == "up" for t in targets if t["labels"]["job"] == "tas-extender")


@pytest.fixture
def extender(own_tls_server):
    """A served extender of this test's own (tests/api/conftest.py), which a test may stop."""
    served, _ = own_tls_server
    return served


@contextlib.contextmanager
def scraping(pki, extender, tmp_path: pathlib.Path, **settings: object) -> Iterator[Prometheus]:
    """Prometheus scraping `extender` with the role's scrape job and alert rules (role variables
    `settings` changed), until the end of the block."""
    if not pathlib.Path(PROMETHEUS).exists():
        pytest.fail(f"prometheus not found at {PROMETHEUS}: `make prometheus-tools` installs it")
    tls = tmp_path / "tls"
    tls.mkdir()
    for source, target in (("ca.crt", "ca.crt"), ("client.crt", "prometheus-client.crt"),
                           ("client.key", "prometheus-client.key")):
        shutil.copy(pki.path(source), tls / target)
    settings = {"prometheus_deploy_mode": "host", "prometheus_config_dir": str(tmp_path),
                "prometheus_scrape_interval": "1s", "prometheus_load_rules": False, "prometheus_alerts": True,
                "prometheus_alerts_for": "0s", "prometheus_extender_tls_dir": str(tls),
                "prometheus_extender_targets": [extender.url.removeprefix("https://")], **settings}
    (tmp_path / "prometheus.yml").write_text(render("prometheus.yml.j2", **settings))
    (tmp_path / "alert-rules.yml").write_text(render("alert-rules.yml.j2", **settings))
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("w") as out:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    served = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        wait_for(lambda: proc.poll() is None and served.targets_up(), DEADLINE,
                 "Prometheus to scrape the extender over mutual TLS")
        yield served
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def prometheus(pki, extender, tmp_path):
    with scraping(pki, extender, tmp_path) as served:
        yield served


def filter_calls(extender, pki, count: int) -> None:
    request = json.loads(REQUEST.read_text())
    with httpx.Client(verify=pki.client_context(), timeout=10) as client:
        for _ in range(count):
            assert client.post(f"{extender.url}/scheduler/filter", json=request).status_code == 200
        refused = client.post(f"{extender.url}/scheduler/filter", content=b"{not json",
                              headers={"Content-Type": "application/json"})
        assert refused.status_code == 400, refused.text


# Written by the controller, which needs a cluster: tests/incluster runs these panels too.
CONTROLLER_METRICS = ("tas_extender_violating_nodes", "tas_extender_descheduler_evictions_total")


def test_every_dashboard_panel_query_returns_data(prometheus, extender, pki):
    filter_calls(extender, pki, 5)
    dashboard = json.loads((COLLECTION / "dashboards/tas-extender.json").read_text())
    queries = {target["expr"]: panel["title"] for panel in dashboard["panels"] for target in panel["targets"]
               if not any(metric in target["expr"] for metric in CONTROLLER_METRICS)}
    assert len(queries) >= 8

    def every_query_has_data() -> bool:
        empty = [title for expr, title in queries.items() if not prometheus.query(expr)]
        assert not empty, f"panels without data: {empty}"  # reported if it times out
        return True

    wait_for(every_query_has_data, DEADLINE, "every panel's query to return data", interval=1)


def test_every_alert_rule_evaluates_and_the_ones_whose_condition_is_caused_fire(prometheus, extender, pki):
    wait_for(lambda: all(rule["health"] == "ok" and rule.get("lastEvaluation", "").startswith("2")
                         for rule in prometheus.alerts().values()), DEADLINE, "every alert rule evaluated")
    # an evaluation before the first scrape may have seen no target at all
    wait_for(lambda: prometheus.alerts()["TASExtenderDown"]["state"] == "inactive", DEADLINE,
             "TASExtenderDown inactive while the extender is scraped")
    filter_calls(extender, pki, 1)  # a request refused with 400
    wait_for(lambda: prometheus.alerts()["TASExtenderBadRequests"]["state"] == "firing", DEADLINE,
             "TASExtenderBadRequests to fire after a refused request")
    extender.proc.terminate()
    extender.proc.wait(10)
    wait_for(lambda: prometheus.alerts()["TASExtenderDown"]["state"] == "firing", DEADLINE,
             "TASExtenderDown to fire once the extender is stopped")
    firing = prometheus.alerts()["TASExtenderDown"]["alerts"][0]
    assert firing["labels"]["severity"] == "critical" and firing["annotations"]["summary"], firing


def slow_filter_calls(extender, pki, count: int, pause: float) -> None:
    """Filter requests whose body arrives in two halves `pause` seconds apart, as across a
    congested network: the extender's time counts from a request's head to its answer, so each
    takes at least `pause`, however fast the machine."""
    body = REQUEST.read_bytes()
    half = len(body) // 2

    def trickled() -> Iterator[bytes]:
        yield body[:half]
        time.sleep(pause)
        yield body[half:]

    with httpx.Client(verify=pki.client_context(), timeout=10) as client:
        for _ in range(count):
            answer = client.post(f"{extender.url}/scheduler/filter", content=trickled(),
                                 headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
            assert answer.status_code == 200, answer.text[:500]


INVALID_POLICY = """\
apiVersion: telemetry.intel.com/v1alpha1
kind: TASPolicy
metadata: {name: broken, namespace: default}
spec:
  strategies:
    dontschedule:
      rules: [{metricname: health_metric, operator: Sometimes, target: 1}]
"""


def test_the_alerts_on_policies_telemetry_certificates_and_slow_answers_fire_when_caused(pki, serve, tmp_path):
    """An extender in trouble, each alert's condition caused as it comes about in a cluster:
    a policy it refuses (an unknown operator), a metrics file whose samples were stamped an hour
    ago by a collector that stopped, then that file gone; certificates that expire within a day
    (the test PKI's), inside the 14 days the rule warns ahead; and answers slower than the
    threshold (set to 50 ms here): filter requests whose bodies take 0.3 s to arrive."""
    invalid = tmp_path / "broken-policy.yaml"
    invalid.write_text(INVALID_POLICY)
    an_hour_ago = int((time.time() - 3600) * 1000)
    metrics = tmp_path / "health.prom"
    metrics.write_text("".join(f'health_metric{{node="node-{n}"}} 0 {an_hour_ago}\n' for n in (1, 2, 3)))
    served = serve(["--cert", pki.path("server.crt"), "--key", pki.path("server.key"), "--cacert", pki.path("ca.crt")],
                   policy_files=(invalid,), metrics_file=metrics)
    with scraping(pki, served, tmp_path, prometheus_alerts_slow_seconds=0.05) as prometheus:
        def firing(alert: str) -> list[dict]:
            rule = prometheus.alerts()[alert]
            return rule["alerts"] if rule["state"] == "firing" else []

        # rate() sees an increase only from a sample Prometheus already holds: the series from 0
        wait_for(lambda: prometheus.query('tas_extender_request_duration_seconds_count{verb="filter"} == 0'),
                 DEADLINE, "Prometheus to scrape the filter latency series at 0")
        assert not firing("TASExtenderSlowRequests")
        slow_filter_calls(served, pki, 5, pause=0.3)
        for alert in ("TASPolicyInvalid", "TASTelemetryStale", "TASCertificateExpiring",
                      "TASExtenderSlowRequests"):
            wait_for(lambda alert=alert: firing(alert), DEADLINE, f"{alert} to fire")
        assert firing("TASTelemetryStale")[0]["labels"]["metric"] == "health_metric"
        # the test's PKI is valid for a day: the client certificate Prometheus scrapes with too
        assert {a["labels"]["certificate"] for a in firing("TASCertificateExpiring")} \
            == {"serving", "ca", "CN=client client"}
        assert {a["labels"]["verb"] for a in firing("TASExtenderSlowRequests")} == {"filter"}
        assert not firing("TASMetricSourceDown")

        metrics.unlink()
        wait_for(lambda: firing("TASMetricSourceDown"), DEADLINE, "TASMetricSourceDown to fire once the file is gone")
        assert firing("TASMetricSourceDown")[0]["labels"]["source"] == "file"
