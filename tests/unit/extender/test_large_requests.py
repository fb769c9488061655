"""Full-Nodes requests of several MB: answered whole, in pieces, one at a time (api.Verbs)."""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace

from support.asgi import AsgiClient

from tas_extender.serve import api
from tas_extender.serve.api import LARGE_BODY, SEND_PIECE, Verbs, create_app
from tas_extender.decide.telemetry import Telemetry

JSON = {"Content-Type": "application/json"}


def _full_nodes(request_body, count: int) -> tuple[bytes, dict]:
    """The real full-Nodes request with `count` nodes named node-1.. (node-2 and node-3 are unhealthy)."""
    sent = json.loads(request_body("filter-full-nodes"))
    template = sent["Nodes"]["items"][0]
    items = []
    for i in range(1, count + 1):
        node = copy.deepcopy(template)
        node["metadata"]["name"] = f"node-{i}"
        items.append(node)
    sent["Nodes"]["items"] = items
    return json.dumps(sent).encode(), sent


def test_a_request_of_several_mb_gets_every_passing_node_back_unchanged(engine, request_body):
    client = AsgiClient(create_app(engine, Telemetry(), max_body_bytes=64 << 20, readiness=list))
    raw, sent = _full_nodes(request_body, 400)
    assert len(raw) > LARGE_BODY and len(raw) > SEND_PIECE  # the paths under test: one at a time, in pieces
    response = client.post("/scheduler/filter", content=raw, headers=JSON)
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content)
    body = response.json()
    assert sorted(body["FailedNodes"]) == ["node-2", "node-3"]
    assert body["Nodes"]["items"] == [n for n in sent["Nodes"]["items"]
                                      if n["metadata"]["name"] not in body["FailedNodes"]]


class _Recorder:
    """An answer function that notes how many calls are being answered at once."""

    def __init__(self) -> None:
        self.now = self.most = 0

    async def enter(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.01)  # another request's turn, if it may have one

    def leave(self) -> None:
        self.now -= 1


def _scope(length: int) -> dict:
    return {"type": "http", "method": "POST", "path": "/scheduler/prioritize",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]}


def test_large_bodies_are_answered_one_at_a_time_and_small_ones_do_not_wait(monkeypatch):
    decider = SimpleNamespace(filter=lambda args: b"{}", prioritize=lambda args: b"[]",
                              load_filter=lambda args: b"{}", load_prioritize=lambda args: b"[]")
    verbs = Verbs(decider, Telemetry(), limit=1 << 30)
    large, small = _Recorder(), _Recorder()
    order: list[str] = []
    monkeypatch.setattr(api.wire, "parse", lambda body: body)

    def receiver(size: int, recorder: _Recorder, name: str):
        async def receive() -> dict:
            await recorder.enter()  # the body is being read: the request is in flight
            order.append(name)
            return {"type": "http.request", "body": b"x" * size, "more_body": False}
        return receive

    def sender(recorder: _Recorder):
        async def send(message: dict) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                recorder.leave()
        return send

    async def run() -> None:
        calls = [verbs(_scope(LARGE_BODY + 1), receiver(LARGE_BODY + 1, large, f"large-{i}"), sender(large))
                 for i in range(4)]
        calls.append(verbs(_scope(10), receiver(10, small, "small"), sender(small)))
        await asyncio.gather(*calls)

    asyncio.run(run())
    assert large.most == 1, "two large bodies were in memory at once"
    assert order.index("small") < order.index("large-1"), f"the small request waited behind large ones: {order}"


def test_a_large_answer_is_written_in_pieces_that_add_up_to_it():
    answer = bytes(range(256)) * (SEND_PIECE * 5 // 2 // 256)
    messages: list[dict] = []

    async def send(message: dict) -> None:
        messages.append(message)

    asyncio.run(api.send_answer(send, 200, answer))
    start, *pieces = messages
    assert dict(start["headers"])[b"content-length"] == str(len(answer)).encode()
    assert len(pieces) == 3 and all(len(p["body"]) <= SEND_PIECE for p in pieces)
    assert [p.get("more_body", False) for p in pieces] == [True, True, False]
    assert b"".join(p["body"] for p in pieces) == answer
