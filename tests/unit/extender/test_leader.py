"""Leader election: another holder's Lease expires by this process's own clock, from the last
change it saw, whatever the holder's renewTime says (clocks of two hosts can be far apart)."""

from __future__ import annotations

import copy
import datetime

import pytest
from kubernetes import client

from tas_extender.cluster.leader import LeaseElector

DURATION = 15
RENEW = 5.0
LONG_AGO = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
FAR_AHEAD = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)


class FakeLeases:
    """CoordinationV1Api's Lease calls over one stored Lease, with the API server's resourceVersion
    check on replace; records each call."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None
        self.version = 0
        self.calls: list[str] = []

    def _store(self, lease: client.V1Lease) -> client.V1Lease:
        self.version += 1
        lease.metadata.resource_version = str(self.version)
        self.lease = copy.deepcopy(lease)
        return copy.deepcopy(lease)

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        self.calls.append("read")
        if self.lease is None:
            raise client.ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self.calls.append("create")
        if self.lease is not None:
            raise client.ApiException(status=409, reason="AlreadyExists")
        return self._store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self.calls.append("replace")
        assert self.lease is not None
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise client.ApiException(status=409, reason="Conflict")
        return self._store(body)

    def held_by(self, holder: str | None, renewed: datetime.datetime) -> None:
        """Another process writes the Lease: a new holder, or the same one renewing."""
        self._store(client.V1Lease(
            metadata=client.V1ObjectMeta(name="tas-extender", namespace="tas"),
            spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=DURATION,
                                    acquire_time=renewed, renew_time=renewed, lease_transitions=0)))

    @property
    def holder(self) -> str | None:
        return self.lease.spec.holder_identity if self.lease else None


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def leases() -> FakeLeases:
    return FakeLeases()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def elector(leases, clock) -> LeaseElector:
    return LeaseElector(leases, "tas", "tas-extender", "me", lease_seconds=DURATION, renew_seconds=RENEW,
                        clock=clock)


def rounds_until(elector: LeaseElector, clock: Clock, seconds: float, between=lambda: None) -> list[bool]:
    """try_acquire every RENEW seconds of `clock` for `seconds`, calling `between` before each."""
    results = []
    end = clock.now + seconds
    while clock.now <= end:
        between()
        results.append(elector.try_acquire())
        clock.now += RENEW
    return results


@pytest.mark.parametrize("renewed", [LONG_AGO, FAR_AHEAD], ids=["holder's clock behind", "holder's clock ahead"])
def test_a_holder_that_keeps_renewing_is_not_taken_over_whatever_its_renew_time_says(elector, leases, clock,
                                                                                      renewed):
    leases.held_by("other", renewed)
    stamps = iter(range(1, 1000))

    def other_renews() -> None:  # a renewal with the holder's own (skewed) clock
        leases.held_by("other", renewed + datetime.timedelta(seconds=next(stamps)))

    assert not any(rounds_until(elector, clock, 10 * DURATION, other_renews))
    assert leases.holder == "other"


@pytest.mark.parametrize("renewed", [LONG_AGO, FAR_AHEAD], ids=["holder's clock behind", "holder's clock ahead"])
def test_a_holder_that_stops_renewing_is_taken_over_once_the_duration_passed_on_our_clock(elector, leases, clock,
                                                                                          renewed):
    leases.held_by("other", renewed)
    assert not elector.try_acquire()  # first seen now: the holder has a whole duration from here
    clock.now += DURATION - 1
    assert not elector.try_acquire()
    clock.now += 2
    assert elector.try_acquire()
    assert leases.holder == "me"
    assert leases.lease.spec.lease_transitions == 1


def test_a_change_seen_restarts_the_duration(elector, leases, clock):
    leases.held_by("other", LONG_AGO)
    assert not elector.try_acquire()
    clock.now += DURATION - 1
    leases.held_by("other", LONG_AGO)  # same renewTime, but a write: a new resourceVersion
    assert not elector.try_acquire()
    clock.now += DURATION - 1
    assert not elector.try_acquire()
    clock.now += 2
    assert elector.try_acquire()


def test_a_released_lease_is_taken_at_once(elector, leases, clock):
    leases.held_by(None, FAR_AHEAD)
    assert elector.try_acquire()
    assert leases.holder == "me"


def test_no_lease_is_created_and_ours_renewed_every_round(elector, leases, clock):
    assert all(rounds_until(elector, clock, 3 * DURATION))
    assert leases.calls[:2] == ["read", "create"]
    assert set(leases.calls[2:]) == {"read", "replace"}
    assert leases.lease.spec.lease_transitions == 0


def test_a_concurrent_takeover_loses_to_the_first_writer(elector, leases, clock):
    leases.held_by("other", LONG_AGO)
    elector.try_acquire()
    clock.now += DURATION + 1
    real_read = leases.read_namespaced_lease

    def read_then_third_writes(name: str, namespace: str) -> client.V1Lease:
        lease = real_read(name, namespace)
        leases.held_by("third", LONG_AGO)  # between our read and our replace
        return lease

    leases.read_namespaced_lease = read_then_third_writes  # type: ignore[method-assign]
    assert not elector.try_acquire()
    assert leases.holder == "third"
