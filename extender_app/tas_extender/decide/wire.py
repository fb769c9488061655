"""kube-scheduler's extender wire format: reading ExtenderArgs, writing ExtenderFilterResult.

In full-Nodes mode a request carries every candidate Node object whole (megabytes in a large
cluster), and the filter answer must give the passing ones back unchanged. Building
Python objects for all of that costs far more than the decision itself, so the body is decoded
with msgspec against the few fields the decision reads (the pod's metadata, each node's name):
every other field is skipped in C, and each Node object stays a view of the request's own bytes
(msgspec.Raw), which the filter answer copies back, as sent, for the passing nodes.

In NodeNames mode the array of names is kept as sent too (`ExtenderArgs.names_json`): it is the
key of an answer reused between syncs (decision.Decider), and an array already decided once need
not be decoded again, into a thousand strings hashed and compared one by one, to be found.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson


class BadRequest(Exception):
    """The request cannot be decided on; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class _Pod(msgspec.Struct):
    metadata: dict[str, Any] = {}


class _NodeList(msgspec.Struct):
    """A NodeList's fields (those of Go's v1.NodeList), each as sent; an empty Raw: not sent."""
    items: list[msgspec.Raw]
    apiVersion: msgspec.Raw = msgspec.Raw()
    kind: msgspec.Raw = msgspec.Raw()
    metadata: msgspec.Raw = msgspec.Raw()


class _Args(msgspec.Struct):
    Pod: _Pod
    Nodes: _NodeList | None = None
    NodeNames: msgspec.Raw = msgspec.Raw()  # as sent (b"null" when null, empty when not sent)


class _NodeMeta(msgspec.Struct):
    name: str


class _Node(msgspec.Struct):
    metadata: _NodeMeta


_ARGS = msgspec.json.Decoder(_Args)
_NODE = msgspec.json.Decoder(_Node)
_NAMES = msgspec.json.Decoder(list[str])


@dataclass
class ExtenderArgs:
    pod: dict[str, Any]  # the pod's metadata (name, namespace, labels, ownerReferences)
    nodes: _NodeList | None  # full-Nodes mode: the NodeList, its Node objects unread
    names_json: bytes | None = None  # NodeNames mode: the array of names as sent
    _names: list[str] | None = None

    @property
    def names(self) -> list[str]:
        """The candidate node names, in the order the scheduler sent them."""
        if self._names is None:
            assert self.names_json is not None  # one of the two is set by parse
            self._names = _decode_names(self.names_json)
        return self._names


# Where msgspec says a value has the wrong type, what to tell the caller.
_WRONG = (("`$.Pod", "ExtenderArgs.Pod must be an object with metadata"),
          ("`$.Nodes", "ExtenderArgs.Nodes.items must be a list of Nodes with metadata.name"))
_BAD_NODES = _WRONG[1][1]
_BAD_NAMES = "ExtenderArgs.NodeNames must be a list of strings"  # the array is decoded apart


def parse(raw: bytes | bytearray, known: Container[bytes] = ()) -> ExtenderArgs:
    """ExtenderArgs from a request body; BadRequest (400) names what is wrong with it.

    `known`: NodeNames arrays (as sent) decoded before, which are not decoded again here; their
    names are decoded when first read, if ever."""
    try:
        args = _ARGS.decode(raw)
    except msgspec.ValidationError as error:
        where = str(error)
        message = next((said for path, said in _WRONG if path in where), None)
        if message is None:
            message = ("ExtenderArgs must be a JSON object" if " - at " not in where
                       else f"ExtenderArgs is not usable: {where}")
        raise BadRequest(400, message) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        raise _not_json(error) from None
    meta = args.Pod.metadata
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        raise BadRequest(400, "Pod.metadata.labels must be an object")
    if args.Nodes is not None:
        return ExtenderArgs(meta, args.Nodes, _names=_node_names(args.Nodes.items))
    names_json = bytes(args.NodeNames)
    if names_json not in (b"", b"null"):
        return ExtenderArgs(meta, None, names_json, None if names_json in known else _decode_names(names_json))
    raise BadRequest(400, "ExtenderArgs has neither Nodes nor NodeNames")


def _decode_names(names_json: bytes) -> list[str]:
    try:
        return _NAMES.decode(names_json)
    except msgspec.ValidationError:
        raise BadRequest(400, _BAD_NAMES) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        raise _not_json(error) from None


def _not_json(error: Exception) -> BadRequest:
    if isinstance(error, UnicodeDecodeError):
        return BadRequest(400, f"request body is not valid JSON: a string is not UTF-8 ({error.reason})")
    if isinstance(error, RecursionError):
        return BadRequest(400, "request body is not valid JSON: nested too deep")
    return BadRequest(400, f"request body is not valid JSON: {error}")


# How Go's encoding/json writes a v1.Node in a list: metadata first, name first in it (a list's
# items carry no kind or apiVersion), no spaces. A node name is at most 253 characters.
_NAME_FIRST = b'{"metadata":{"name":"'
_NAME_HEAD = len(_NAME_FIRST) + 254
_STRING = msgspec.json.Decoder(str)


def _node_names(items: list[msgspec.Raw]) -> list[str]:
    """Each item's metadata.name: read from the item's first bytes when it starts as Go writes
    it (a quarter of the time of decoding every item again), else from the whole item."""
    names = []
    for item in items:
        head = bytes(memoryview(item)[:_NAME_HEAD])
        if head.startswith(_NAME_FIRST):
            end = head.find(b'"', len(_NAME_FIRST))  # -1 or an escaped quote: not a string, decoded below
            try:
                names.append(_STRING.decode(head[len(_NAME_FIRST) - 1:end + 1]))
                continue
            except (msgspec.DecodeError, UnicodeDecodeError):
                pass
        try:
            names.append(_NODE.decode(item).metadata.name)
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            raise BadRequest(400, _BAD_NODES) from None
    return names


def filter_result(args: ExtenderArgs, failed: dict[str, str]) -> bytes:
    """The ExtenderFilterResult: the passing nodes in the form they were sent, and the reasons."""
    rest = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.nodes is None:
        return orjson.dumps({"Nodes": None, "NodeNames": [n for n in args.names if n not in failed], **rest})
    # The NodeList's own fields as sent, then the passing items, in one join: in a large cluster
    # every extra concatenation copies the whole answer again.
    parts = [b'{"Nodes":{']
    for key in ("apiVersion", "kind", "metadata"):
        value = getattr(args.nodes, key)
        if len(value):
            parts += [b'"', key.encode(), b'":', value, b","]
    parts.append(b'"items":[')
    for item, name in zip(args.nodes.items, args.names, strict=True):
        if name not in failed:
            parts += [item, b","]
    if parts[-1] == b",":
        parts.pop()
    parts += [b']},"NodeNames":null,', orjson.dumps(rest)[1:]]
    return b"".join(parts)


def filter_error(message: str) -> bytes:
    """An ExtenderFilterResult that decides nothing and says why in `Error`: a refused or not yet
    decidable filter call keeps the result's shape."""
    return orjson.dumps({"Nodes": None, "NodeNames": None, "FailedNodes": {},
                         "FailedAndUnresolvableNodes": {}, "Error": message})
