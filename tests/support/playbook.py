"""ansible-playbook run from this virtualenv with the repository's ansible.cfg, its results read
from the json callback."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from .paths import REPO

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run_playbooks(playbooks: list[pathlib.Path | str], *args: str, env: dict[str, str] | None = None,
                  timeout: float = 300) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The run of the playbooks (one ansible-playbook, with args such as -i, --tags), and its json
    report of every play: plays[i].tasks[j].task.path is where the task was written, .hosts its
    results by host."""
    env = dict(os.environ, **(env or {}), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    run = subprocess.run([ANSIBLE_PLAYBOOK, *args, *map(str, playbooks)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    reports = json_reports(run.stdout)
    # the callback reports after each playbook, every play so far: the last report holds them all
    return run, reports[-1]["plays"] if reports else []


def json_reports(output: str) -> list[dict]:
    """The json callback's reports, one after the other."""
    decoder, reports, at = json.JSONDecoder(), [], 0
    while output[at:].strip():
        report, at = decoder.raw_decode(output, at + len(output[at:]) - len(output[at:].lstrip()))
        reports.append(report)
    return reports
