"""The real `tas-extender serve` process with mutual TLS, and certificates for it."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

import httpx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from bench.latency import client_context, free_port, make_certs  # noqa: E402 - shared with the benchmarks

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> pathlib.Path:
    good = tmp_path_factory.mktemp("pki")
    make_certs(good)
    other = good / "other"
    other.mkdir()
    make_certs(other)  # a second CA: its client certificate must be refused
    return good


def _start(args: list[str]) -> subprocess.Popen:
    exe = pathlib.Path(sys.executable).with_name("tas-extender")
    return subprocess.Popen([str(exe), "serve", "--host", "127.0.0.1", *args,
                             "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
                             "--metrics-file", str(FIXTURES / "health.prom"), "--syncPeriod", "1s"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(url: str, proc: subprocess.Popen, **client_args) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tas-extender exited: {proc.stdout.read()}")
        try:
            if httpx.get(url + "/readyz", timeout=2, **client_args).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    pytest.fail("tas-extender did not become ready")


@pytest.fixture(scope="module")
def tls_server(certs):
    port = free_port()
    proc = _start(["--port", str(port), "--cert", str(certs / "server.crt"), "--key", str(certs / "server.key"),
                   "--cacert", str(certs / "ca.crt")])
    url = f"https://127.0.0.1:{port}"
    _wait(url, proc, verify=client_context(certs))
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def plain_server():
    port = free_port()
    proc = _start(["--port", str(port), "--unsafe"])
    url = f"http://127.0.0.1:{port}"
    _wait(url, proc)
    yield url, proc
    proc.terminate()
    proc.wait(10)
