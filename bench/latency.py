"""Extender latency over real HTTPS with client certificates, against `tas-extender serve`.

Starts the server as users start it (mutual TLS, a policy file, a metrics file with a value
for every node), then sends filter and prioritize requests shaped like kube-scheduler 1.36's
(full Node objects, or NodeNames) from bench/load_client, a Go client as kube-scheduler is, on
keep-alive connections, sequentially (concurrency 1) and from 8 callers at once. Reports p50,
p99, max, requests/s, server CPU time per request and the server's peak resident memory.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import os
import pathlib
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import httpx
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from bench import gobuild
from tests.support import free_port
from tests.support.pki import Pki

REPO = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "scheduler-requests"
LOAD_CLIENT = REPO / "bench" / "load_client"


@dataclass
class Sample:
    verb: str
    mode: str
    nodes: int
    policies: int
    concurrency: int
    requests: int
    body_bytes: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    requests_per_second: float
    server_cpu_ms_per_request: float
    server_peak_rss_mib: float
    log_level: str = "warning"
    # The p50 and p99 are of every call of every round; each round's own p99 shows the spread.
    rounds: int = 1
    p99_ms_by_round: list[float] = field(default_factory=list)


# --- certificates -------------------------------------------------------------------------

def make_certs(directory: pathlib.Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as in production (the
    tests' PKI, tests/support/pki.py)."""
    now = datetime.datetime.now(datetime.UTC)
    pki = Pki(directory, common_name="bench-ca", path_length=None, now=now, not_before=now)
    pki.leaf("server", sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
             common_name="bench-server", not_before=now)
    pki.leaf("client", usage=ExtendedKeyUsageOID.CLIENT_AUTH, common_name="bench-client", not_before=now)


def client_context(directory: pathlib.Path, ca: pathlib.Path | None = None) -> ssl.SSLContext:
    """A client TLS context presenting directory's client certificate and trusting `ca`."""
    context = ssl.create_default_context(cafile=str(ca or directory / "ca.crt"))
    context.load_cert_chain(str(directory / "client.crt"), str(directory / "client.key"))
    return context


# --- inputs -------------------------------------------------------------------------------

def node_names(count: int) -> list[str]:
    return [f"node-{i}" for i in range(1, count + 1)]


def write_policies(path: pathlib.Path, count: int, namespace: str = "health-metric-demo") -> None:
    """`count` policies; the first is the one the pods use, with several rules and metrics."""
    docs = []
    for i in range(count):
        name = "demo-policy" if i == 0 else f"unrelated-{i}"  # the fixture pod names demo-policy
        docs.append({
            "apiVersion": "telemetry.intel.com/v1alpha1", "kind": "TASPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"strategies": {
                "dontschedule": {"rules": [
                    {"metricname": "health_metric", "operator": "Equals", "target": 1},
                    {"metricname": "temperature", "operator": "GreaterThan", "target": 90},
                    {"metricname": "free_memory", "operator": "LessThan", "target": 100},
                ]},
                "scheduleonmetric": {"rules": [{"metricname": "temperature", "operator": "LessThan"}]},
                "deschedule": {"rules": [{"metricname": "health_metric", "operator": "Equals", "target": 2}]},
            }},
        })
    import yaml
    path.write_text(yaml.safe_dump_all(docs))


def write_metrics(path: pathlib.Path, names: list[str]) -> None:
    lines = []
    for i, node in enumerate(names):
        lines.append(f'health_metric{{node="{node}"}} {1 if i % 10 == 0 else 0}')
        lines.append(f'temperature{{node="{node}"}} {40 + i % 60}')
        lines.append(f'free_memory{{node="{node}"}} {1000 + i}')
    path.write_text("\n".join(lines) + "\n")


def request_body(mode: str, names: list[str]) -> bytes:
    """A body shaped like kube-scheduler 1.36's, from the real request in the fixtures, written
    as Go's encoding/json writes it (no spaces, fields in the order received)."""
    real = json.loads((FIXTURES / "filter-full-nodes-k8s1.36.json").read_text())
    if mode == "node-names":
        return _go_json({"Pod": real["Pod"], "Nodes": None, "NodeNames": names})
    template = real["Nodes"]["items"][0]
    items = []
    for name in names:
        node = copy.deepcopy(template)
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        items.append(node)
    nodes = {k: v for k, v in real["Nodes"].items() if k != "items"}
    nodes["items"] = items
    return _go_json({"Pod": real["Pod"], "Nodes": nodes, "NodeNames": None})


