"""The TASPolicy controller: policy and node watches, node labels, policy status, events."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from tas_extender.backoff import Backoff
from tas_extender.engine import Engine
from tas_extender.load.mode import LoadAware
from tas_extender.policy import GROUP, KIND, PLURAL, VERSION, Policy, PolicyError, parse_policy
from tas_extender.strategies import deschedule, labeling
from tas_extender.telemetry import Telemetry

log = logging.getLogger(__name__)

# Which label keys on a node this controller set, so it can remove them when a policy is
# edited or deleted, even across restarts.
MANAGED_ANNOTATION = "telemetry.intel.com/managed-labels"
STATUS_REFRESH_SECONDS = 60


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def label_patch(have: dict[str, str], annotations: dict[str, str],
                want: dict[str, str]) -> dict | None:
    """The strategic merge patch that gives a node the labels it should carry, or None.

    Labels this controller set earlier (listed in MANAGED_ANNOTATION) and no longer wanted are
    removed (null); labels it never set are left alone.
    """
    managed = {k for k in annotations.get(MANAGED_ANNOTATION, "").split(",") if k}
    changes: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
    changes.update({k: None for k in managed - set(want) if k in have})
    new_managed = ",".join(sorted(want))
    if not changes and new_managed == ",".join(sorted(managed)):
        return None
    return {"metadata": {"labels": changes, "annotations": {MANAGED_ANNOTATION: new_managed or None}}}


def _violating_condition(policy: Policy, nodes: list[str]) -> dict[str, str]:
    """The Violating condition: whether any node breaks the policy's deschedule rules."""
    if policy.strategy("deschedule") is None:
        return {"type": "Violating", "status": "False", "reason": "NoDescheduleStrategy",
                "message": "the policy has no deschedule strategy"}
    if not nodes:
        return {"type": "Violating", "status": "False", "reason": "NoNodesViolating",
                "message": "no node violates the deschedule rules"}
    return {"type": "Violating", "status": "True", "reason": "NodesViolating",
            "message": f"{len(nodes)} node(s) violate the deschedule rules: {' '.join(nodes)}"}


def _warning_condition(policy: Policy, shown: int = 5) -> dict[str, str] | None:
    """The Warning condition: the parts of an accepted policy that can never act, or None.

    It names the first `shown` of them; each has its own Event.
    """
    if not policy.warnings:
        return None
    message = "; ".join(str(warning) for warning in policy.warnings[:shown])
    if len(policy.warnings) > shown:
        message += f"; and {len(policy.warnings) - shown} more (see the policy's events)"
    return {"type": "Warning", "status": "True", "reason": "RulesNeverAct", "message": message}


# A watch: its name, the list call (also streamed by the watch), what to do with the listed
# items, and with each event (its type and object).
_Watch = tuple[str, Callable[..., Any], Callable[[Any], None], Callable[[str, Any], None]]


def _list_version(listing: Any) -> str:
    if isinstance(listing, dict):
        return listing["metadata"]["resourceVersion"]
    return listing.metadata.resource_version


