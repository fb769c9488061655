"""`tas-extender renew-certificates`: the leaf certificates of a certificates directory and the TLS
Secrets made from them, renewed every --interval (or once) with no playbook run. The flags become
one `RenewSettings`; `renew_until_stopped` runs the passes (renewal.py decides and writes)."""

from __future__ import annotations

import argparse
import datetime
import logging
import pathlib
import signal
import sys
import threading
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from tas_extender.certs.renewal import SecretTarget
from tas_extender.cli.common import add_log_level, duration, in_a_pod, kube_client

if TYPE_CHECKING:
    from tas_extender.certs.renewal import SecretsApi

log = logging.getLogger("tas_extender")


def secret_target(text: str) -> SecretTarget:
    try:
        return SecretTarget.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@dataclass(frozen=True)
class RenewSettings:
    """Everything `renew-certificates` runs with: one field per flag, named as its `dest`."""

    certificates_dir: str
    interval: float
    renew_before: float
    secrets: list[SecretTarget]
    kubeconfig: str | None
    once: bool
    log_level: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RenewSettings:
        return cls(**{each.name: getattr(args, each.name) for each in fields(cls)})


def add_parser(sub: argparse._SubParsersAction) -> None:
    renew = sub.add_parser("renew-certificates",
                           help="renew due leaf certificates of a certificates directory, and their TLS Secrets")
    renew.set_defaults(run=lambda args: renew_until_stopped(RenewSettings.from_args(args)))
    renew.add_argument("--certificates-dir", default="/etc/tas/pki",
                       help="the directory of ca.crt, ca.key and the leaves (their subdirectories too)")
    renew.add_argument("--interval", type=duration, default=3600.0, help="time between passes (1h)")
    renew.add_argument("--renew-before", type=duration, default=30 * 86400.0,
                       help="renew a certificate that expires within this (720h: 30 days)")
    renew.add_argument("--secret", dest="secrets", type=secret_target, action="append", default=[],
                       metavar="NAMESPACE/NAME=STEM",
                       help="a TLS Secret made from STEM.crt and STEM.key (repeatable)")
    renew.add_argument("--kubeConfig", "--kubeconfig", dest="kubeconfig", default=None,
                       help="kubeconfig file for the Secrets; in a pod the in-cluster config is used")
    renew.add_argument("--once", action="store_true", help="one pass, then exit")
    add_log_level(renew)


def _secrets_api(settings: RenewSettings) -> SecretsApi | None:
    if not settings.secrets:
        return None
    if not (settings.kubeconfig or in_a_pod()):
        raise ValueError("--secret needs --kubeconfig (or a pod)")
    from kubernetes import client

    return client.CoreV1Api(kube_client(settings.kubeconfig))


def renew_until_stopped(settings: RenewSettings) -> int:
    """A pass now and every --interval until SIGTERM; with --once, 1 when the pass failed."""
    from tas_extender.certs.renewal import renew_once

    try:
        api = _secrets_api(settings)
    except ValueError as error:
        print(f"tas-extender: {error}", file=sys.stderr)
        return 2
    directory = pathlib.Path(settings.certificates_dir)
    renew_before = datetime.timedelta(seconds=settings.renew_before)
    stop = threading.Event()
    if not settings.once:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while True:
        try:
            report = renew_once(directory, api, settings.secrets, renew_before)
            log.info("renewal pass: %d file(s) and %d Secret(s) renewed, %d left alone",
                     len(report.files), len(report.secrets), len(report.warnings))
            failed = False
        except Exception as error:  # noqa: BLE001 - a pass that fails is tried again next interval
            log.error("renewal pass failed: %s", error)
            failed = True
        if settings.once:
            return 1 if failed else 0
        if stop.wait(settings.interval):
            return 0
