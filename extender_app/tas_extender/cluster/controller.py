"""The TASPolicy controller: policy and node watches, node labels, policy status, events."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch
from kubernetes.client import CoreV1EventList

from tas_extender.cluster import reports
from tas_extender.cluster.backoff import Backoff
from tas_extender.decide.engine import Engine
from tas_extender.decide.load.mode import LoadAware
from tas_extender.decide.policy import (
    ENFORCEMENT_ANNOTATION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Policy,
    PolicyError,
    parse_policy,
)
from tas_extender.decide.strategies import deschedule, labeling
from tas_extender.decide.telemetry import Telemetry

log = logging.getLogger(__name__)

# Which label keys on a node this controller set, so it can remove them when a policy is
# edited or deleted, even across restarts.
MANAGED_ANNOTATION = "telemetry.intel.com/managed-labels"
STATUS_REFRESH_SECONDS = 60


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def managed_keys(annotations: dict[str, str]) -> set[str]:
    """The label keys this controller set on a node (MANAGED_ANNOTATION)."""
    return {k for k in annotations.get(MANAGED_ANNOTATION, "").split(",") if k}


def foreign_labels(have: dict[str, str], annotations: dict[str, str], want: dict[str, str]) -> dict[str, str]:
    """The wanted keys a node already carries that this controller did not set: never overwritten."""
    managed = managed_keys(annotations)
    return {key: have[key] for key in want if key in have and key not in managed}


def label_patch(have: dict[str, str], annotations: dict[str, str],
                want: dict[str, str]) -> dict | None:
    """The strategic merge patch that gives a node the labels it should carry, or None.

    Labels this controller set earlier (listed in MANAGED_ANNOTATION) and no longer wanted are
    removed (null); labels it never set are left alone.
    """
    managed = managed_keys(annotations)
    changes: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
    changes.update({k: None for k in managed - set(want) if k in have})
    new_managed = ",".join(sorted(want))
    if not changes and new_managed == ",".join(sorted(managed)):
        return None
    return {"metadata": {"labels": changes, "annotations": {MANAGED_ANNOTATION: new_managed or None}}}


def shadowed_policies(policies: Iterable[Policy]) -> dict[str, str]:
    """Policy key -> why it sets no node label, for policies whose name another namespace's
    policy holds.

    A policy's labels are keyed by its name alone (TAS's contract: pods' node affinity names
    the key), so same-named policies in two namespaces would share them, and one namespace's
    metrics would evict the other's pods. The oldest (then the first namespace) sets them.
    """
    ordered = sorted(policies, key=lambda p: (p.created, p.namespace))
    owners: dict[str, Policy] = {}
    for policy in ordered:
        owners.setdefault(policy.name, policy)
    return {policy.key: (f"policy {owners[policy.name].key} has the same name and is older: it alone sets "
                         f"node label {deschedule.label_key(policy)} and the labels under "
                         f"{labeling.label_prefix(policy)}; this policy sets none until one is renamed or deleted")
            for policy in ordered if owners[policy.name] is not policy}


@dataclass
class Desired:
    """What the policies want on the nodes, and what they are not given."""

    labels: dict[str, dict[str, str]]  # node -> labels the policies want there
    violating: dict[str, list[str]]  # policy key -> nodes violating its deschedule rules
    owners: dict[str, str] = field(default_factory=dict)  # label key -> the policy that wants it
    # policy key -> (reason, message) for each of its labels not set (a Warning event each)
    not_set: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


def violating_condition(policy: Policy, nodes: list[str]) -> dict[str, str]:
    """The Violating condition: whether any node breaks the policy's deschedule rules."""
    if policy.strategy("deschedule") is None:
        return {"type": "Violating", "status": "False", "reason": "NoDescheduleStrategy",
                "message": "the policy has no deschedule strategy"}
    if not nodes:
        return {"type": "Violating", "status": "False", "reason": "NoNodesViolating",
                "message": "no node violates the deschedule rules"}
    return {"type": "Violating", "status": "True", "reason": "NodesViolating",
            "message": f"{len(nodes)} node(s) violate the deschedule rules: {' '.join(nodes)}"}


