"""The floor extender (bench/floor_extender/main.go): a Go extender that decides nothing.

Filter passes every node it is sent and prioritize scores every node 0, over mutual TLS with
the same certificates as `tas-extender serve` in the throughput benchmark. The throughput of
the scheduler calling it is the most any extender can reach on that cluster.

Built with the Go toolchain on PATH (standard library only, so offline), once per source and
Go version: the binary is cached under ~/.cache/tas-bench, named by a hash of both.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import httpx

from bench import latency
from tests.support import free_port

SOURCE = pathlib.Path(__file__).resolve().parent / "floor_extender"
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tas-bench"
STARTUP_SECONDS = 30


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the floor extender needs the Go toolchain (go 1.26) on PATH")
    return go


def build() -> pathlib.Path:
    """The floor extender's binary, built unless one of the same source and Go version exists."""
    go = _go()
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True,
                             env=env).stdout.strip()
    digest = hashlib.sha256(version.encode())
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes())
    binary = CACHE / f"floor-extender-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        built = pathlib.Path(tmp) / "floor-extender"
        result = subprocess.run([go, "build", "-trimpath", "-o", str(built), "."], cwd=SOURCE, env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"go build of {SOURCE} failed:\n{result.stderr}")
        built.replace(binary)  # whole or not at all: a half-written binary is never found
    return binary


class FloorServer:
    """The floor extender on a free port of 127.0.0.1, with the certificates in `certs`
    (bench.latency.make_certs: server.crt/key for 127.0.0.1, clients of ca.crt)."""

    def __init__(self, certs: pathlib.Path):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(build()), "--host", "127.0.0.1", "--port", str(self.port), "--cert", str(certs / "server.crt"),
             "--key", str(certs / "server.key"), "--cacert", str(certs / "ca.crt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"https://127.0.0.1:{self.port}"
        tls = latency.client_context(certs)
        deadline = time.monotonic() + STARTUP_SECONDS
        with httpx.Client(verify=tls, timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the floor extender exited with {self.proc.returncode}: "
                                       f"{self.proc.stderr.read().decode() if self.proc.stderr else ''}")
                try:
                    if client.get(self.url + "/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"the floor extender did not answer /readyz within {STARTUP_SECONDS} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
