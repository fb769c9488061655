"""Reading ExtenderArgs and writing ExtenderFilterResult without building the Node objects."""

from __future__ import annotations

import json
import pathlib

import pytest

from tas_extender.decide import wire

FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "scheduler-requests"


def _real(name: str) -> dict:
    return json.loads((FIXTURE / f"{name}-k8s1.36.json").read_text())


def _full_nodes_request(list_fields: dict) -> dict:
    args = _real("filter-full-nodes")
    args["Nodes"] = {**list_fields, "items": args["Nodes"]["items"]}
    return args


@pytest.mark.parametrize("list_fields", [{}, {"metadata": {}}, {"apiVersion": "v1", "kind": "NodeList",
                                                                 "metadata": {"resourceVersion": "42"}}],
                         ids=["no list fields", "empty metadata", "apiVersion kind and metadata"])
@pytest.mark.parametrize("failed", [{}, {"node-2": "r"}, {"node-1": "a", "node-2": "b", "node-3": "c"}],
                         ids=["none failed", "one failed", "all failed"])
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact, as Go writes", "spaced"])
def test_the_passing_nodes_and_the_list_fields_come_back_as_sent(list_fields, failed, separators):
    sent = _full_nodes_request(list_fields)
    args = wire.parse(json.dumps(sent, separators=separators).encode())
    assert args.names == ["node-1", "node-2", "node-3"]
    result = json.loads(wire.filter_result(args, failed))
    assert result["Nodes"] == {**list_fields, "items": [n for n in sent["Nodes"]["items"]
                                                         if n["metadata"]["name"] not in failed]}
    assert result["NodeNames"] is None and result["FailedNodes"] == failed
    assert result["FailedAndUnresolvableNodes"] == {} and result["Error"] == ""


def test_node_names_mode_answers_with_names_only():
    args = wire.parse(json.dumps(_real("filter-node-names")).encode())
    result = json.loads(wire.filter_result(args, {"node-3": "hot"}))
    assert result["Nodes"] is None and result["NodeNames"] == ["node-1", "node-2"]
    assert result["FailedNodes"] == {"node-3": "hot"}


def test_a_names_array_decided_before_is_not_decoded_again_until_read():
    raw = json.dumps(_real("filter-node-names"), separators=(",", ":")).encode()
    names_json = wire.parse(raw).names_json
    assert names_json == b'["node-1","node-2","node-3"]'
    known = wire.parse(raw, known={names_json})
    assert known._names is None and known.names_json == names_json
    assert known.names == ["node-1", "node-2", "node-3"]  # decoded when read


def test_a_malformed_names_array_is_refused_though_another_is_known():
    known = {b'["node-1"]'}
    with pytest.raises(wire.BadRequest) as refused:
        wire.parse(b'{"Pod": {}, "NodeNames": ["node-1", 2]}', known=known)
    assert refused.value.status == 400 and "list of strings" in refused.value.message


def test_the_pod_metadata_is_plain_python():
    args = wire.parse(json.dumps(_real("filter-node-names")).encode())
    assert isinstance(args.pod, dict) and args.pod["labels"]["telemetry-policy"] == "demo-policy"


@pytest.mark.parametrize("item", [
    '{"metadata":{"name":"node-\\"1"}}', '{"metadata":{"name":"node-\\u0031"}}', '{"metadata":{"uid":"u","name":"node-1"}}',
    '{"metadata":{"name":"' + "n" * 300 + '"}}', '{"metadata": {"name": "node-1"}}',
], ids=["escaped quote", "escaped digit", "name not first", "longer than a node name", "spaced"])
def test_a_node_name_not_written_as_go_writes_it_is_read_whole(item):
    args = wire.parse(b'{"Pod":{"metadata":{}},"Nodes":{"items":[' + item.encode() + b"]}}")
    assert args.names == [json.loads(item)["metadata"]["name"]]


@pytest.mark.parametrize(("raw", "message"), [
    (b"\xff\xfe{}", "not valid JSON"),
    (b'{"Pod": {"metadata": {"name": "\xff"}}, "NodeNames": []}', "not UTF-8"),
    (b'{"Pod": {}, "NodeNames": ["\xff"]}', "not UTF-8"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata":{"name":"\xff"}}]}}', "metadata.name"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "\xff"}}]}}', "metadata.name"),
    (b'{"Pod": {}, "x": ' + b"[" * 2000 + b"]" * 2000 + b"}", "not valid JSON"),
    (b"", "not valid JSON"),
    (b'{"Pod": {"metadata": null}, "NodeNames": []}', "Pod must be an object"),
    (b'{"Pod": {}, "Nodes": {"items": {}}}', "metadata.name"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": 7}}]}}', "metadata.name"),
    (b'{"Pod": {}, "Nodes": []}', "metadata.name"),
    (b'{"Pod": {}, "NodeNames": "node-1"}', "list of strings"),
    (b'{"Pod": {}, "NodeNames": [["node-1"]]}', "list of strings"),
    (b'{"Pod": {}, "NodeNames": null}', "neither Nodes nor NodeNames"),
], ids=["not UTF-8", "pod name not UTF-8", "node name not UTF-8", "item name not UTF-8",
        "spaced item name not UTF-8", "nested past 1024", "empty", "null metadata", "items not a list", "name not a string",
        "Nodes not an object", "NodeNames a string", "NodeNames nested", "NodeNames null"])
def test_unusable_args_are_refused_with_what_is_wrong(raw, message):
    with pytest.raises(wire.BadRequest) as refused:
        wire.parse(raw)
    assert refused.value.status == 400 and message in refused.value.message