def _names(nodes: list[str], shown: int = 10) -> str:
    more = f" and {len(nodes) - shown} more" if len(nodes) > shown else ""
    return f": {' '.join(nodes[:shown])}{more}" if nodes else ""


def _enforced_condition(policy: Policy, filtered: list[str], violating: list[str],
                        labelled: list[str]) -> dict[str, str]:
    """The Enforced condition of a policy in audit mode: what it would do to the nodes now.

    Only audit policies carry it; the lists are sorted, so the message changes only with them.
    """
    would = []
    if policy.strategy("dontschedule") is not None:
        would.append(f"filter {len(filtered)} node(s) (dontschedule){_names(filtered)}")
    if policy.strategy("deschedule") is not None:
        would.append(f"label {len(violating)} node(s) violating (deschedule){_names(violating)}")
    if policy.strategy("labeling") is not None:
        would.append(f"set labels on {len(labelled)} node(s) (labeling){_names(labelled)}")
    if policy.strategy("scheduleonmetric") is not None:
        would.append("score the nodes (scheduleonmetric)")
    return {"type": "Enforced", "status": "False", "reason": "Audit",
            "message": f"audit mode (annotation {ENFORCEMENT_ANNOTATION}=audit): decisions are reported, "
                       "not enforced; if enforced it would now " + ("; ".join(would) or "do nothing")}


def _unchanged(current: Policy | None, meta: dict) -> bool:
    """Whether `meta` describes the policy the store holds: the same generation (so the same
    spec) and the same enforcement (an annotation edit does not bump the generation)."""
    if current is None or not current.generation or current.generation != meta.get("generation"):
        return False
    annotations = meta.get("annotations") or {}
    return isinstance(annotations, dict) and current.enforcement == (annotations.get(ENFORCEMENT_ANNOTATION)
                                                                     or "enforce")


def warning_condition(policy: Policy, shown: int = 5) -> dict[str, str] | None:
    """The Warning condition: the parts of an accepted policy that can never act, or None.

    It names the first `shown` of them; each has its own Event.
    """
    if not policy.warnings:
        return None
    message = "; ".join(str(warning) for warning in policy.warnings[:shown])
    if len(policy.warnings) > shown:
        message += f"; and {len(policy.warnings) - shown} more (see the policy's events)"
    return {"type": "Warning", "status": "True", "reason": "RulesNeverAct", "message": message}


def _labels_not_set_condition(reasons: list[tuple[str, str]], shown: int = 5) -> dict[str, str] | None:
    """The LabelsNotSet condition: why some of a valid policy's node labels are not set, or None.

    It names the first `shown` (reason, message) pairs; each has its own Event.
    """
    if not reasons:
        return None
    message = "; ".join(why for _, why in reasons[:shown])
    if len(reasons) > shown:
        message += f"; and {len(reasons) - shown} more (see the policy's events)"
    return {"type": "LabelsNotSet", "status": "True", "reason": reasons[0][0], "message": message}


# A watch: its name, the list call (also streamed by the watch), what to do with the listed
# items, and with each event (its type and object).
_Watch = tuple[str, Callable[..., Any], Callable[[Any], None], Callable[[str, Any], None]]


def _list_version(listing: Any) -> str:
    if isinstance(listing, dict):
        return listing["metadata"]["resourceVersion"]
    return listing.metadata.resource_version


