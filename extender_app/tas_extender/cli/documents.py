"""`tas-extender crd` and `tas-extender check-load-policy`: the CRD the controller serves, and a
DynamicSchedulerPolicy file checked before it is deployed."""

from __future__ import annotations

import argparse
import sys

import yaml

from tas_extender.decide.policy import PolicyError


class _IndentedDumper(yaml.SafeDumper):
    """Indents list items under their key, as yamllint and most Kubernetes manifests do."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    crd = sub.add_parser("crd", help="print the TASPolicy CustomResourceDefinition (YAML)")
    crd.set_defaults(run=lambda args: print_crd())
    check = sub.add_parser("check-load-policy", help="validate a DynamicSchedulerPolicy file (load-aware mode)")
    check.add_argument("path")
    check.set_defaults(run=lambda args: check_load_policy(args.path))


def print_crd() -> int:
    from tas_extender.cluster.crd import crd

    sys.stdout.write(yaml.dump(crd(), Dumper=_IndentedDumper, sort_keys=False))
    return 0


def check_load_policy(path: str) -> int:
    from tas_extender.decide.load.policy import describe, load_policy_file, policy_warnings

    try:
        policy = load_policy_file(path)
    except PolicyError as error:
        print(f"tas-extender: {error}", file=sys.stderr)
        return 1
    for warning in policy_warnings(policy):
        print(f"tas-extender: warning: {path}: {warning}", file=sys.stderr)
    print(f"{path}: valid; {describe(policy)}")
    return 0
