"""An extender process: `tas-extender serve` started on a free port of 127.0.0.1, awaited until
ready, and stopped."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import sys
from collections.abc import Iterator

from .waits import wait_for


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tas_extender_command() -> str:
    """The `tas-extender` console script installed beside the running Python."""
    return str(pathlib.Path(sys.executable).with_name("tas-extender"))


def start_extender(args: list[str], port: int, log_path: pathlib.Path) -> subprocess.Popen:
    """`tas-extender serve --unsafe` on 127.0.0.1:`port` with `args`, its output in `log_path`."""
    with log_path.open("w") as log:
        return subprocess.Popen(
            [tas_extender_command(), "serve", "--unsafe", "--host", "127.0.0.1", "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT)


def wait_ready(port: int, timeout: float, message: str = "extender ready") -> None:
    """Poll the /readyz of the extender `start_extender` started on `port` until it answers 200."""
    import httpx

    wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200, timeout, message)


@contextlib.contextmanager
def serving_extender(args: list[str], port: int, log_path: pathlib.Path, timeout: float = 30) -> Iterator[str]:
    """`start_extender`, then yield its base URL once it is ready; stops it afterwards."""
    proc = start_extender(args, port, log_path)
    try:
        wait_ready(port, timeout)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
