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
from typing import Any, cast

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
    pod: dict[str, Any]  # the pod's metadata (name, namespace, labels, ownerReferences)
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
    if not isinstance(pod, simdjson.Object):
        raise BadRequest(400, "ExtenderArgs.Pod must be an object with metadata")
    if "metadata" not in pod:
        meta: dict[str, Any] = {}
    elif isinstance(sent_meta := pod["metadata"], simdjson.Object):
        meta = sent_meta.as_dict()
    else:
        raise BadRequest(400, "ExtenderArgs.Pod must be an object with metadata")
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        raise BadRequest(400, "Pod.metadata.labels must be an object")
    nodes, names = body.get("Nodes"), body.get("NodeNames")
    if nodes is not None:
        if not isinstance(nodes, simdjson.Object):
            raise BadRequest(400, _BAD_NODES)
        return ExtenderArgs(meta, _node_names(nodes), nodes)
    if names is not None:
        listed = names.as_list() if isinstance(names, simdjson.Array) else None
        # One pass in C over up to thousands of names, rather than isinstance on each.
        if listed is None or not set(map(type, listed)) <= {str}:
            raise BadRequest(400, "ExtenderArgs.NodeNames must be a list of strings")
        return ExtenderArgs(meta, cast(list[str], listed), None)
    raise BadRequest(400, "ExtenderArgs has neither Nodes nor NodeNames")


_BAD_NODES = "ExtenderArgs.Nodes.items must be a list of Nodes with metadata.name"


def _items(nodes: simdjson.Object) -> simdjson.Array:
    items = nodes.get("items")
    if not isinstance(items, simdjson.Array):
        raise BadRequest(400, _BAD_NODES)
    return items


def _node_names(nodes: simdjson.Object) -> list[str]:
    names = []
    for item in _items(nodes):
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
        # parse() checked that every item is an object; pysimdjson's stub types `mini` as str,
        # but the extension returns the compact JSON as bytes.
        items = cast(list[simdjson.Object], _items(args.nodes))
        kept = cast(list[bytes], [item.mini for item, name in zip(items, args.names, strict=True)
                                  if name not in failed])
        node_list = [head[:-1], b"," if len(head) > 2 else b"", b'"items":[', b",".join(kept), b"]}"]
    else:
        node_list = [cast(bytes, args.nodes.mini)]
    return b"".join([b'{"Nodes":', *node_list, b',"NodeNames":null,', orjson.dumps(rest)[1:]])


def _plain(value: object) -> object:
    """A small parsed value as Python objects."""
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value