def _go_json(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


# --- server -------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int, field: str) -> float:
    """A memory figure of a process from /proc/<pid>/status: VmRSS (now) or VmHWM (peak)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """`tas-extender serve` as a user starts it, with mutual TLS."""

    def __init__(self, certs: pathlib.Path, policies: pathlib.Path, metrics: pathlib.Path, log_level: str = "warning"):
        self.port, self.certs = free_port(), certs
        exe = pathlib.Path(sys.executable).with_name("tas-extender")
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--port", str(self.port), "--host", "127.0.0.1",
             "--cert", str(certs / "server.crt"), "--key", str(certs / "server.key"),
             "--cacert", str(certs / "ca.crt"), "--policy-file", str(policies),
             "--metrics-file", str(metrics), "--log-level", log_level],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.tls = client_context(certs)
        self.url = f"https://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        with self.client() as c:
            while time.monotonic() < deadline:
                try:
                    if c.get(self.url + "/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if self.proc.poll() is not None:
                    raise RuntimeError("tas-extender exited during start-up")
                time.sleep(0.2)
        raise TimeoutError("tas-extender did not become ready")

    def client(self, timeout: float = 120) -> httpx.Client:
        """An HTTPS client that presents the client certificate and trusts the bench CA."""
        return httpx.Client(verify=self.tls, timeout=timeout)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def peak_rss_mib(self) -> float:
        return memory_mib(self.proc.pid, "VmHWM")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# --- load ---------------------------------------------------------------------------------

def run_load(server: Server, verb: str, body: bytes, requests: int, concurrency: int) -> tuple[list[float], float]:
    """Send `requests` requests from `concurrency` callers, one keep-alive connection each, with
    bench/load_client (Go, as kube-scheduler is): (each call's seconds, the run's wall seconds)."""
    client = gobuild.binary(LOAD_CLIENT, "load-client")
    with tempfile.NamedTemporaryFile(suffix=".json") as body_file:
        body_file.write(body)
        body_file.flush()
        run = subprocess.run(
            [str(client), "-url", f"{server.url}/scheduler/{verb}", "-body", body_file.name,
             "-cert", str(server.certs / "client.crt"), "-key", str(server.certs / "client.key"),
             "-cacert", str(server.certs / "ca.crt"), "-concurrency", str(concurrency), "-requests", str(requests)],
            capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"load-client failed: {run.stderr.strip()}")
    result = json.loads(run.stdout)
    return result["latencies_seconds"], result["wall_seconds"]


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def measure(nodes: int, policies: int, modes: list[str], concurrencies: list[int],
            requests: dict[str, int], log_level: str = "warning", rounds: int = 1) -> list[Sample]:
    """`log_level` warning keeps the extender's log lines out of the figures; info is the
    collection's default, where each filter call logs TAS's lines (the nodes that passed and up
    to 20 violating ones). Every row is run `rounds` times, one round of all rows after another,
    so that a pause of the machine lasting some seconds lands in one round of a row, not in all."""
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        make_certs(d)
        names = node_names(nodes)
        write_policies(d / "policies.yaml", policies)
        write_metrics(d / "metrics.prom", names)
        server = Server(d, d / "policies.yaml", d / "metrics.prom", log_level)
        rows = [(mode, verb, concurrency) for mode in modes for verb in ("filter", "prioritize")
                for concurrency in concurrencies]
        bodies = {mode: request_body(mode, names) for mode in modes}
        # row -> (every call's seconds, each round's p99, CPU seconds, wall seconds, calls incl. warm-up)
        runs: dict[tuple[str, str, int], tuple[list[float], list[float], list[float], list[float], list[int]]] = {
            row: ([], [], [], [], []) for row in rows}
        try:
            for _ in range(rounds):
                for row in rows:
                    mode, verb, concurrency = row
                    cpu0 = server.cpu_seconds()
                    lat, wall = run_load(server, verb, bodies[mode], requests[mode], concurrency)
                    every, p99s, cpus, walls, calls = runs[row]
                    cpus.append(server.cpu_seconds() - cpu0)
                    every += lat
                    p99s.append(round(percentile(lat, 99) * 1000, 3))
                    walls.append(wall)
                    calls.append(len(lat) + concurrency)  # the warm-up requests are in the CPU time too
            peak = round(server.peak_rss_mib(), 1)  # the server's peak over all its rows and rounds
        finally:
            server.stop()
    samples = []
    for (mode, verb, concurrency), (every, p99s, cpus, walls, calls) in runs.items():
        samples.append(Sample(
            verb=verb, mode=mode, nodes=nodes, policies=policies, concurrency=concurrency,
            requests=len(every), body_bytes=len(bodies[mode]),
            p50_ms=round(statistics.median(every) * 1000, 3), p99_ms=round(percentile(every, 99) * 1000, 3),
            max_ms=round(max(every) * 1000, 3), requests_per_second=round(len(every) / sum(walls), 1),
            server_cpu_ms_per_request=round(sum(cpus) / sum(calls) * 1000, 3),
            server_peak_rss_mib=peak, log_level=log_level, rounds=rounds, p99_ms_by_round=p99s))
        print(json.dumps(asdict(samples[-1])), flush=True)
    return samples


def memory_over_calls(nodes: int, calls: int, every: int = 500) -> dict:
    """Resident memory of the server while it answers `calls` full-Nodes calls, sampled every `every`.

    Filter and prioritize alternate on one keep-alive connection, as kube-scheduler sends them.
    """
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        make_certs(d)
        names = node_names(nodes)
        write_policies(d / "policies.yaml", 1)
        write_metrics(d / "metrics.prom", names)
        server = Server(d, d / "policies.yaml", d / "metrics.prom")
        body, headers = request_body("full-nodes", names), {"Content-Type": "application/json"}
        samples = [{"calls": 0, "rss_mib": round(memory_mib(server.proc.pid, "VmRSS"), 1)}]
        try:
            with server.client() as c:
                for i in range(1, calls + 1):
                    c.post(f"{server.url}/scheduler/{'filter' if i % 2 else 'prioritize'}",
                           content=body, headers=headers).raise_for_status()
                    if i % every == 0:
                        samples.append({"calls": i, "rss_mib": round(memory_mib(server.proc.pid, "VmRSS"), 1)})
        finally:
            server.stop()
    return {"nodes": nodes, "body_bytes": len(body), "calls": calls, "samples": samples}
