"""Exponential backoff with full jitter, for retrying the API server after a failure."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Backoff:
    """Waits drawn evenly from 0 up to a ceiling that doubles with each failure in a row, from
    `base` to `cap`: replicas whose watches broke together (an API server restart) come back
    spread out, not all at once every second."""

    base: float = 0.5
    cap: float = 30.0
    jitter: Callable[[], float] = random.random  # a number in [0, 1)
    failures: int = 0

    def next(self) -> float:
        """The wait before the next try, counting one more failure."""
        ceiling = min(self.cap, self.base * 2 ** min(self.failures, 32))
        self.failures += 1
        return ceiling * self.jitter()

    def reset(self) -> None:
        """After a success: the next failure waits at most `base` again."""
        self.failures = 0
