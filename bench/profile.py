"""Where the time goes when kube-scheduler binds pods through the extender (NodeNames mode).

Runs the throughput benchmark's `node-names` mode once and meanwhile records:
- CPU seconds of every process of the local cluster and of the extender (from /proc), so the
  run's wall time can be set against what each process spent;
- the extender's own count and total time of the requests it answered (its /metrics);
- a py-spy profile of the extender (on-CPU samples), summed by where the samples were.
Writes bench/results/profile.json (and the raw py-spy stacks next to it).
"""

from __future__ import annotations

import collections
import json
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

from bench import latency, throughput

# Where a py-spy stack (outermost first) is spending its sample, by the first match; the stacks
# whose innermost frame waits (the event loop in C, a thread on its event) are counted apart.
BUCKETS = [
    ("filter decision (Decider.filter)", re.compile(r"Decider\.filter \(")),
    ("prioritize decision (Decider.prioritize)", re.compile(r"Decider\.prioritize \(")),
    ("request decoding (wire.parse)", re.compile(r"\bparse \(tas_extender/decide/wire")),
    ("sync loop (metrics file, engine rebuild)", re.compile(r"SyncLoop\.")),
    ("TLS (ssl module)", re.compile(r"\(ssl\.py|sslproto\.py")),
    ("verbs answered from the protocol's callbacks (fastpath.py)", re.compile(r"\(tas_extender/serve/fastpath")),
    ("HTTP parsing and writing (uvicorn, httptools)", re.compile(r"uvicorn/protocols")),
    ("reading and answering the verbs (api.Verbs)", re.compile(r"Verbs\.")),
    ("ASGI/Starlette/FastAPI routing", re.compile(r"\((starlette|fastapi)/")),
]
WAITING = [
    ("event loop in C (uvloop: waiting, socket and TLS I/O)", re.compile(r"^Runner\.run \(")),
    ("threads waiting (sync period, certificate checks)", re.compile(r"^(Condition|Event)\.wait \(")),
]


def extender_requests(server: latency.Server) -> dict[str, tuple[float, float]]:
    """verb -> (requests answered, seconds spent in the handler) from the extender's /metrics."""
    with server.client() as client:
        text = client.get(f"{server.url}/metrics").text
    out = {}
    for verb in ("filter", "prioritize"):
        count = re.search(rf'tas_extender_request_duration_seconds_count\{{verb="{verb}"\}} (\S+)', text)
        total = re.search(rf'tas_extender_request_duration_seconds_sum\{{verb="{verb}"\}} (\S+)', text)
        out[verb] = (float(count.group(1)) if count else 0.0, float(total.group(1)) if total else 0.0)
    return out


def summarise_stacks(raw: pathlib.Path) -> dict[str, float]:
    """Share of the extender's samples in each bucket (py-spy's collapsed-stack output)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        innermost = stack.rpartition(";")[2]
        bucket = next((name for name, pattern in WAITING if pattern.search(innermost)), None) or next(
            (name for name, pattern in BUCKETS if pattern.search(stack)), "other")
        counts[bucket] += int(n)
    total = sum(counts.values()) or 1
    return {name: round(100 * n / total, 1) for name, n in counts.most_common()}


SCHEDULER_SERIES = {
    "scheduling algorithm (filter, score, extender calls)": "scheduler_scheduling_algorithm_duration_seconds_sum",
    "in-tree Filter plugins": 'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter"',
    "in-tree PreScore plugins": 'scheduler_framework_extension_point_duration_seconds_sum{extension_point="PreScore"',
    "in-tree Score plugins": 'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Score"',
}


def scheduler_seconds() -> dict[str, float]:
    """Sums of kube-scheduler's own duration histograms (its /metrics, read with the admin cert)."""
    pki = throughput.CLUSTER_DIR / "pki"
    text = subprocess.run(["curl", "-sk", "--cert", str(pki / "admin.crt"), "--key", str(pki / "admin.key"),
                           "https://127.0.0.1:10259/metrics"], capture_output=True, text=True, check=False).stdout
    return {name: sum(float(v) for v in re.findall(re.escape(series) + r"\S* (\S+)$", text, re.M))
            for name, series in SCHEDULER_SERIES.items()}


class Probe:
    """CPU of every cluster process and the extender's request counters, over the binding window."""

    def __init__(self, server: latency.Server, supervisorctl: str):
        self.server, self.supervisorctl = server, supervisorctl
        # What stop() reports: the differences over the window.
        self.cpu: dict[str, float] = {}
        self.scheduler: dict[str, float] = {}
        self.requests: dict[str, dict[str, float]] = {}

    def _sample(self) -> tuple[dict[str, int], dict[str, float], dict[str, tuple[float, float]]]:
        pids = throughput.cluster_pids(self.supervisorctl)  # looked up now: the run restarts kube-scheduler
        pids["tas-extender (bench)"] = self.server.proc.pid
        return pids, {name: latency.cpu_seconds(pid) for name, pid in pids.items()}, extender_requests(self.server)

    def start(self) -> None:
        self._pids, self._cpu, self._requests = self._sample()
        self._scheduler = scheduler_seconds()

    def stop(self) -> None:
        pids, cpu, requests = self._sample()
        self.cpu = {name: round(cpu[name] - self._cpu[name], 2) for name in cpu
                    if name in self._cpu and pids[name] == self._pids[name]}
        scheduler = scheduler_seconds()
        self.scheduler = {name: round(scheduler[name] - self._scheduler[name], 2) for name in scheduler}
        self.requests = {verb: {"requests": int(requests[verb][0] - self._requests[verb][0]),
                                "handler_seconds": round(requests[verb][1] - self._requests[verb][1], 2)}
                         for verb in requests}


def run(server: latency.Server, pods: int, tls: list[str], supervisorctl: str, results: pathlib.Path) -> dict:
    raw = results / "profile-extender.txt"
    spy = subprocess.Popen([str(pathlib.Path(sys.executable).with_name("py-spy")), "record",
                            "--format", "raw", "--rate", "200", "--pid", str(server.proc.pid), "--output", str(raw)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)  # py-spy attaches
    probe = Probe(server, supervisorctl)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "throughput.json"
        throughput.main(["--pods", str(pods), "--modes", "node-names", "--extender-url", f"{server.url}/scheduler",
                         *tls, "--supervisorctl", supervisorctl, "--out", str(out)], probe=probe)
        bound = json.loads(out.read_text())[0]
    spy.send_signal(signal.SIGINT)
    spy.wait(60)
    return {"pods": pods, "bind_seconds": bound["seconds"],
            "cpu_seconds_by_process": dict(sorted(probe.cpu.items(), key=lambda kv: -kv[1])),
            "extender_requests": probe.requests,
            "scheduler_seconds": probe.scheduler,
            "extender_samples_percent": summarise_stacks(raw) if raw.exists() else {}}
