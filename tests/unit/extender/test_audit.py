"""Audit mode: a policy annotated telemetry.intel.com/enforcement=audit is decided and reported
(status, pod Events, a metric, the log) but enforced nowhere (no filtering, scores or labels)."""

from __future__ import annotations

import copy
import json
import pathlib
import time

import pytest
import yaml
from support.asgi import AsgiClient
from kubernetes import client as k8s
from support.load_aware import NOW, annotations_for

from tas_extender.decide import audit
from tas_extender.serve.api import create_app
from tas_extender.decide.cache import MetricCache
from tas_extender.cluster.controller import Controller
from tas_extender.cluster.reconcile import MANAGED_ANNOTATION
from tas_extender.decide.engine import Engine
from tas_extender.offline.evaluate import evaluate
from tas_extender.offline.explain import explain, render
from tas_extender.decide.load.decide import LoadState
from tas_extender.decide.load.mode import LoadAware
from tas_extender.decide.load.policy import DEFAULT_POLICY
from tas_extender.decide.metrics import Sample, Snapshot
from tas_extender.decide.policy import ENFORCEMENT_ANNOTATION, PolicyError, parse_policy
from tas_extender.sources.textfile import TextfileSource
from tas_extender.decide.store import PolicyStore
from tas_extender.decide.telemetry import Telemetry

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
JSON = {"Content-Type": "application/json"}
NODES = ["node-1", "node-2", "node-3"]  # health_metric 0, 1, 2 (tests/fixtures/health.prom)
KEY = "health-metric-demo/demo-policy"
# The demo policy (dontschedule: 1 or 2; deschedule: 2; scores: lower is better), plus a
# labeling rule that labels node-2 and node-3.
DEMO = yaml.safe_load((FIXTURES / "policies" / "demo-policy.yaml").read_text())
DEMO["spec"]["strategies"]["labeling"] = {
    "rules": [{"metricname": "health_metric", "operator": "GreaterThan", "target": 0, "labels": ["health=bad"]}]}
LABEL_KEY = "telemetry.aware.scheduling.demo-policy/health"


def demo(enforcement: str | None = None, generation: int = 1) -> dict:
    """The demo policy as the API server has it, with the enforcement annotation when given."""
    doc = copy.deepcopy(DEMO)
    doc["metadata"]["generation"] = generation
    if enforcement is not None:
        doc["metadata"]["annotations"] = {ENFORCEMENT_ANNOTATION: enforcement}
    return doc


# --- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "enforcement"),
    [(None, "enforce"), ({}, "enforce"), ({ENFORCEMENT_ANNOTATION: ""}, "enforce"),
     ({ENFORCEMENT_ANNOTATION: "enforce"}, "enforce"), ({ENFORCEMENT_ANNOTATION: "audit"}, "audit"),
     ({"other": "audit"}, "enforce")],
    ids=["no annotations", "empty annotations", "empty value enforces", "enforce", "audit", "another annotation"],
)
def test_the_enforcement_annotation_decides_the_mode_and_its_absence_enforces(annotations, enforcement):
    doc = demo()
    if annotations is not None:
        doc["metadata"]["annotations"] = annotations
    policy = parse_policy(doc)
    assert policy.enforcement == enforcement
    assert policy.audit is (enforcement == "audit")


@pytest.mark.parametrize(
    ("value", "reason"),
    [("dry-run", "must be one of enforce, audit, got 'dry-run'"),
     ("Audit", "must be one of enforce, audit, got 'Audit'"),
     ("x" * 200, "must be one of enforce, audit, got 'xxx")],
    ids=["unknown word", "case matters", "long value shortened"],
)
def test_an_unknown_enforcement_makes_the_policy_invalid_naming_the_annotation(value, reason):
    with pytest.raises(PolicyError) as caught:
        parse_policy(demo(value))
    assert caught.value.field == f"metadata.annotations.{ENFORCEMENT_ANNOTATION}"
    assert caught.value.reason.startswith(reason)
    assert len(caught.value.reason) < 150