def _watch_forever(name: str, list_fn: Callable, on_list: Callable, on_event: Callable,
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
        self.nodes_synced = False
        self.stop = threading.Event()

    # --- policies -----------------------------------------------------------------------

    def _accept(self, obj: dict) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self._objects[key] = obj
        current = self.store.get(meta.get("namespace"), meta.get("name"))
        if current is not None and current.generation and current.generation == meta.get("generation"):
            return  # our own status write: the spec, and so the decisions, did not change
        try:
            policy = parse_policy(obj)
        except PolicyError as error:
            log.warning("policy %s is invalid: %s", key, error)
            self.store.put_invalid(key, error)
            return
        log.info("registering policy %s (%s)", key,
                 " ".join(s for s in ("scheduleonmetric", "dontschedule", "deschedule", "labeling")
                          if policy.strategy(s)))
        for warning in policy.warnings:
            log.warning("policy %s: %s", key, warning)
        self.store.put(policy)

    def _on_policy_list(self, items: list[dict]) -> None:
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
            for warning in policy.warnings:
                log.warning("policy %s: %s", key, warning)
            valid.append(policy)
        self.store.replace_all(valid, invalid)

    def _on_policy_event(self, kind: str, obj: dict) -> None:
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

    def _list_policies(self, **kwargs: Any) -> Any:
        return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    # --- nodes --------------------------------------------------------------------------

    def _node_entry(self, node: Any) -> tuple[dict[str, str], dict[str, str]]:
        return dict(node.metadata.labels or {}), dict(node.metadata.annotations or {})

    @staticmethod
    def _node_addresses(node: Any) -> tuple[str, ...]:
        return tuple(a.address for a in (node.status.addresses if node.status else None) or () if a.address)

    def _on_node_list(self, items: list[Any]) -> None:
        with self._nodes_lock:
            self.nodes = {n.metadata.name: self._node_entry(n) for n in items}
            self.addresses = {n.metadata.name: self._node_addresses(n) for n in items}
        self.nodes_synced = True
        self.engine.known_nodes = set(self.nodes)
        self.engine.rebuild()

    def _on_node_event(self, kind: str, node: Any) -> None:
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
        from tas_extender.load.annotator import cleanup_patches

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
        """Start the watches: nodes always, policies unless they come from files, pods for `pods`."""
        watches: list[_Watch] = [("node", self.core.list_node, self._on_node_list, self._on_node_event)]
        if policies:
            watches.append(("policy", self._list_policies, self._on_policy_list, self._on_policy_event))
        if pods is not None:
            def on_pod_list(items: list[Any]) -> None:
                for pod in items:
                    pods.on_pod(pod.metadata.uid, pod.spec.node_name, initial=True)

            def on_pod_event(kind: str, pod: Any) -> None:
                if kind == "DELETED":
                    pods.forget_pod(pod.metadata.uid)
                else:
                    pods.on_pod(pod.metadata.uid, pod.spec.node_name)

            watches.append(("pod", self.core.list_pod_for_all_namespaces, on_pod_list, on_pod_event))
        for name, list_fn, on_list, on_event in watches:
            threading.Thread(target=_watch_forever, name=f"{name}-watch", daemon=True,
                             args=(name, list_fn, on_list, on_event, self.stop)).start()

    # --- reconciliation -----------------------------------------------------------------

    def desired_labels(self) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
        """node -> labels every valid policy wants there, and policy key -> violating nodes."""
        snapshot = self.engine.view.snapshot
        with self._nodes_lock:
            names = sorted(self.nodes)
        desired: dict[str, dict[str, str]] = {n: {} for n in names}
        violating: dict[str, list[str]] = {}
        for policy in self.store.policies():
            bad = deschedule.violating_nodes(policy, snapshot, names)
            violating[policy.key] = bad
            for node in bad:
                desired[node][deschedule.label_key(policy)] = deschedule.VIOLATING
            for node, labels in labeling.node_labels(policy, snapshot, names).items():
                desired[node].update(labels)
        return desired, violating

    def reconcile(self) -> None:
        """Patch the nodes whose labels must change, then write policy status and events."""
        desired, violating = self.desired_labels()
        for node, want in desired.items():
            with self._nodes_lock:
                entry = self.nodes.get(node)
            if entry is None:
                continue
            have, annotations = entry
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
        for key, nodes in violating.items():
            self.telemetry.violating.labels(key).set(len(nodes))
        self._write_statuses(violating)

    def _write_statuses(self, violating: dict[str, list[str]]) -> None:
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
            warned = _warning_condition(policy) if policy is not None else None
            content = (condition["status"], condition["message"], tuple(nodes), generation,
                       warned["message"] if warned else None)
            last = self._status_written.get(key)
            if last and last[0] == content and now - last[1] < STATUS_REFRESH_SECONDS:
                continue
            conditions: list[dict[str, Any]] = [condition]  # each gains an int observedGeneration
            if policy is not None:
                conditions.append(_violating_condition(policy, nodes))
                if warned is not None:
                    conditions.append(warned)
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