def watch_forever(name: str, list_fn: Callable, on_list: Callable, on_event: Callable,
                  stop: threading.Event, watch_seconds: int = 300, backoff: Backoff | None = None,
                  sleep: Callable[[float], object] | None = None) -> None:
    """List once, then watch from the last resourceVersion seen; list again only after 410 Gone.

    A watch the server ends (its timeout) or a dropped connection (an API server restart)
    resumes from where it was, so nodes are not listed again every few minutes. Failures are
    retried after `backoff`'s waits (by `sleep`, stop.wait unless given), from its base again
    once a list or an event comes through.
    """
    backoff = backoff or Backoff()
    sleep = sleep or stop.wait
    version: str | None = None
    while not stop.is_set():
        try:
            if version is None:
                listing = list_fn()
                on_list(listing["items"] if isinstance(listing, dict) else listing.items)
                version = _list_version(listing)
                backoff.reset()
            w = watch.Watch()
            for event in w.stream(list_fn, resource_version=version, timeout_seconds=watch_seconds,
                                  allow_watch_bookmarks=True):
                if stop.is_set():
                    w.stop()
                    return
                backoff.reset()
                if event["type"] != "BOOKMARK":
                    on_event(event["type"], event["object"])
                version = w.resource_version or version
        except client.ApiException as error:
            if error.status == 410:
                log.info("%s watch: resourceVersion %s expired; listing again", name, version)
                version = None
            else:
                delay = backoff.next()
                log.warning("%s watch: %s %s; retrying in %.1f s", name, error.status, error.reason, delay)
                sleep(delay)
        except Exception as error:  # noqa: BLE001 - API server restarts: back off and resume
            delay = backoff.next()
            log.warning("%s watch: %s; retrying in %.1f s", name, error, delay)
            sleep(delay)


