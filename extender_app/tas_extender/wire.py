"""kube-scheduler's extender wire format: reading ExtenderArgs, writing ExtenderFilterResult.

In full-Nodes mode a request carries every candidate Node object whole (about 4 KB each, 21 MB
at 5000 nodes), and the filter answer must give the passing ones back unchanged. Building
Python objects for all of that costs far more than the decision itself (and the cyclic garbage
collector runs many times over the new objects), so the body is parsed lazily with simdjson:
only the pod's metadata and each node's name become Python objects, and the passing nodes are
copied back to the answer as JSON straight from the parsed document.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import simdjson


class BadRequest(Exception):
    """The request cannot be decided on; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class ExtenderArgs:
    pod: dict  # the pod's metadata (name, namespace, labels, ownerReferences)
    names: list[str]  # candidate node names, in the order the scheduler sent them
    nodes: simdjson.Object | None  # the NodeList in full-Nodes mode, still as parsed JSON


def parse(raw: bytes) -> ExtenderArgs:
    """ExtenderArgs from a request body; BadRequest (400) names what is wrong with it."""
    try:
        # One parser per request: a simdjson parser cannot be reused while its document lives.
        body = simdjson.Parser().parse(raw)
    except (ValueError, RuntimeError) as error:  # RuntimeError: nesting deeper than 1024
        raise BadRequest(400, f"request body is not valid JSON: {error}") from None
    if not isinstance(body, simdjson.Object):
        raise BadRequest(400, "ExtenderArgs must be a JSON object")
    pod = body.get("Pod")
    meta = pod.get("metadata", {}) if isinstance(pod, simdjson.Object) else None
    if not isinstance(meta, (simdjson.Object, dict)):
        raise BadRequest(400, "ExtenderArgs.Pod must be an object with metadata")
    meta = _plain(meta)
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        raise BadRequest(400, "Pod.metadata.labels must be an object")
    nodes, names = body.get("Nodes"), body.get("NodeNames")
    if nodes is not None:
        return ExtenderArgs(meta, _node_names(nodes), nodes)
    if names is not None:
        if not isinstance(names, simdjson.Array):
            raise BadRequest(400, "ExtenderArgs.NodeNames must be a list of strings")
        names = names.as_list()
        if not set(map(type, names)) <= {str}:
            raise BadRequest(400, "ExtenderArgs.NodeNames must be a list of strings")
        return ExtenderArgs(meta, names, None)
    raise BadRequest(400, "ExtenderArgs has neither Nodes nor NodeNames")


_BAD_NODES = "ExtenderArgs.Nodes.items must be a list of Nodes with metadata.name"


def _node_names(nodes: object) -> list[str]:
    items = nodes.get("items") if isinstance(nodes, simdjson.Object) else None
    if not isinstance(items, simdjson.Array):
        raise BadRequest(400, _BAD_NODES)
    names = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, simdjson.Object) else None
        name = meta.get("name") if isinstance(meta, simdjson.Object) else None
        if not isinstance(name, str):
            raise BadRequest(400, _BAD_NODES)
        names.append(name)
    return names


def filter_result(args: ExtenderArgs, failed: dict[str, str]) -> bytes:
    """The ExtenderFilterResult: the passing nodes in the form they were sent, and the reasons."""
    rest = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.nodes is None:
        return orjson.dumps({"Nodes": None, "NodeNames": [n for n in args.names if n not in failed], **rest})
    # One join at the end: at 5000 nodes every extra concatenation copies 20 MB.
    if failed:
        # The NodeList's own fields (apiVersion, kind, metadata) as sent, then the passing items.
        head = orjson.dumps({key: _plain(args.nodes[key]) for key in args.nodes.keys() if key != "items"})
        kept = [item.mini for item, name in zip(args.nodes["items"], args.names) if name not in failed]
        node_list = [head[:-1], b"," if len(head) > 2 else b"", b'"items":[', b",".join(kept), b"]}"]
    else:
        node_list = [args.nodes.mini]
    return b"".join([b'{"Nodes":', *node_list, b',"NodeNames":null,', orjson.dumps(rest)[1:]])


def _plain(value: object) -> object:
    """A small parsed value as Python objects."""
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value
