"""The extender verbs over HTTP (in process): real scheduler requests, and bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = {"Content-Type": "application/json"}


def test_filter_in_node_names_mode_returns_only_names_it_was_sent(client, request_body):
    response = client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    assert response.status_code == 200
    body = response.json()
    assert body["Nodes"] is None and body["NodeNames"] == ["node-1"]
    assert body["FailedNodes"]["node-2"] == "demo-policy: dontschedule rule health_metric Equals 1 violated (value 1)"
    assert "health_metric Equals 2" in body["FailedNodes"]["node-3"]
    assert body["Error"] == ""


def test_filter_in_full_nodes_mode_returns_the_passing_nodes_unchanged(client, request_body):
    sent = json.loads(request_body("filter-full-nodes"))
    body = client.post("/scheduler/filter", content=request_body("filter-full-nodes"), headers=JSON).json()
    assert body["NodeNames"] is None
    assert body["Nodes"]["items"] == [n for n in sent["Nodes"]["items"] if n["metadata"]["name"] == "node-1"]
    assert sorted(body["FailedNodes"]) == ["node-2", "node-3"]


@pytest.mark.parametrize("mode", ["node-names", "full-nodes"])
def test_prioritize_scores_lower_health_higher(client, request_body, mode):
    body = client.post("/scheduler/prioritize", content=request_body(f"prioritize-{mode}"), headers=JSON).json()
    assert body == [{"Host": "node-1", "Score": 10}, {"Host": "node-2", "Score": 5}, {"Host": "node-3", "Score": 0}]


def _with_pod_labels(raw: bytes, labels: dict) -> bytes:
    args = json.loads(raw)
    args["Pod"]["metadata"]["labels"] = labels
    return json.dumps(args).encode()


@pytest.mark.parametrize("labels", [{"app": "demo"}, {"telemetry-policy": "no-such-policy"}],
                         ids=["no policy label", "missing policy"])
def test_pod_without_a_live_policy_is_not_filtered_and_scores_zero(client, request_body, labels):
    body = client.post("/scheduler/filter", headers=JSON,
                       content=_with_pod_labels(request_body("filter-node-names"), labels)).json()
    assert body["NodeNames"] == ["node-1", "node-2", "node-3"] and body["FailedNodes"] == {}
    scores = client.post("/scheduler/prioritize", headers=JSON,
                         content=_with_pod_labels(request_body("prioritize-node-names"), labels)).json()
    assert {s["Score"] for s in scores} == {0}


def test_policy_in_another_namespace_does_not_apply(client, request_body):
    args = json.loads(request_body("filter-node-names"))
    args["Pod"]["metadata"]["namespace"] = "elsewhere"
    body = client.post("/scheduler/filter", headers=JSON, content=json.dumps(args)).json()
    assert body["FailedNodes"] == {}


@pytest.mark.parametrize(
    ("headers", "content", "status", "message"),
    [
        ({"Content-Type": "text/plain"}, b"{}", 415, "Content-Type must be application/json"),
        ({}, b"{}", 415, "Content-Type"),
        (JSON, b"{not json", 400, "not valid JSON"),
        (JSON, b"[]", 400, "must be a JSON object"),
        (JSON, b'{"Pod": "x", "NodeNames": []}', 400, "Pod must be an object"),
        (JSON, b'{"Pod": {"metadata": {}}}', 400, "neither Nodes nor NodeNames"),
        (JSON, b'{"Pod": {"metadata": {}}, "NodeNames": [1, 2]}', 400, "list of strings"),
        (JSON, b'{"Pod": {"metadata": {}}, "Nodes": {"items": [{}]}}', 400, "metadata.name"),
        (JSON, b'{"Pod": {"metadata": {"labels": []}}, "NodeNames": []}', 400, "labels must be an object"),
        (JSON, b'{"Pod": {}, "NodeNames": []}' + b" " * (2 * 1024 * 1024), 413, "exceeds the limit"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_bad_request_gets_a_4xx_with_an_error_message(client, verb, headers, content, status, message):
    response = client.post(f"/scheduler/{verb}", headers=headers, content=content)
    assert response.status_code == status
    assert message in response.json()["Error"]


def test_wrong_method_gets_405_with_an_error(client):
    response = client.get("/scheduler/filter")
    assert response.status_code == 405 and response.json()["Error"]


def test_health_readiness_and_metrics(client, request_body):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    text = client.get("/metrics").text
    assert 'tas_extender_request_duration_seconds_count{verb="filter"} 1.0' in text
    assert 'tas_extender_decisions_total{result="failed",verb="filter"} 2.0' in text
    assert 'tas_extender_metric_source_up{source="file"} 1.0' in text
    assert 'tas_extender_metric_age_seconds{metric="health_metric"}' in text


def test_a_metric_no_policy_uses_any_more_has_no_age_series(client, engine):
    assert 'tas_extender_metric_age_seconds{metric="health_metric"}' in client.get("/metrics").text
    engine.cache.refresh(set())  # the policy using it is gone: the next sync fetches nothing
    assert "tas_extender_metric_age_seconds{" not in client.get("/metrics").text


def test_metrics_file_changes_are_picked_up_on_the_next_sync(client, engine, metrics_file, request_body):
    metrics_file.write_text('health_metric{node="node-1"} 1\nhealth_metric{node="node-2"} 0\n'
                            'health_metric{node="node-3"} 0\n')
    import os
    os.utime(metrics_file, (1, 1))  # a different mtime, whatever the clock's resolution
    engine.cache.refresh(engine.store.metric_names())
    engine.rebuild()
    body = client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON).json()
    assert body["NodeNames"] == ["node-2", "node-3"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["Pod", "Nodes", "NodeNames", "metadata", "items", "labels", "name", "x"]),
        inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values, verb=st.sampled_from(["filter", "prioritize"]))
def test_no_json_body_causes_a_server_error(client, body, verb):
    response = client.post(f"/scheduler/{verb}", content=json.dumps(body), headers=JSON)
    assert response.status_code in (200, 400), response.text


def _names_request(request_body, names: list[str]) -> bytes:
    args = json.loads(request_body("filter-node-names"))
    args["NodeNames"] = names
    return json.dumps(args).encode()


def test_filter_logs_the_lines_a_tas_user_knows(client, request_body, caplog):
    caplog.set_level("INFO", logger="tas_extender.extender")
    client.post("/scheduler/filter", content=request_body("filter-node-names"), headers=JSON)
    assert "Filtered nodes available for demo-policy : node-1" in caplog.messages
    assert "node-2 violating : health_metric Equals 1 violated (value 1)" in caplog.messages


def test_log_lines_are_shortened_for_thousands_of_nodes(app_for, request_body, caplog):
    names = [f"n{i}" for i in range(3000)]
    client = app_for("".join(f'health_metric{{node="{n}"}} {i % 2}\n' for i, n in enumerate(names)))
    caplog.set_level("INFO", logger="tas_extender.extender")
    body = client.post("/scheduler/filter", content=_names_request(request_body, names), headers=JSON).json()
    assert len(body["FailedNodes"]) == 1500 and len(body["NodeNames"]) == 1500
    assert len(caplog.messages) < 30
    assert "... and 1480 more nodes violating demo-policy" in caplog.messages


@pytest.mark.parametrize(
    ("fail_closed", "passed"),
    [(False, ["node-1", "node-9"]), (True, ["node-1"])],
    ids=["fail open keeps a node without metrics", "fail closed filters it"],
)
def test_node_unknown_to_the_metrics_is_decided_by_the_missing_metrics_flag(app_for, request_body, fail_closed, passed):
    client = app_for('health_metric{node="node-1"} 0\nhealth_metric{node="node-2"} 1\n', fail_closed)
    body = client.post("/scheduler/filter", headers=JSON,
                       content=_names_request(request_body, ["node-1", "node-2", "node-9"])).json()
    assert body["NodeNames"] == passed
    if fail_closed:
        assert "health_metric missing or stale" in body["FailedNodes"]["node-9"]


def test_readyz_says_what_is_not_synced_yet(app_for):
    client = app_for("", readiness=lambda: ["policies not listed yet"])
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "not ready", "waiting": ["policies not listed yet"]}


def test_prioritize_scores_twenty_five_nodes_proportionally_in_request_order(app_for, request_body):
    names = [f"n{i:02d}" for i in range(25)][::-1]
    client = app_for("".join(f'health_metric{{node="n{i:02d}"}} {i * 4}\n' for i in range(25)))
    args = json.loads(request_body("prioritize-node-names"))
    args["NodeNames"] = names + ["no-metrics"]
    body = client.post("/scheduler/prioritize", headers=JSON, content=json.dumps(args)).json()
    assert [entry["Host"] for entry in body] == names + ["no-metrics"]
    scores = {entry["Host"]: entry["Score"] for entry in body}
    assert scores["n00"] == 10 and scores["n24"] == 0 and scores["n12"] == 5 and scores["no-metrics"] == 0
    assert all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values())
