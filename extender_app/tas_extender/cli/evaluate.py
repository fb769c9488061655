"""`tas-extender evaluate`: the decisions the extender would make, from files, as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from tas_extender.cli.common import MISSING_METRICS, LoadInputs, MissingMetrics, load_policy_files, moment
from tas_extender.decide.policy import PolicyError


@dataclass(frozen=True)
class EvaluateSettings:
    policy_files: list[str]
    metrics_file: str | None
    missing_metrics: MissingMetrics
    load: LoadInputs

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EvaluateSettings:
        return cls(args.policy_files, args.metrics_file, args.missing_metrics, LoadInputs.from_args(args))


def add_parser(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser("evaluate", help="print the decisions for policies, metrics and node load as JSON")
    evaluate.set_defaults(run=lambda args: run(EvaluateSettings.from_args(args)))
    evaluate.add_argument("--policy-file", dest="policy_files", action="append", default=[],
                          help="YAML TASPolicy documents (repeatable)")
    evaluate.add_argument("--metrics-file", default=None, help="Prometheus text file with node-labelled metrics")
    evaluate.add_argument("--missing-metrics", choices=MISSING_METRICS, default="fail-open")
    offline = evaluate.add_argument_group("load-aware decisions (as serve --load-aware answers them)")
    offline.add_argument("--load-aware", action="store_true", help="also decide by node load")
    offline.add_argument("--load-policy", default=None, help="DynamicSchedulerPolicy YAML; implies --load-aware")
    offline.add_argument("--nodes", default=None,
                         help="the nodes with their load annotations: `kubectl get nodes -o json` (or YAML)")
    offline.add_argument("--bindings", default=None,
                         help="recent bindings: YAML/JSON mapping node -> seconds ago of each pod bound there")
    offline.add_argument("--now", default=None, help="the moment of the decision, such as 2026-11-22T10:00:00Z")
    offline.add_argument("--load-weight", type=float, default=1.0,
                         help="weight of the load score against a TASPolicy's own score (weight 1)")


def run(settings: EvaluateSettings) -> int:
    from tas_extender.decide.metrics import Snapshot
    from tas_extender.offline.evaluate import evaluate
    from tas_extender.sources.textfile import parse

    valid, invalid = load_policy_files(settings.policy_files)
    if invalid:
        for key, error in invalid.items():
            print(f"tas-extender: policy {key} is invalid: {error}", file=sys.stderr)
        return 1
    if not valid and not settings.load.aware:
        print("tas-extender: evaluate needs --policy-file, --load-aware or --load-policy", file=sys.stderr)
        return 2
    try:
        now = moment(settings.load.now)
        load, annotated = settings.load.offline(now) if settings.load.aware else (None, [])
    except (OSError, ValueError, PolicyError) as error:
        print(f"tas-extender: {error}", file=sys.stderr)
        return 1
    samples: dict = {}
    if settings.metrics_file:
        with open(settings.metrics_file, encoding="utf-8") as handle:
            samples = parse(handle.read(), now)
    snapshot = Snapshot.build(samples, now, float("inf"))
    nodes = sorted(set(snapshot.nodes) | set(annotated))
    doc = evaluate(valid, snapshot, nodes, settings.missing_metrics == "fail-closed", load, settings.load.weight)
    print(json.dumps(doc, indent=2, sort_keys=True))
    return 0
