"""Fuzzing the real `tas-extender serve` process over mutual TLS: no input gets a 5xx or a hang.

Two generators: schemathesis, from the app's OpenAPI document (built in-process, as the server
does not serve it; bodies that follow the ExtenderArgs schema and bodies that break it), and a
hypothesis strategy of ExtenderArgs naming the demo policy and its nodes, so the decision code
runs on every example and its answer can be checked against the request.
"""

from __future__ import annotations

import json

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tas_extender.serve.api import create_app

TIMEOUT = 10  # seconds a single answer may take before the test calls it a hang
EXAMPLES = 150
VERBS = ("filter", "prioritize")
KNOWN_NODES = ["node-1", "node-2", "node-3"]  # the nodes tests/fixtures/health.prom has values for
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                HealthCheck.filter_too_much, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def mtls(pki) -> dict:
    """requests' arguments for a client of the test CA (schemathesis calls through requests)."""
    with requests.Session() as session:
        yield {"session": session, "verify": pki.path("ca.crt"),
               "cert": (pki.path("client.crt"), pki.path("client.key"))}


def _verbs_schema():
    """The OpenAPI document of the app the server runs (no engine is needed to describe it)."""
    document = create_app(None, None, 0, readiness=list).openapi()
    loaded = schemathesis.openapi.from_dict(document).include(path_regex="^/scheduler/")
    loaded.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    return loaded, document


# Loaded at import: schemathesis's fixture-based loader does not run under pytest 9.
schema, DOCUMENT = _verbs_schema()


def test_the_document_the_fuzzing_uses_describes_both_verbs_but_is_not_served(tls_server, pki):
    assert {f"/scheduler/{verb}" for verb in VERBS} <= set(DOCUMENT["paths"])
    with httpx.Client(verify=pki.client_context(), timeout=TIMEOUT) as client:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert client.get(f"{tls_server}{path}").status_code == 404, path


@schema.parametrize()
@FUZZ_SETTINGS
def test_schema_generated_requests_get_2xx_or_4xx_in_time(case, tls_server, mtls):
    response = case.call(base_url=tls_server, timeout=TIMEOUT, **mtls)
    assert response.status_code < 500, f"{response.status_code} for {case.body!r}: {response.text[:500]}"
    if response.status_code >= 400:
        assert response.json()["Error"], "a refusal says why"


# --- ExtenderArgs the decision code acts on -------------------------------------------------

_text = st.text(max_size=30)
_labels = st.one_of(
    st.just({"telemetry-policy": "demo-policy"}),
    st.dictionaries(st.sampled_from(["telemetry-policy", "app", ""]), st.one_of(_text, st.just("demo-policy"))),
)
_node_names = st.lists(st.one_of(st.sampled_from(KNOWN_NODES), _text), max_size=40)


@st.composite
def extender_args(draw) -> tuple[dict, list[str]]:
    names = draw(_node_names)
    meta = {"name": draw(_text), "namespace": draw(st.sampled_from(["health-metric-demo", "default", ""])),
            "labels": draw(_labels)}
    if draw(st.booleans()):
        nodes = {"items": [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}} for n in names]}
        return {"Pod": {"metadata": meta}, "Nodes": nodes, "NodeNames": None}, names
    return {"Pod": {"metadata": meta}, "Nodes": None, "NodeNames": names}, names


@pytest.fixture(scope="module")
def mtls_client(tls_server, pki):
    with httpx.Client(base_url=tls_server, verify=pki.client_context(), timeout=TIMEOUT) as client:
        yield client


@FUZZ_SETTINGS
@given(args=extender_args(), verb=st.sampled_from(VERBS))
def test_well_formed_requests_get_a_decision_about_exactly_the_nodes_sent(mtls_client, args, verb):
    body, names = args
    response = mtls_client.post(f"/scheduler/{verb}", content=json.dumps(body),
                                headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text[:500]
    result = response.json()
    if verb == "prioritize":
        assert [r["Host"] for r in result] == names
        assert all(0 <= r["Score"] <= 10 for r in result)
        return
    kept = result["NodeNames"] if body["NodeNames"] is not None else [
        i["metadata"]["name"] for i in result["Nodes"]["items"]]
    assert set(result["FailedNodes"]) <= set(names)
    assert kept == [n for n in names if n not in result["FailedNodes"]]
    assert result["Error"] == ""


@FUZZ_SETTINGS
@given(content=st.one_of(st.binary(max_size=2000), st.text(max_size=2000).map(str.encode)),
       verb=st.sampled_from(VERBS),
       content_type=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", ""]))
def test_arbitrary_bytes_get_a_4xx_or_a_decision_in_time(mtls_client, content, verb, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    response = mtls_client.post(f"/scheduler/{verb}", content=content, headers=headers)
    assert response.status_code < 500, response.text[:500]


def test_the_server_still_answers_after_the_fuzzing(mtls_client):
    # Runs last in this module: the process survived everything above.
    assert mtls_client.get("/healthz").json() == {"status": "ok"}
