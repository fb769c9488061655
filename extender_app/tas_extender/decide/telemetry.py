"""The extender's own Prometheus metrics, on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# What reports.descheduler_result calls the descheduler's Events
DESCHEDULER_RESULTS = ("evicted", "cap_node", "cap_namespace", "cap_total", "failed")


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "tas_extender_request_duration_seconds", "Time to answer a scheduler request",
            ["verb"], registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        # each series from 0: the first answers count in rate()
        for verb in ("filter", "prioritize", "load-filter", "load-prioritize"):
            self.latency.labels(verb)
        self.decisions = Counter(
            "tas_extender_decisions_total", "Nodes passed or failed by filter, and nodes scored",
            ["verb", "result"], registry=self.registry)
        self.audit_decisions = Counter(
            "tas_extender_audit_decisions_total",
            "Nodes an audit-mode policy would have failed or passed in filter (none is filtered)",
            ["policy", "result"], registry=self.registry)
        self.bad_requests = Counter(
            "tas_extender_bad_requests_total", "Requests refused with a 4xx", ["verb", "status"],
            registry=self.registry)
        self.violating = Gauge(
            "tas_extender_violating_nodes", "Nodes violating a policy's deschedule strategy",
            ["policy"], registry=self.registry)
        self.metric_age = Gauge(
            "tas_extender_metric_age_seconds", "Age of the newest sample of each metric",
            ["metric"], registry=self.registry)
        self.source_up = Gauge(
            "tas_extender_metric_source_up", "1 when the last fetch from the metric source worked",
            ["source"], registry=self.registry)
        self.policies = Gauge(
            "tas_extender_policies", "Policies known to the extender", ["state"],
            registry=self.registry)
        self.certificate_expiry = Gauge(
            "tas_extender_certificate_expiry_timestamp_seconds",
            "When the served certificate, and the CA that clients must be signed by, expire (Unix time)",
            ["certificate"], registry=self.registry)
        self.client_certificate_expiry = Gauge(
            "tas_extender_client_certificate_expiry_timestamp_seconds",
            "When the client certificate of each subject expires, the first to expire among those the open"
            " connections presented (Unix time)", ["subject"], registry=self.registry)
        self._client_subjects: set[str] = set()
        # counted from other components' Events (reports.py)
        self.scheduler_call_failures = Counter(
            "tas_extender_scheduler_call_failures",
            "Scheduling attempts a scheduler reported failed because its call to the extender's filter failed"
            " (FailedScheduling Events)", ["scheduler"], registry=self.registry)
        self.descheduler_evictions = Counter(
            "tas_extender_descheduler_evictions",
            "The descheduler's evictions (evicted), the evictions it refused at a cap (cap_node, cap_namespace,"
            " cap_total) and the ones that failed (its Events)", ["result"], registry=self.registry)
        for result in DESCHEDULER_RESULTS:  # each series from 0: the first one counts in increase()
            self.descheduler_evictions.labels(result)
        self.descheduler_busiest_run = Gauge(
            "tas_extender_descheduler_busiest_run_evictions",
            "The most pods one descheduler run evicted from one node, among the runs of the last 10 minutes"
            " (its Events)", registry=self.registry)
        self.load_bindings = Counter(
            "tas_extender_load_bindings_total",
            "Pods the load-aware mode saw bound to a node, each counted in its node's hot value",
            registry=self.registry)
        self.label_patches = Counter(
            "tas_extender_node_label_patches_total", "Node label patches sent by the controller",
            registry=self.registry)
        self.capacity_patches = Counter(
            "tas_extender_node_capacity_patches",
            "Patches of a node's status.capacity giving it the extended resource (--advertise-resource), by"
            " result: added, failed (tried again next sync round)", ["result"], registry=self.registry)
        for result in ("added", "failed"):  # each series from 0: the first one counts in increase()
            self.capacity_patches.labels(result)
        self.requeue_patches = Counter(
            "tas_extender_node_requeue_patches",
            "Patches of a node's telemetry.intel.com/recovered-at annotation, written when the node passes a"
            " policy's dontschedule rules (or the load limits) again so that kube-scheduler tries the pods"
            " waiting for a node again, by result: sent, failed (tried again next sync round)", ["result"],
            registry=self.registry)
        for result in ("sent", "failed"):
            self.requeue_patches.labels(result)
        self.descheduler_runs = Counter(
            "tas_extender_descheduler_runs",
            "Runs of the descheduler's CronJob the leader started because a node started violating a policy's"
            " deschedule rules (--descheduler-cron-job), by result: started, failed (tried again next sync round)",
            ["result"], registry=self.registry)
        for result in ("started", "failed"):
            self.descheduler_runs.labels(result)

    def certificates(self, expiries: dict[str, float]) -> None:
        """tls.CertificateReloader's report."""
        for name, when in expiries.items():
            self.certificate_expiry.labels(name).set(when)

    def client_certificates(self, earliest: dict[str, float]) -> None:
        """tls.PeerCertificates' report: a subject no open connection presents any more is dropped."""
        for subject in self._client_subjects - set(earliest):
            self.client_certificate_expiry.remove(subject)
        for subject, when in earliest.items():
            self.client_certificate_expiry.labels(subject).set(when)
        self._client_subjects = set(earliest)
