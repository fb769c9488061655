"""`tas-extender`: serve (cluster or static files), evaluate (offline decisions), explain, crd,
check-load-policy, renew-certificates.

Each subcommand is a module here: its flags (`add_parser`), the typed settings they become, and
the function that runs on those settings. `main` parses the command line and calls it. The top
layer: the one package that may import every other and wires them together."""

from __future__ import annotations

import argparse
import logging

from tas_extender import __version__
from tas_extender.cli import documents, evaluate, explain, renew, serve
from tas_extender.cli.common import duration, load_policy_files, positive_int

__all__ = ["duration", "load_policy_files", "main", "parser", "positive_int"]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tas-extender", description=__doc__.split("\n\n")[0])
    top.add_argument("--version", action="version", version=f"tas-extender {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    serve.add_parser(sub)
    evaluate.add_parser(sub)
    explain.add_parser(sub)
    documents.add_parsers(sub)
    renew.add_parser(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, getattr(args, "log_level", "info").upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    status: int = args.run(args)
    return status