class Controller:
    def __init__(self, api_client: client.ApiClient, engine: Engine, telemetry: Telemetry,
                 is_leader: Callable[[], bool] = lambda: True):
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.engine = engine
        self.store = engine.store
        self.telemetry = telemetry
        self.is_leader = is_leader
        self.nodes: dict[str, tuple[dict[str, str], dict[str, str]]] = {}  # name -> (labels, annotations)
        self.addresses: dict[str, tuple[str, ...]] = {}  # name -> status.addresses, to match `instance` labels
        self._nodes_lock = threading.Lock()
        self._objects: dict[str, dict] = {}  # policy key -> last object seen
        self._status_written: dict[str, tuple[object, float]] = {}
        self._events_sent: set[tuple[str, int, str]] = set()
        self._not_set_logged: set[tuple[str, str]] = set()
        self.nodes_synced = False
        self.stop = threading.Event()

    # --- policies -----------------------------------------------------------------------

    def _accept(self, obj: dict) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
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

    # The watches (start) feed what they list and each event to the on_* methods below, which the
    # tests drive directly.

    def on_policy_list(self, items: list[dict]) -> None:
        """The policies listed: they replace every policy known."""
        self._objects.clear()
        valid, invalid = [], {}
        for obj in items:
            meta = obj.get("metadata", {})
            key = f"{meta.get('namespace')}/{meta.get('name')}"
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
            meta = obj.get("metadata", {})
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            log.info("removing policy %s", key)
            self._objects.pop(key, None)
            self._status_written.pop(key, None)
            self.store.delete(key)
            try:
                self.telemetry.violating.remove(key)
            except KeyError:
                pass
        else:
            self._accept(obj)

    def list_policies(self, **kwargs: Any) -> Any:
        return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    # --- what the schedulers and the descheduler report (reports.py) ---------------------
    # The return annotation tells the watch what to decode its events into.

    def list_scheduler_events(self, **kwargs: Any) -> CoreV1EventList:
        return self.core.list_event_for_all_namespaces(field_selector=reports.SCHEDULER_FIELDS, **kwargs)

    def list_descheduler_events(self, **kwargs: Any) -> CoreV1EventList:
        return self.core.list_event_for_all_namespaces(field_selector=reports.DESCHEDULER_FIELDS, **kwargs)

    # --- nodes --------------------------------------------------------------------------

    def _node_entry(self, node: Any) -> tuple[dict[str, str], dict[str, str]]:
        return dict(node.metadata.labels or {}), dict(node.metadata.annotations or {})

    @staticmethod
    def _node_addresses(node: Any) -> tuple[str, ...]:
        return tuple(a.address for a in (node.status.addresses if node.status else None) or () if a.address)

    def on_node_list(self, items: list[Any]) -> None:
        """The nodes listed: they replace every node known."""
        with self._nodes_lock:
            self.nodes = {n.metadata.name: self._node_entry(n) for n in items}
            self.addresses = {n.metadata.name: self._node_addresses(n) for n in items}
        self.nodes_synced = True
        self.engine.known_nodes = set(self.nodes)
        self.engine.rebuild()

    def on_node_event(self, kind: str, node: Any) -> None:
        """A node ADDED, MODIFIED or DELETED."""
        with self._nodes_lock:
            if kind == "DELETED":
                self.nodes.pop(node.metadata.name, None)
                self.addresses.pop(node.metadata.name, None)
            else:
                self.nodes[node.metadata.name] = self._node_entry(node)
                self.addresses[node.metadata.name] = self._node_addresses(node)
        if kind != "MODIFIED":
            self.engine.known_nodes = set(self.nodes)

    def remove_load_annotations(self) -> None:
        """Take off the load annotations a load-aware run left (the mode is off now)."""
        from tas_extender.cluster.annotator import cleanup_patches

        for node, body in cleanup_patches(self.all_annotations()).items():
            try:
                self.core.patch_node(node, body)
                log.info("%s: removed the load annotations", node)
            except client.ApiException as error:
                log.warning("%s: removing the load annotations failed: %s", node, error.reason)

    def annotations(self, node: str) -> dict[str, str] | None:
        entry = self.nodes.get(node)
        return entry[1] if entry else None

    def node_addresses(self) -> dict[str, tuple[str, ...]] | None:
        """node -> its addresses; None until the nodes are listed."""
        with self._nodes_lock:
            return dict(self.addresses) if self.nodes_synced else None

    def all_annotations(self) -> dict[str, dict[str, str]]:
        with self._nodes_lock:
            return {name: annotations for name, (_, annotations) in self.nodes.items()}

    def start(self, policies: bool = True, pods: LoadAware | None = None) -> None:
        """Start the watches: nodes and the Events counted in reports.py always, policies unless
        they come from files, pods for `pods`."""
        watches: list[_Watch] = [("node", self.core.list_node, self.on_node_list, self.on_node_event)]
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
        for name, list_fn, on_list, on_event in watches:
            threading.Thread(target=watch_forever, name=f"{name}-watch", daemon=True,
                             args=(name, list_fn, on_list, on_event, self.stop)).start()

    # --- reconciliation -----------------------------------------------------------------

    def _node_names(self) -> list[str]:
        with self._nodes_lock:
            return sorted(self.nodes)

    def desired_labels(self) -> Desired:
        """The labels every enforced policy wants on each node, the violating nodes of every valid
        policy (an audit policy's are reported, never labelled), and the policies that set none
        because another namespace's policy holds their name."""
        view = self.engine.view
        names = self._node_names()
        policies = self.store.policies()
        desired = Desired(labels={n: {} for n in names}, violating={},
                          not_set={key: [("NameTaken", why)] for key, why in shadowed_policies(policies).items()})
        for policy in policies:
            bad = view.violating(policy, names)
            desired.violating[policy.key] = bad
            if policy.audit or policy.key in desired.not_set:
                continue  # audit: the descheduler evicts nothing for it; labels set while enforced go
            for node, labels in view.labels(policy, names, bad).items():
                desired.labels[node].update(labels)
                desired.owners.update(dict.fromkeys(labels, policy.key))
        return desired

    def reconcile(self) -> None:
        """Patch the nodes whose labels must change, then write policy status and events."""
        desired = self.desired_labels()
        for node, want in desired.labels.items():
            with self._nodes_lock:
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
            with self._nodes_lock:  # until the watch catches up, assume the patch applied
                labels = {k: v for k, v in {**have, **changes}.items() if v is not None}
                self.nodes[node] = (labels, {**annotations, MANAGED_ANNOTATION: new_managed})
        for key, nodes in desired.violating.items():
            self.telemetry.violating.labels(key).set(len(nodes))
        self._report_not_set(desired.not_set)
        self._write_statuses(desired.violating, desired.not_set)

    def audit_condition(self, policy: Policy, violating: list[str]) -> dict[str, str] | None:
        """The Enforced condition of a policy in audit mode, from the current metrics; None when enforced."""
        if not policy.audit:
            return None
        names = self._node_names()
        labelled = self.engine.view.labels(policy, names, violating=())  # those of its labeling rules
        return _enforced_condition(policy, sorted(self.engine.failed(policy, names)), violating, sorted(labelled))

    def _report_not_set(self, not_set: dict[str, list[tuple[str, str]]]) -> None:
        """Log each reason a policy's labels are not set once, when it first appears."""
        current = {(key, why) for key, reasons in not_set.items() for _, why in reasons}
        for key, why in sorted(current - self._not_set_logged):
            log.warning("policy %s: label not set: %s", key, why)
        self._not_set_logged = current

    def _write_statuses(self, violating: dict[str, list[str]],
                        not_set: dict[str, list[tuple[str, str]]]) -> None:
        now = time.monotonic()
        invalid = self.store.invalid()
        for key, obj in list(self._objects.items()):
            meta = obj.get("metadata", {})
            generation = int(meta.get("generation") or 0)
            error = invalid.get(key)
            policy = None if error is not None else self.store.get(meta.get("namespace"), meta.get("name"))
            if error is not None:
                condition = {"type": "Valid", "status": "False", "reason": "InvalidPolicy",
                             "message": f"{error.field}: {error.reason}"}
                self._event(obj, generation, "InvalidPolicy", condition["message"])
            elif policy is not None:
                condition = {"type": "Valid", "status": "True", "reason": "Accepted",
                             "message": "policy is valid and in use"}
                for warning in policy.warnings:
                    self._event(obj, generation, warning.reason, str(warning))
            else:
                continue
            nodes = violating.get(key, [])
            warned = warning_condition(policy) if policy is not None else None
            unset = _labels_not_set_condition(not_set.get(key, []))
            if policy is not None and unset is not None:
                for reason, why in not_set[key]:
                    self._event(obj, generation, reason, why)
            audited = self.audit_condition(policy, nodes) if policy is not None else None
            content = (condition["status"], condition["message"], tuple(nodes), generation,
                       warned["message"] if warned else None, unset["message"] if unset else None,
                       audited["message"] if audited else None)
            last = self._status_written.get(key)
            if last and last[0] == content and now - last[1] < STATUS_REFRESH_SECONDS:
                continue
            conditions: list[dict[str, Any]] = [condition]  # each gains an int observedGeneration
            if policy is not None:
                conditions.append(violating_condition(policy, nodes))
                if warned is not None:
                    conditions.append(warned)
                if unset is not None:
                    conditions.append(unset)
                if audited is not None:
                    conditions.append(audited)
            old = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
            for entry in conditions:
                previous = old.get(entry["type"])
                entry["lastTransitionTime"] = (
                    previous["lastTransitionTime"]
                    if previous and previous.get("status") == entry["status"] and previous.get("lastTransitionTime")
                    else _now_iso())
                entry["observedGeneration"] = generation
            status = {"conditions": conditions, "violatingNodes": nodes,
                      "lastEvaluated": _now_iso(), "observedGeneration": generation}
            try:
                self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": status})
            except client.ApiException as error:
                if error.status != 404:
                    log.warning("writing status of %s: %s", key, error.reason)
                continue
            obj["status"] = status
            self._status_written[key] = (content, now)

    def _event(self, obj: dict, generation: int, reason: str, message: str) -> None:
        meta = obj["metadata"]
        marker = (f"{meta['namespace']}/{meta['name']}", generation, message)
        if marker in self._events_sent:
            return
        now = datetime.datetime.now(datetime.UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind=KIND, name=meta["name"],
                namespace=meta["namespace"], uid=meta.get("uid")),
            reason=reason, message=message, type="Warning",
            first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="tas-extender"))
        try:
            self.core.create_namespaced_event(meta["namespace"], event)
            self._events_sent.add(marker)
        except client.ApiException as error:
            log.warning("recording event for %s: %s", marker[0], error.reason)
