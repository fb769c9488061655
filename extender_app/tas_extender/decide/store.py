"""The policy store: the one owner of the policies the extender and controller use."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tas_extender.decide.policy import Policy, PolicyError


class PolicyStore:
    """Valid policies by namespace/name, and the reason of each invalid one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._valid: dict[str, Policy] = {}
        self._invalid: dict[str, PolicyError] = {}
        self.synced = False  # the first full list has been loaded
        self.listeners: list[Callable[[], object]] = []  # called on every change; results unused

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()

    def put(self, policy: Policy) -> None:
        with self._lock:
            self._valid[policy.key] = policy
            self._invalid.pop(policy.key, None)
        self._changed()

    def put_invalid(self, key: str, error: PolicyError) -> None:
        with self._lock:
            self._valid.pop(key, None)
            self._invalid[key] = error
        self._changed()

    def delete(self, key: str) -> None:
        with self._lock:
            self._valid.pop(key, None)
            self._invalid.pop(key, None)
        self._changed()

    def replace_all(self, valid: list[Policy], invalid: dict[str, PolicyError]) -> None:
        with self._lock:
            self._valid = {p.key: p for p in valid}
            self._invalid = dict(invalid)
            self.synced = True
        self._changed()

    def get(self, namespace: str, name: str) -> Policy | None:
        return self._valid.get(f"{namespace}/{name}")

    def policies(self) -> list[Policy]:
        with self._lock:
            return list(self._valid.values())

    def invalid(self) -> dict[str, PolicyError]:
        with self._lock:
            return dict(self._invalid)

    def metric_names(self) -> set[str]:
        """Only the metrics live policies use are fetched."""
        return {m for p in self.policies() for m in p.metric_names()}
