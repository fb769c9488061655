"""The controller's watches retry a failing API server with exponential backoff and full jitter,
from the base again once a list or an event comes through."""

from __future__ import annotations

import random
import threading

import pytest
from kubernetes import client

from tas_extender.cluster import watch as cluster_watch
from tas_extender.cluster.backoff import Backoff

LISTING = {"items": [], "metadata": {"resourceVersion": "7"}}
EVENT = {"type": "MODIFIED", "object": {"metadata": {"name": "n"}}}
DOWN = ConnectionRefusedError("API server down")


class ApiServer:
    """Scripted answers: to each list call (LISTING or an exception raised) and to each watch
    (events, an exception raised after them, if any); the watches stop when both run out."""

    def __init__(self, lists: list, watches: list[list], monkeypatch: pytest.MonkeyPatch) -> None:
        self.lists, self.watches = list(lists), [list(w) for w in watches]
        self.stop = threading.Event()
        self.waits: list[float] = []
        self.events: list[str] = []
        server = self

        class FakeWatch:
            resource_version = "8"

            def stream(self, list_fn, **kwargs):
                if not server.watches:
                    server.stop.set()
                    return
                for item in server.watches.pop(0):
                    if isinstance(item, Exception):
                        raise item
                    yield item

            def stop(self) -> None:
                pass

        monkeypatch.setattr(cluster_watch.watch, "Watch", FakeWatch)

    def list_fn(self):
        if not self.lists:
            self.stop.set()
            raise DOWN
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def run(self, backoff: Backoff) -> list[float]:
        cluster_watch.watch_forever("node", self.list_fn, lambda items: None,
                                 lambda kind, obj: self.events.append(kind), self.stop,
                                 backoff=backoff, sleep=self.sleep)
        return self.waits


def whole(jitter: float = 1.0) -> Backoff:
    """A backoff whose jitter always draws `jitter`: its waits are that share of each ceiling."""
    return Backoff(jitter=lambda: jitter)


@pytest.mark.parametrize("jitter", [1.0, 0.5, 0.0])
def test_failures_in_a_row_wait_a_random_share_of_a_ceiling_doubling_from_half_a_second_to_30(monkeypatch, jitter):
    server = ApiServer([DOWN] * 9, [], monkeypatch)
    ceilings = [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30]
    assert server.run(whole(jitter)) == [c * jitter for c in ceilings]


def test_a_successful_list_starts_the_waits_from_the_base_again(monkeypatch):
    server = ApiServer([DOWN, DOWN, DOWN, LISTING], [[DOWN], [DOWN]], monkeypatch)
    assert server.run(whole()) == [0.5, 1, 2, 0.5, 1]


def test_an_event_starts_the_waits_from_the_base_again(monkeypatch):
    server = ApiServer([LISTING], [[DOWN], [DOWN], [EVENT, DOWN], [DOWN]], monkeypatch)
    assert server.run(whole()) == [0.5, 1, 0.5, 1]
    assert server.events == ["MODIFIED"]


def test_an_expired_resource_version_lists_again_without_waiting(monkeypatch):
    gone = client.ApiException(status=410, reason="Gone")
    server = ApiServer([LISTING, LISTING], [[gone]], monkeypatch)
    assert server.run(whole()) == []
    assert server.lists == []  # listed twice


def test_an_api_error_is_retried_with_the_same_backoff(monkeypatch):
    unavailable = client.ApiException(status=503, reason="Service Unavailable")
    server = ApiServer([unavailable, unavailable, LISTING], [], monkeypatch)
    assert server.run(whole()) == [0.5, 1]


def test_waits_are_spread_between_zero_and_the_ceiling():
    backoff = Backoff(jitter=random.Random(1).random)
    waits = [backoff.next() for _ in range(40)][6:]  # at the 30 s cap from the seventh on
    assert all(0 <= wait < 30 for wait in waits)
    assert max(waits) - min(waits) > 10
