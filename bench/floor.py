"""The floor extender (bench/floor_extender/main.go): a Go extender that decides nothing.

Filter passes every node it is sent and prioritize scores every node 0, over mutual TLS with
the same certificates as `tas-extender serve` in the throughput benchmark. The throughput of
the scheduler calling it is the most any extender can reach on that cluster.

Built by bench.gobuild (standard library only, so offline; cached per source and Go version).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

import httpx

from bench import gobuild, latency
from tests.support import free_port

SOURCE = pathlib.Path(__file__).resolve().parent / "floor_extender"
STARTUP_SECONDS = 30


def build() -> pathlib.Path:
    """The floor extender's binary (bench.gobuild: built once per source and Go version)."""
    return gobuild.binary(SOURCE, "floor-extender")


class FloorServer:
    """A floor on a free port of 127.0.0.1, with the certificates in `certs` (bench.latency.make_certs:
    server.crt/key for 127.0.0.1, clients of ca.crt): the Go one, or with `server` ("uvicorn",
    "protocol") one of bench.floor_python's."""

    def __init__(self, certs: pathlib.Path, server: str = ""):
        self.port = free_port()
        name = f"the Python floor ({server})" if server else "the floor extender"
        command = [sys.executable, "-m", "bench.floor_python", "--server", server] if server else [str(build())]
        self.proc = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(self.port), "--cert", str(certs / "server.crt"),
             "--key", str(certs / "server.key"), "--cacert", str(certs / "ca.crt")],
            cwd=latency.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"https://127.0.0.1:{self.port}"
        tls = latency.client_context(certs)
        deadline = time.monotonic() + STARTUP_SECONDS
        with httpx.Client(verify=tls, timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {self.proc.returncode}: "
                                       f"{self.proc.stderr.read().decode() if self.proc.stderr else ''}")
                try:
                    if client.get(self.url + "/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{name} did not answer /readyz within {STARTUP_SECONDS} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