def test_annotations_that_are_not_a_mapping_make_the_policy_invalid():
    doc = demo()
    doc["metadata"]["annotations"] = ["audit"]
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc)
    assert caught.value.field == "metadata.annotations"


# --- the scheduler's calls ----------------------------------------------------------------


def engine_for(enforcement: str | None) -> Engine:
    store = PolicyStore()
    store.replace_all([parse_policy(demo(enforcement))], {})
    cache = MetricCache(TextfileSource(str(FIXTURES / "health.prom")), max_age=float("inf"))
    engine = Engine(store, cache)
    cache.refresh(store.metric_names())
    engine.rebuild()
    return engine


class Reports:
    """A stand-in for audit.PodEvents: what the filter call reported."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict, str, dict[str, str], int]] = []

    def __call__(self, pod, policy, failed, total) -> None:
        self.calls.append((dict(pod), policy.key, dict(failed), total))


def app(enforcement: str | None, telemetry: Telemetry | None = None, reports: Reports | None = None,
        load: LoadAware | None = None) -> AsgiClient:
    return AsgiClient(create_app(engine_for(enforcement), telemetry or Telemetry(), 1 << 20, readiness=list,
                                 load=load, audit_events=reports))


@pytest.mark.parametrize(
    ("enforcement", "passed", "failed"),
    [("enforce", ["node-1"], ["node-2", "node-3"]), ("audit", NODES, [])],
    ids=["enforced policy filters", "audit policy passes every node"],
)
def test_filter_enforces_the_policy_only_outside_audit_mode(request_body, enforcement, passed, failed):
    body = app(enforcement).post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON).json()
    assert body["NodeNames"] == passed and sorted(body["FailedNodes"]) == failed and body["Error"] == ""


def test_full_nodes_mode_returns_every_node_unchanged_for_an_audit_policy(request_body):
    sent = json.loads(request_body("filter-full-nodes"))
    body = app("audit").post("/scheduler/filter", content=request_body("filter-full-nodes"), headers=JSON).json()
    assert body["Nodes"]["items"] == sent["Nodes"]["items"] and body["FailedNodes"] == {}


def test_what_an_audit_policy_would_filter_is_counted_per_node(request_body):
    telemetry = Telemetry()
    client = app("audit", telemetry)
    for _ in range(2):
        client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    text = client.get("/metrics").text
    assert f'tas_extender_audit_decisions_total{{policy="{KEY}",result="would_fail"}} 4.0' in text
    assert f'tas_extender_audit_decisions_total{{policy="{KEY}",result="would_pass"}} 2.0' in text
    assert 'tas_extender_decisions_total{result="passed",verb="filter"} 6.0' in text  # what was answered


def test_an_enforced_policy_counts_no_audit_decisions(request_body):
    client = app("enforce")
    client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    assert "tas_extender_audit_decisions_total{" not in client.get("/metrics").text


def test_the_audit_report_gets_the_pod_and_the_nodes_that_would_fail(request_body):
    reports = Reports()
    app("audit", reports=reports).post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    [(pod, key, failed, total)] = reports.calls
    assert (pod["name"], pod["namespace"], pod["uid"]) == (
        "demo-app-bdbcf5cb7-gwhrp", "health-metric-demo", "db1f08dd-ef7a-4c38-9814-e1c44bcde716")
    assert (key, total) == (KEY, 3)
    assert failed == {"node-2": "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)",
                      "node-3": "demo-policy: dontschedule rule health_metric Equals 2 violated (value 2)"}


def test_an_enforced_policy_reports_nothing_to_the_audit_report(request_body):
    reports = Reports()
    app("enforce", reports=reports).post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    assert reports.calls == []


def test_filter_logs_what_an_audit_policy_would_have_filtered(request_body, caplog):
    caplog.set_level("INFO", logger="tas_extender.extender")
    app("audit").post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    assert caplog.messages == [
        f"audit: {KEY} would filter 2 of 3 node(s) for pod health-metric-demo/demo-app-bdbcf5cb7-gwhrp: "
        "node-2 (dontschedule rule health_metric Equals 1 violated (value 1)), "
        "node-3 (dontschedule rule health_metric Equals 2 violated (value 2))"]


@pytest.mark.parametrize(
    ("enforcement", "scores"),
    [("enforce", [10, 5, 0]), ("audit", [0, 0, 0])],
    ids=["enforced policy scores", "audit policy scores as no policy"],
)
def test_prioritize_scores_by_the_policy_only_outside_audit_mode(request_body, enforcement, scores):
    body = app(enforcement).post("/scheduler/prioritize", content=request_body("prioritize-node-names"),
                                 headers=JSON).json()
    assert [entry["Score"] for entry in body] == scores


def test_load_mode_still_decides_a_pod_whose_policy_is_in_audit_mode(request_body):
    table = annotations_for({"node-1": 90.0, "node-2": 40.0, "node-3": 10.0})
    load = LoadAware(DEFAULT_POLICY, table.get, clock=lambda: NOW)
    client = app("audit", load=load)
    failed = client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON).json()
    assert list(failed["FailedNodes"]) == ["node-1"] and failed["FailedNodes"]["node-1"].startswith("load: ")
    scores = {s["Host"]: s["Score"] for s in client.post(
        "/scheduler/prioritize", content=request_body("prioritize-node-names"), headers=JSON).json()}
    assert scores == {"node-1": 5, "node-2": 8, "node-3": 9}  # the load's alone, as for a pod without a policy


# --- the controller: labels, status, re-parsing -------------------------------------------


class FakeCore:
    """CoreV1Api's calls the controller and PodEvents make, recorded."""

    def __init__(self, fail: int = 0) -> None:
        self.patches: dict[str, dict] = {}
        self.events: list[tuple[str, dict]] = []
        self.fail = fail  # how many create calls fail before they work

    def patch_node(self, name: str, body: dict) -> None:
        self.patches[name] = body

    def create_namespaced_event(self, namespace: str, body: dict) -> None:
        if self.fail:
            self.fail -= 1
            raise k8s.ApiException(status=503, reason="Service Unavailable")
        self.events.append((namespace, body))


