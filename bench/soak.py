"""Load held for a long time: does the extender keep answering, and does its memory stay flat?

Starts `tas-extender serve` as the latency benchmark does (mutual TLS, a policy file, metrics
for every node from a file), then sends filter and prioritize requests for 1000 nodes at a
steady rate for the given time, one keep-alive client per sender thread, and samples the
server's resident memory every 10 s. Writes bench/results/soak.json and prints a summary.

    python -m bench.soak --minutes 30 --rate 50
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

import httpx

from bench import latency

RESULTS = latency.REPO / "bench" / "results"
RSS_EVERY = 10.0  # seconds between memory samples
SENDERS = 8  # threads sending; enough that one slow answer does not lower the rate


@dataclass
class Soak:
    rate_per_second: float
    duration_seconds: float
    nodes: int
    requests: int = 0
    errors: int = 0  # transport failures and timeouts
    non_2xx: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    achieved_rate_per_second: float = 0.0
    rss_mib_first: float = 0.0
    rss_mib_last: float = 0.0
    rss_mib_max: float = 0.0
    rss_mib_samples: list[float] = field(default_factory=list)  # every RSS_EVERY seconds
    server_alive_at_end: bool = False
    error_examples: list[str] = field(default_factory=list)


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hold(server: latency.Server, bodies: dict[str, bytes], rate: float, seconds: float, result: Soak) -> None:
    """Send requests at `rate` per second for `seconds`, alternating filter and prioritize."""
    latencies: list[float] = []
    lock = threading.Lock()
    # One shared schedule: request k is due at start + k / rate, whichever sender takes it.
    tickets = itertools.count()
    start = time.monotonic()
    end = start + seconds
    headers = {"Content-Type": "application/json"}

    def sender() -> None:
        own: list[float] = []
        errors = non_2xx = 0
        examples: list[str] = []
        with server.client(timeout=10) as client:
            while True:
                k = next(tickets)
                due = start + k / rate
                if due >= end:
                    break
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                verb = "filter" if k % 2 == 0 else "prioritize"
                t0 = time.perf_counter()
                try:
                    response = client.post(f"{server.url}/scheduler/{verb}", content=bodies[verb], headers=headers)
                except httpx.HTTPError as error:
                    errors += 1
                    examples.append(f"{verb}: {type(error).__name__}: {error}")
                    continue
                own.append(time.perf_counter() - t0)
                if not response.is_success:
                    non_2xx += 1
                    examples.append(f"{verb}: HTTP {response.status_code}: {response.text[:200]}")
        with lock:
            latencies.extend(own)
            result.errors += errors
            result.non_2xx += non_2xx
            result.error_examples.extend(examples[: 10 - len(result.error_examples)])

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(SENDERS)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        result.rss_mib_samples.append(round(rss_mib(server.proc.pid), 1))
        deadline = time.monotonic() + RSS_EVERY
        while time.monotonic() < deadline and any(t.is_alive() for t in threads):
            time.sleep(0.2)
    result.rss_mib_samples.append(round(rss_mib(server.proc.pid), 1))
    elapsed = time.monotonic() - start
    result.requests = len(latencies) + result.errors
    result.achieved_rate_per_second = round(result.requests / elapsed, 1)
    if latencies:
        result.p50_ms = round(statistics.median(latencies) * 1000, 3)
        result.p99_ms = round(latency.percentile(latencies, 99) * 1000, 3)
        result.max_ms = round(max(latencies) * 1000, 3)
    result.rss_mib_first = result.rss_mib_samples[0]
    result.rss_mib_last = result.rss_mib_samples[-1]
    result.rss_mib_max = max(result.rss_mib_samples)


def main(argv: list[str] | None = None) -> Soak:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, default=50, help="requests per second, both verbs together")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--out", default=str(RESULTS / "soak.json"))
    args = parser.parse_args(argv)
    result = Soak(rate_per_second=args.rate, duration_seconds=args.minutes * 60, nodes=args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        latency.make_certs(d)
        names = latency.node_names(args.nodes)
        latency.write_policies(d / "policies.yaml", 1)
        latency.write_metrics(d / "metrics.prom", names)
        # NodeNames, as kube-scheduler sends with nodeCacheCapable: true (the shipped config).
        body = latency.request_body("node-names", names)
        server = latency.Server(d, d / "policies.yaml", d / "metrics.prom")
        try:
            hold(server, {"filter": body, "prioritize": body}, args.rate, result.duration_seconds, result)
            result.server_alive_at_end = server.proc.poll() is None
        finally:
            server.stop()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(asdict(result), indent=2) + "\n")
    print(f"soak: {result.requests} requests in {args.minutes:g} min at {result.achieved_rate_per_second}/s "
          f"(asked {args.rate:g}/s), {result.errors} errors, {result.non_2xx} non-2xx, "
          f"server alive: {result.server_alive_at_end}\n"
          f"latency p50 {result.p50_ms} ms, p99 {result.p99_ms} ms, max {result.max_ms} ms\n"
          f"server RSS first {result.rss_mib_first} MiB, last {result.rss_mib_last} MiB, "
          f"max {result.rss_mib_max} MiB\nwritten to {out}")
    return result


if __name__ == "__main__":
    main()
