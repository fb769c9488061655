"""Handing the memory Python has freed back to the system, every minute.

Answering a list of nodes or Events, the Kubernetes client holds the response's text, its JSON
and its objects at once; when they go, glibc keeps the freed pages in its heap for later
instead of returning them (it returns only a free top of the heap, past its trim threshold). An
extender replica on the six-node demo cluster held 164 MiB resident this way; after one
`malloc_trim(0)` it held 101 MiB, and stayed there. `malloc_trim` walks the free lists and
gives back every whole free page, wherever it is; it takes milliseconds.

Elsewhere than glibc (musl, macOS) there is no `malloc_trim` and nothing is done.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

PERIOD_SECONDS = 60.0


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none.

    Looked up among the symbols the interpreter already has (`CDLL(None)`), not by
    `ctypes.util.find_library`, which needs ldconfig or a compiler: the extender's image has
    neither, and the lookup found nothing there."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def start_releasing(stop: threading.Event | None = None,
                    period: float = PERIOD_SECONDS) -> threading.Thread | None:
    """Every `period` seconds until `stop` (without one, for the process's life: the thread is a
    daemon), in a thread of its own, `malloc_trim(0)`; the thread, or None where there is no
    malloc_trim."""
    trim = malloc_trim()
    if trim is None:
        log.info("no malloc_trim in this C library: freed memory stays with the process")
        return None

    stopped = stop or threading.Event()

    def run() -> None:
        while not stopped.wait(period):
            trim(0)

    thread = threading.Thread(target=run, name="memory-release", daemon=True)
    thread.start()
    return thread