class FakeCustom:
    def __init__(self) -> None:
        self.statuses: dict[str, dict] = {}

    def patch_namespaced_custom_object_status(self, group, version, namespace, plural, name, body) -> None:
        self.statuses[f"{namespace}/{name}"] = body["status"]


def controller_for(policy: dict, node_labels: dict[str, dict[str, str]] | None = None) -> Controller:
    """A controller over the demo metrics and nodes, the policy listed, no API server behind it."""
    store = PolicyStore()
    cache = MetricCache(TextfileSource(str(FIXTURES / "health.prom")), max_age=float("inf"))
    engine = Engine(store, cache)
    controller = Controller(k8s.ApiClient(), engine, Telemetry(), core=FakeCore(), custom=FakeCustom())
    labels = node_labels or {}
    controller.on_node_list([k8s.V1Node(metadata=k8s.V1ObjectMeta(
        name=n, labels=labels.get(n), annotations={MANAGED_ANNOTATION: ",".join(sorted(labels[n]))}
        if labels.get(n) else None)) for n in NODES])
    controller.on_policy_list([policy])
    cache.refresh(store.metric_names())
    engine.rebuild()
    return controller


def test_an_audit_policy_puts_no_label_on_a_node_but_its_violating_nodes_are_reported():
    desired = controller_for(demo("audit")).desired_labels()
    assert desired.labels == {n: {} for n in NODES}
    assert desired.violating == {KEY: ["node-3"]}


