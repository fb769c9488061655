"""What Ansible itself renders from a role: an expression evaluated with the role's defaults and
vars (and `role_dir` pointing at it), by one `ansible-playbook` run on localhost, with no cluster."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import yaml

from .paths import REPO

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def rendered(role: pathlib.Path, expression: str, values: dict):
    """The value of `expression` (a Jinja template) with the role's variables and `values` as extra vars."""
    play = [{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(role / "defaults/main.yml"), str(role / "vars/main.yml")],
        "vars": {"role_dir": str(role)},
        "tasks": [{"name": "Render", "ansible.builtin.debug": {"msg": expression}}],
    }]
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    run = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "/dev/stdin", "--extra-vars", json.dumps(values)],
                         input=yaml.safe_dump(play), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
