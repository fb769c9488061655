"""The TASPolicy controller: what it watches, and the reconcile each sync round asks of it.

Its parts, each in a module of its own: the watches and the node cache (watch.py), what the
policies want on the nodes and in their status as pure functions (reconcile.py), the writer of
statuses and Events (status.py), the advertiser of the extended resource (advertise.py). This
class holds them together: its `on_*` methods are what the watches call with what they list and
see (the tests call them the same way), and `reconcile` advertises the extended resource where a
node lacks it, patches node labels and has the statuses written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client import CoreV1EventList

from tas_extender.cluster import reports
from tas_extender.cluster.advertise import Advertiser, ExtendedResource
from tas_extender.cluster.reconcile import (
    MANAGED_ANNOTATION,
    Desired,
    desired_labels,
    enforced_condition,
    foreign_labels,
    label_patch,
)
from tas_extender.cluster.status import Report, StatusWriter
from tas_extender.cluster.watch import NodeCache, Watched, start_watches
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.mode import LoadAware
from tas_extender.decide.policy import (
    ENFORCEMENT_ANNOTATION,
    GROUP,
    PLURAL,
    VERSION,
    Policy,
    PolicyError,
    parse_policy,
)
from tas_extender.decide.strategies import deschedule
from tas_extender.decide.telemetry import Telemetry

log = logging.getLogger(__name__)


def _unchanged(current: Policy | None, meta: dict) -> bool:
    """Whether `meta` describes the policy the store holds: the same generation (so the same
    spec) and the same enforcement (an annotation edit does not bump the generation)."""
    if current is None or not current.generation or current.generation != meta.get("generation"):
        return False
    annotations = meta.get("annotations") or {}
    return isinstance(annotations, dict) and current.enforcement == (annotations.get(ENFORCEMENT_ANNOTATION)
                                                                     or "enforce")


def _key(obj: dict) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"


class Controller:
    """Policies and nodes as watched, node labels and policy status as reconciled.

    `core` and `custom` (CoreV1Api, CustomObjectsApi) default to clients of `api_client`; `nodes`
    is the node cache, given when something built before the controller reads it too; `advertise`
    is the extended resource every node is to advertise (None: the controller leaves capacity alone).
    """

    def __init__(self, api_client: client.ApiClient, engine: Engine, telemetry: Telemetry,
                 is_leader: Callable[[], bool] = lambda: True, nodes: NodeCache | None = None,
                 core: Any = None, custom: Any = None, advertise: ExtendedResource | None = None):
        self.core = core if core is not None else client.CoreV1Api(api_client)
        self.custom = custom if custom is not None else client.CustomObjectsApi(api_client)
        self.engine = engine
        self.store = engine.store
        self.telemetry = telemetry
        self.is_leader = is_leader
        self.nodes = nodes if nodes is not None else NodeCache()
        self.status = StatusWriter(self.core, self.custom)
        self.advertiser = None if advertise is None else Advertiser(
            advertise, self.nodes.capacities, self.core.patch_node_status, telemetry.capacity_patches)
        self._objects: dict[str, dict] = {}  # policy key -> last object seen
        self._not_set_logged: set[tuple[str, str]] = set()
        self.stop = threading.Event()

    @property
    def nodes_synced(self) -> bool:
        return self.nodes.synced

    # --- policies: what the policy watch lists and sees -----------------------------------

    def on_policy_list(self, items: list[dict]) -> None:
        """The policies listed: they replace every policy known."""
        self._objects.clear()
        valid, invalid = [], {}
        for obj in items:
            key = _key(obj)
            self._objects[key] = obj
            try:
                policy = parse_policy(obj)
            except PolicyError as error:
                log.warning("policy %s is invalid: %s", key, error)
                invalid[key] = error
                continue
            if policy.audit:
                log.info("policy %s is in audit mode: reported, not enforced", key)
            for warning in policy.warnings:
                log.warning("policy %s: %s", key, warning)
            valid.append(policy)
        self.store.replace_all(valid, invalid)

    def on_policy_event(self, kind: str, obj: dict) -> None:
        """A policy ADDED, MODIFIED or DELETED."""
        if kind == "DELETED":
            key = _key(obj)
            log.info("removing policy %s", key)
            self._objects.pop(key, None)
            self.status.forget(key)
            self.store.delete(key)
            try:
                self.telemetry.violating.remove(key)
            except KeyError:
                pass
        else:
            self._accept(obj)

    def _accept(self, obj: dict) -> None:
        meta = obj.get("metadata", {})
        key = _key(obj)
        self._objects[key] = obj
        if _unchanged(self.store.get(meta.get("namespace"), meta.get("name")), meta):
            return  # our own status write: the spec, and so the decisions, did not change
        try:
            policy = parse_policy(obj)
        except PolicyError as error:
            log.warning("policy %s is invalid: %s", key, error)
            self.store.put_invalid(key, error)
            return
        log.info("registering policy %s (%s)%s", key,
                 " ".join(s for s in ("scheduleonmetric", "dontschedule", "deschedule", "labeling")
                          if policy.strategy(s)), " in audit mode: reported, not enforced" if policy.audit else "")
        for warning in policy.warnings:
            log.warning("policy %s: %s", key, warning)
        self.store.put(policy)

    def list_policies(self, **kwargs: Any) -> Any:
        return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    # --- what the schedulers and the descheduler report (reports.py) ---------------------
    # The return annotation tells the watch what to decode its events into.

    def list_scheduler_events(self, **kwargs: Any) -> CoreV1EventList:
        return self.core.list_event_for_all_namespaces(field_selector=reports.SCHEDULER_FIELDS, **kwargs)

    def list_descheduler_events(self, **kwargs: Any) -> CoreV1EventList:
        return self.core.list_event_for_all_namespaces(field_selector=reports.DESCHEDULER_FIELDS, **kwargs)

    # --- nodes: what the node watch lists and sees ----------------------------------------

    def on_node_list(self, items: list[Any]) -> None:
        """The nodes listed: they replace every node known."""
        self.nodes.replace(items)
        self.engine.known_nodes = self.nodes.names()
        self.engine.rebuild()

    def on_node_event(self, kind: str, node: Any) -> None:
        """A node ADDED, MODIFIED or DELETED."""
        self.nodes.update(kind, node)
        if kind != "MODIFIED":
            self.engine.known_nodes = self.nodes.names()

    def annotations(self, node: str) -> dict[str, str] | None:
        return self.nodes.annotations(node)

    def node_addresses(self) -> dict[str, tuple[str, ...]] | None:
        """node -> its addresses; None until the nodes are listed."""
        return self.nodes.node_addresses()

    def all_annotations(self) -> dict[str, dict[str, str]]:
        return self.nodes.all_annotations()

    def remove_load_annotations(self) -> None:
        """Take off the load annotations a load-aware run left (the mode is off now)."""
        from tas_extender.cluster.annotator import cleanup_patches

        for node, body in cleanup_patches(self.all_annotations()).items():
            try:
                self.core.patch_node(node, body)
                log.info("%s: removed the load annotations", node)
            except client.ApiException as error:
                log.warning("%s: removing the load annotations failed: %s", node, error.reason)

    def start(self, policies: bool = True, pods: LoadAware | None = None) -> None:
        """Start the watches: nodes and the Events counted in reports.py always, policies unless
        they come from files, pods for `pods`."""
        watches: list[Watched] = [("node", self.core.list_node, self.on_node_list, self.on_node_event)]
        scheduler = reports.EventCounts(self.telemetry.scheduler_call_failures, reports.scheduler_call_failed)
        watches.append(("scheduler-event", self.list_scheduler_events, scheduler.on_list, scheduler.on_event))
        descheduler = reports.EventCounts(self.telemetry.descheduler_evictions, reports.descheduler_result)
        runs = reports.RunEvictions()
        self.telemetry.descheduler_busiest_run.set_function(runs.busiest)

        def on_descheduler_list(items: list[Any]) -> None:
            descheduler.on_list(items)
            runs.on_list(items)

        def on_descheduler_event(kind: str, event: Any) -> None:
            descheduler.on_event(kind, event)
            runs.on_event(kind, event)

        watches.append(("descheduler-event", self.list_descheduler_events, on_descheduler_list, on_descheduler_event))
        if policies:
            watches.append(("policy", self.list_policies, self.on_policy_list, self.on_policy_event))
        if pods is not None:
            def on_pod_list(items: list[Any]) -> None:
                for pod in items:
                    pods.on_pod(pod.metadata.uid, pod.spec.node_name, initial=True)

            def on_pod_event(kind: str, pod: Any) -> None:
                if kind == "DELETED":
                    pods.forget_pod(pod.metadata.uid)
                elif pods.on_pod(pod.metadata.uid, pod.spec.node_name):
                    self.telemetry.load_bindings.inc()

            watches.append(("pod", self.core.list_pod_for_all_namespaces, on_pod_list, on_pod_event))
        start_watches(watches, self.stop)

    # --- reconciliation: each sync round, as leader -----------------------------------------

    def desired_labels(self) -> Desired:
        """What the policies want on the nodes now (reconcile.desired_labels)."""
        return desired_labels(self.engine.view, self.store.policies(), self.nodes.sorted_names())

    def reconcile(self) -> None:
        """Advertise the extended resource on the nodes that lack it, patch the nodes whose labels
        must change, then write policy status and events."""
        if self.advertiser is not None:
            self.advertiser.sync()
        desired = self.desired_labels()
        self._label_nodes(desired)
        for key, nodes in desired.violating.items():
            self.telemetry.violating.labels(key).set(len(nodes))
        self._report_not_set(desired.not_set)
        self._write_statuses(desired)

    def audit_condition(self, policy: Policy, violating: list[str]) -> dict[str, str] | None:
        """The Enforced condition of a policy in audit mode, from the current metrics; None when enforced."""
        if not policy.audit:
            return None
        names = self.nodes.sorted_names()
        labelled = self.engine.view.labels(policy, names, violating=())  # those of its labeling rules
        return enforced_condition(policy, sorted(self.engine.failed(policy, names)), violating, sorted(labelled))

    def _label_nodes(self, desired: Desired) -> None:
        """Patch each node whose labels differ from what the policies want; a label the node
        already carries from someone else is left, and reported in `desired.not_set`."""
        for node, want in desired.labels.items():
            entry = self.nodes.get(node)
            if entry is None:
                continue
            have, annotations = entry
            for key, value in foreign_labels(have, annotations, want).items():
                # Someone else's label (a user's, another tool's): overwriting it would lose their
                # value, and removing it later would delete it. The policy reports it instead.
                del want[key]
                desired.not_set.setdefault(desired.owners[key], []).append(("LabelNotOurs", (
                    f"node {node} already has label {key}={value}, which tas-extender did not set: "
                    "it is left as it is")))
            body = label_patch(have, annotations, want)
            if body is None:
                continue
            changes = body["metadata"]["labels"]
            new_managed = body["metadata"]["annotations"][MANAGED_ANNOTATION] or ""
            try:
                self.core.patch_node(node, body)
            except client.ApiException as error:
                log.warning("patching labels of node %s: %s", node, error.reason)
                continue
            self.telemetry.label_patches.inc()
            for key, value in changes.items():
                if value == deschedule.VIOLATING:
                    log.info("%s violating : labelled %s=%s", node, key, value)
                elif value is None:
                    log.info("%s: removed label %s", node, key)
                else:
                    log.info("%s: labelled %s=%s", node, key, value)
            # until the watch catches up, assume the patch applied
            self.nodes.assume(node, {k: v for k, v in {**have, **changes}.items() if v is not None},
                              {**annotations, MANAGED_ANNOTATION: new_managed})

    def _report_not_set(self, not_set: dict[str, list[tuple[str, str]]]) -> None:
        """Log each reason a policy's labels are not set once, when it first appears."""
        current = {(key, why) for key, reasons in not_set.items() for _, why in reasons}
        for key, why in sorted(current - self._not_set_logged):
            log.warning("policy %s: label not set: %s", key, why)
        self._not_set_logged = current

    def _write_statuses(self, desired: Desired) -> None:
        now = time.monotonic()
        invalid = self.store.invalid()
        for key, obj in list(self._objects.items()):
            meta = obj.get("metadata", {})
            error = invalid.get(key)
            policy = None if error is not None else self.store.get(meta.get("namespace"), meta.get("name"))
            if error is None and policy is None:
                continue
            violating = desired.violating.get(key, [])
            audited = self.audit_condition(policy, violating) if policy is not None else None
            self.status.write(key, Report(obj, policy, error, violating, desired.not_set.get(key, []), audited), now)