def test_the_same_policy_enforced_labels_the_nodes():
    desired = controller_for(demo("enforce")).desired_labels()
    assert desired.labels == {"node-1": {}, "node-2": {LABEL_KEY: "bad"},
                              "node-3": {"demo-policy": "violating", LABEL_KEY: "bad"}}
    assert desired.violating == {KEY: ["node-3"]}


def test_labels_set_while_enforced_are_removed_once_the_policy_is_in_audit_mode():
    controller = controller_for(demo("audit"), {"node-2": {LABEL_KEY: "bad"},
                                                "node-3": {"demo-policy": "violating", LABEL_KEY: "bad"}})
    controller.reconcile()
    patches = controller.core.patches
    assert patches["node-3"]["metadata"]["labels"] == {"demo-policy": None, LABEL_KEY: None}
    assert patches["node-2"]["metadata"]["labels"] == {LABEL_KEY: None}
    assert "node-1" not in patches


def conditions_after_reconcile(policy: dict) -> dict[str, dict]:
    controller = controller_for(policy)
    controller.reconcile()
    status = controller.custom.statuses[KEY]
    assert status["violatingNodes"] == ["node-3"]
    return {c["type"]: c for c in status["conditions"]}


def test_an_audit_policy_says_in_its_status_that_it_is_not_enforced_and_what_it_would_do():
    conditions = conditions_after_reconcile(demo("audit"))
    assert list(conditions) == ["Valid", "Violating", "Enforced"]
    enforced = conditions["Enforced"]
    assert (enforced["status"], enforced["reason"], enforced["observedGeneration"]) == ("False", "Audit", 1)
    assert enforced["message"] == (
        f"audit mode (annotation {ENFORCEMENT_ANNOTATION}=audit): decisions are reported, not enforced; "
        "if enforced it would now filter 2 node(s) (dontschedule): node-2 node-3; "
        "label 1 node(s) violating (deschedule): node-3; set labels on 2 node(s) (labeling): node-2 node-3; "
        "score the nodes (scheduleonmetric)")
    assert conditions["Violating"]["status"] == "True"


@pytest.mark.parametrize("enforcement", [None, "enforce"], ids=["no annotation", "enforce"])
def test_an_enforced_policy_has_no_enforced_condition(enforcement):
    assert list(conditions_after_reconcile(demo(enforcement))) == ["Valid", "Violating"]


def test_a_switch_from_audit_to_enforce_is_taken_without_a_new_generation():
    controller = controller_for(demo("audit"))
    listed = controller.store.get("health-metric-demo", "demo-policy")
    controller.on_policy_event("MODIFIED", demo("audit"))  # our own status write: same generation and mode
    assert controller.store.get("health-metric-demo", "demo-policy") is listed
    controller.on_policy_event("MODIFIED", demo("enforce"))  # an annotation edit keeps the generation
    switched = controller.store.get("health-metric-demo", "demo-policy")
    assert switched is not None and not switched.audit and switched.generation == 1
    controller.on_policy_event("MODIFIED", demo())  # no annotation is enforce too: nothing to re-parse
    assert controller.store.get("health-metric-demo", "demo-policy") is switched
    controller.on_policy_event("MODIFIED", demo("audit"))
    assert controller.store.get("health-metric-demo", "demo-policy").audit


def test_a_wrong_enforcement_value_makes_the_listed_policy_invalid_until_it_is_fixed():
    controller = controller_for(demo("audit"))
    controller.on_policy_event("MODIFIED", demo("dryrun"))
    assert controller.store.get("health-metric-demo", "demo-policy") is None
    assert controller.store.invalid()[KEY].field == f"metadata.annotations.{ENFORCEMENT_ANNOTATION}"
    controller.on_policy_event("MODIFIED", demo("enforce"))
    assert controller.store.get("health-metric-demo", "demo-policy") is not None


