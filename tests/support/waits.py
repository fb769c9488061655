"""Waiting for what a test expects, and noting what it saw on the way."""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable

import pytest


def wait_for(condition: Callable[[], object], timeout: float, message: str | Callable[[], str],
             interval: float = 0.5):
    """Poll `condition` until it returns something truthy, or fail after `timeout` seconds.

    `message` says what was awaited; a callable is asked only on failure, so it can tell what the
    cluster showed last (the scores, the annotations) beside it.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except Exception as error:  # noqa: BLE001 - keep polling, report the last error
            last_error = error
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    pytest.fail(f"timed out after {timeout:.0f}s: {message() if callable(message) else message}{detail}")


def record_figure(line: str) -> None:
    """Note a figure a test saw on the way (a time it waited, say) in the durations file that make
    test writes ($TAS_TEST_DURATIONS, build/test-durations.txt). Never asserted: timings belong
    in benchmarks, and a busy machine is slower."""
    path = os.environ.get("TAS_TEST_DURATIONS")
    if path:
        append_lines(path, [f"figure: {line}"])


def append_lines(path: str, lines: list[str]) -> None:
    """Add lines to a file that runs share (make test's failures and durations files)."""
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
