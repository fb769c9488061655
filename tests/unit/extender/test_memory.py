"""Freed memory handed back to the system: glibc's malloc_trim, called by a thread of its own."""

from __future__ import annotations

import platform
import threading
import time

import pytest

from tas_extender.cli import memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")


def _rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@glibc
def test_malloc_trim_gives_back_what_a_fragmented_heap_keeps():
    # Many mid-sized blocks (glibc's heap, not mmap), every other one kept: the free ones lie
    # between live ones, so the heap's top never frees and glibc keeps them.
    blocks = [bytearray(64 * 1024) for _ in range(2000)]
    kept = blocks[::2]
    del blocks
    before = _rss_kib()
    trim = memory.malloc_trim()
    assert trim is not None
    trim(0)
    after = _rss_kib()
    assert before - after > 30 * 1024, f"malloc_trim gave back {before - after} KiB of about 64 MiB freed"
    assert len(kept) == 1000


@glibc
def test_malloc_trim_is_found_without_ldconfig_or_a_compiler(monkeypatch):
    # The extender's image has neither, so ctypes.util.find_library("c") answers None there.
    import ctypes.util

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert memory.malloc_trim() is not None


def test_the_release_thread_trims_every_period_until_stopped(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(memory, "malloc_trim", lambda: calls.append)
    stop = threading.Event()
    thread = memory.start_releasing(stop, period=0.01)
    assert thread is not None
    deadline = time.monotonic() + 10
    while len(calls) < 3:
        assert time.monotonic() < deadline, "the release thread did not call malloc_trim three times"
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert set(calls) == {0}


def test_without_malloc_trim_nothing_starts(monkeypatch):
    monkeypatch.setattr(memory, "malloc_trim", lambda: None)
    assert memory.start_releasing(threading.Event(), period=0.01) is None