def test_switching_to_enforce_rewrites_the_status_without_the_enforced_condition_at_once():
    controller = controller_for(demo("audit"))
    controller.reconcile()
    controller.on_policy_event("MODIFIED", demo("enforce"))
    controller.reconcile()  # within the status refresh period: written because the content changed
    status = controller.custom.statuses[KEY]
    assert [c["type"] for c in status["conditions"]] == ["Valid", "Violating"]
    assert controller.core.patches["node-3"]["metadata"]["labels"] == {
        "demo-policy": "violating", LABEL_KEY: "bad"}


# --- pod Events ---------------------------------------------------------------------------

POD = {"name": "web-0", "namespace": "shop", "uid": "uid-1"}


def test_an_event_names_the_pod_the_policy_and_what_it_would_have_filtered():
    core = FakeCore()
    events = audit.PodEvents(core)
    policy = parse_policy(demo("audit"))
    events(POD, policy, {"node-2": "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)"}, 3)
    assert events.drain() == 1
    [(namespace, body)] = core.events
    assert namespace == "shop"
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop",
                                      "uid": "uid-1"}
    assert (body["reason"], body["type"], body["source"]) == ("TASPolicyAudit", "Normal", {"component": "tas-extender"})
    assert body["message"] == (f"policy {KEY} is in audit mode: it would have filtered 1 of 3 node(s): "
                               "node-2 (dontschedule rule health_metric Equals 1 violated (value 1))")


def test_one_event_per_pod_policy_and_policy_generation():
    core = FakeCore()
    events = audit.PodEvents(core)
    first, edited = parse_policy(demo("audit", generation=1)), parse_policy(demo("audit", generation=2))
    for _ in range(3):  # the scheduler retries a pod that found no node
        events(POD, first, {}, 3)
    events(POD, edited, {}, 3)
    events({**POD, "uid": "uid-2"}, first, {}, 3)  # another pod of the same name, recreated
    assert events.drain() == 3
    assert [body["involvedObject"]["uid"] for _, body in core.events] == ["uid-1", "uid-1", "uid-2"]


def test_a_failed_event_is_tried_again_at_the_pods_next_attempt():
    core = FakeCore(fail=1)
    events = audit.PodEvents(core)
    policy = parse_policy(demo("audit"))
    events(POD, policy, {}, 3)
    events.drain()
    events(POD, policy, {}, 3)
    events.drain()
    assert len(core.events) == 1


def test_a_full_queue_drops_events_without_blocking_and_says_so_once(caplog):
    core = FakeCore()
    events = audit.PodEvents(core, queue_size=2)
    policy = parse_policy(demo("audit"))
    started = time.monotonic()
    for i in range(10):
        events({**POD, "uid": f"uid-{i}"}, policy, {}, 3)
    assert time.monotonic() - started < 1
    assert events.dropped == 8
    assert sum("dropping new ones" in m for m in caplog.messages) == 1
    assert events.drain() == 2
    events({**POD, "uid": "uid-9"}, policy, {}, 3)  # dropped before, so not remembered as reported
    assert events.drain() == 1


def test_a_pod_without_a_name_gets_no_event():
    events = audit.PodEvents(FakeCore())
    events({"namespace": "shop"}, parse_policy(demo("audit")), {}, 3)
    assert events.drain() == 0


def test_the_thread_creates_the_queued_events():
    core = FakeCore()
    events = audit.PodEvents(core)
    events.start()
    try:
        events(POD, parse_policy(demo("audit")), {}, 3)
        deadline = time.monotonic() + 10
        while not core.events and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(core.events) == 1, "the event thread created no Event within 10 s"
    finally:
        events.stop()


def reasons(count: int, rule: str = "dontschedule rule health_metric Equals 1 violated (value 1)") -> dict[str, str]:
    return {f"node-{i:04d}": f"demo-policy: {rule}" for i in range(count)}


LONG_RULES = "dontschedule rule " + " and ".join(["m" * 190 + " Equals 1 violated (value 1)"] * 10)


