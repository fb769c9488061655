"""Fixtures of the reliability suite: the provisioned stack and a client of its extender.

These tests stop and restart the real services under the cluster's supervisord, so they run
after the demo (molecule's verify, or `make reliability` on a stack `make demo` built) and
leave every service running again.
"""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Iterator

import pytest

from provisioned import ADAPTER, DEADLINE, EXTENDER, NODES, PROMETHEUS, Extender, Stack
from support import DEFAULT_CLUSTER_DIR, wait_for


@pytest.fixture(scope="session")
def stack(kubeconfig) -> Stack:
    directory = pathlib.Path(os.environ.get("TAS_LOCAL_CLUSTER_DIR", DEFAULT_CLUSTER_DIR))
    found = Stack(directory)
    for program in (EXTENDER, PROMETHEUS, ADAPTER):
        if not found.running(program):
            pytest.fail(f"{program} is not running under {directory}/supervisord.conf: "
                        "provision the stack first (make demo)")
    return found


@pytest.fixture
def extender(stack) -> Extender:
    wait_for(lambda: Extender(stack).get("/readyz").status_code == 200, DEADLINE, "the extender is ready")
    return Extender(stack)


@pytest.fixture
def healthy(stack) -> Iterator[Stack]:
    """Every node healthy before and after the test."""
    stack.set_health({n: 0 for n in NODES})
    yield stack
    stack.set_health({n: 0 for n in NODES})


@pytest.fixture
def extender_down(stack, extender) -> Iterator[None]:
    """The extender killed (SIGKILL: no goodbye, the Lease and connections just vanish) and kept
    down; started again afterwards whatever happens."""
    pid = stack.pid(EXTENDER)
    os.kill(pid, signal.SIGKILL)
    # supervisord would bring it back at once; whichever it has got to, it ends STOPPED.
    stack.supervisorctl("stop", EXTENDER, check=False)
    wait_for(lambda: " STOPPED " in stack.supervisorctl("status", EXTENDER, check=False), DEADLINE,
             "the extender stopped")
    try:
        yield
    finally:
        if not stack.running(EXTENDER):
            stack.supervisorctl("start", EXTENDER)
        wait_for(lambda: extender.get("/readyz").status_code == 200, DEADLINE, "the extender is ready again")