@pytest.mark.parametrize(
    ("failed", "ending"),
    [(reasons(5000), " more"), (reasons(3, LONG_RULES), "... and 2 more"), (reasons(1, "x" * 3000), "xxx...")],
    ids=["thousands of nodes: the rest counted", "reasons longer than the cap: the first cut, the rest counted",
         "one reason longer than the cap: cut"],
)
def test_an_event_message_stays_within_the_kubernetes_cap(failed, ending):
    text = audit.message(parse_policy(demo("audit")), failed, 5000)
    assert 900 < len(text.encode()) <= audit.MESSAGE_BYTES
    assert text.startswith(f"policy {KEY} is in audit mode: it would have filtered {len(failed)} of 5000 node(s): ")
    assert text.endswith(ending)


def test_a_message_too_short_for_every_node_counts_the_ones_it_leaves_out():
    text = audit.message(parse_policy(demo("audit")), reasons(5000), 5000)
    shown = text.count("(dontschedule rule")
    assert 0 < shown < 5000 and text.endswith(f") ... and {5000 - shown} more")


def test_a_message_lists_every_node_when_they_fit_and_says_none_when_none_would_fail():
    policy = parse_policy(demo("audit"))
    assert audit.message(policy, reasons(2), 4) == (
        f"policy {KEY} is in audit mode: it would have filtered 2 of 4 node(s): "
        "node-0000 (dontschedule rule health_metric Equals 1 violated (value 1)), "
        "node-0001 (dontschedule rule health_metric Equals 1 violated (value 1))")
    assert audit.message(policy, {}, 4) == f"policy {KEY} is in audit mode: it would have filtered none of 4 node(s)"


# --- explain and evaluate -----------------------------------------------------------------


def test_explain_answers_as_the_server_and_shows_what_an_audit_policy_would_filter():
    now = 1_800_000_000.0
    samples = {"health_metric": {n: Sample(float(i), now) for i, n in enumerate(NODES)}}
    pod = {"name": "web-0", "namespace": "health-metric-demo", "labels": {"telemetry-policy": "demo-policy"}}
    answer = explain(pod, parse_policy(demo("audit")), samples, NODES, now, max_age=30.0)
    assert all(a.passed and a.score == 0 for a in answer.nodes.values())
    assert answer.nodes["node-2"].would_fail == (
        "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)")
    assert answer.nodes["node-1"].would_fail == ""
    assert "audit mode: not enforced" in answer.note
    assert "(audit, would fail: demo-policy: dontschedule rule health_metric Equals 2" in render(answer)
    document = answer.as_dict()
    assert document["enforcement"] == "audit" and document["nodes"]["node-3"]["would_fail"].startswith("demo-policy")


def test_explain_of_an_enforced_policy_is_unchanged():
    now = 1_800_000_000.0
    samples = {"health_metric": {n: Sample(float(i), now) for i, n in enumerate(NODES)}}
    document = explain({"name": "p", "namespace": "health-metric-demo"}, parse_policy(demo("enforce")), samples,
                       NODES, now, max_age=30.0).as_dict()
    assert "enforcement" not in document and "would_fail" not in document["nodes"]["node-2"]


def test_evaluate_marks_an_audit_policy_and_its_request_enforces_nothing():
    snapshot = Snapshot.build({"health_metric": {n: Sample(float(i), NOW) for i, n in enumerate(NODES)}},
                              NOW, float("inf"))
    table = annotations_for({"node-1": 10.0, "node-2": 10.0, "node-3": 10.0})
    load = LoadState(DEFAULT_POLICY, NOW, table.get, lambda node, window: 0)
    document = evaluate([parse_policy(demo("audit"))], snapshot, NODES, load=load)["policies"][KEY]
    assert document["enforcement"] == "audit"
    assert [n for n, v in document["filter"].items() if not v["passed"]] == ["node-2", "node-3"]  # what it would do
    assert all(v["passed"] for v in document["request"]["filter"].values())  # what the scheduler is answered
