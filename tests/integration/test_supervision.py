"""Every role that supervises processes brings them up whatever state supervisord has them in.

The race of a KWOK cluster's start, on purpose: supervisord is started and the role's own
"make sure it is running" task runs at once, while a program that exits a few times before
it stays up is in BACKOFF (a kube-controller-manager whose API server is not up yet).
`supervisorctl start` on such a program answers `ERROR (already started)`, which failed the
play one run in two. The task is read from the role's file as it stands and run with that
role's variables pointing at a supervisord of the test's own, so a role that goes back to
starting programs blindly fails here.

A program that never stays up must fail the task with its own log, not hang or pass.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
import yaml

from support import REPO, wait_for

BIN = pathlib.Path(sys.executable).parent
PLAYBOOK_TIMEOUT = 300
EXITS_BEFORE_STAYING_UP = 3


@dataclass(frozen=True)
class RoleTask:
    id: str
    tasks_file: str
    task_name: str
    variables: object  # (program names, supervisord config) -> the role's variables


ROLE_TASKS = [
    RoleTask(
        "KWOK cluster's control plane", "roles/local_cluster/tasks/processes.yml",
        "Make sure every control-plane program is running",
        lambda names, conf: {
            "_local_cluster_programs": [{"name": name} for name in names],
            "_local_cluster_supervisor_conf": str(conf),
            "_local_cluster_supervisorctl": str(BIN / "supervisorctl"),
            "local_cluster_ready_timeout": 120,
        }),
    RoleTask(
        "real-node cluster's programs", "roles/real_cluster/tasks/nodes.yml",
        "Make sure the API endpoint and every node's containerd, kubelet and sshd are running",
        lambda names, conf: {
            # api-endpoint, and containerd-<node>, kubelet-<node>, sshd-<node>, as the role writes them.
            "_real_cluster_nodes": [{"name": name.removeprefix("containerd-")}
                                    for name in names if name.startswith("containerd-")],
            "_real_cluster_supervisor_conf": str(conf),
            "_real_cluster_supervisorctl": str(BIN / "supervisorctl"),
            "real_cluster_ready_timeout": 120,
        }),
    RoleTask(
        "host-mode service", "collections/ansible_collections/intel/tas/roles/host_service/tasks/supervisord.yml",
        "Make sure the program is running, {{ host_service_name }}",
        lambda names, conf: {
            "host_service_name": names[0],
            "host_service_state": "started",
            "host_service_supervisor_config": str(conf),
            "host_service_supervisorctl_path": str(BIN / "supervisorctl"),
        }),
]

PROGRAMS = {
    "KWOK cluster's control plane": ["etcd", "kube-controller-manager"],
    "real-node cluster's programs": ["api-endpoint", "containerd-node-1", "sshd-node-1", "kubelet-node-1"],
    "host-mode service": ["tas-extender"],
}


def role_task(role_task: RoleTask) -> dict:
    tasks = yaml.safe_load((REPO / role_task.tasks_file).read_text())
    matching = [task for task in tasks if task.get("name") == role_task.task_name]
    assert len(matching) == 1, f"{role_task.tasks_file} has no single task named {role_task.task_name!r}"
    return matching[0]


def write_supervisord(directory: pathlib.Path, flaky: list[str], steady: list[str], broken: list[str]) -> pathlib.Path:
    """A supervisord whose flaky programs exit EXITS_BEFORE_STAYING_UP times, then stay up."""
    programs = []
    for name in flaky + steady + broken:
        if name in flaky:
            counter = directory / f"{name}.exits"
            script = (f"n=$(cat {counter} 2>/dev/null || echo 0); "
                      f"if [ $n -lt {EXITS_BEFORE_STAYING_UP} ]; then echo $((n+1)) > {counter}; "
                      f"echo '{name}: no API server yet' >&2; exit 1; fi; exec sleep 600")
        elif name in broken:
            script = f"echo '{name}: cannot open its certificate' >&2; exit 1"
        else:
            script = "exec sleep 600"
        programs.append(textwrap.dedent(f"""\
            [program:{name}]
            command=/bin/sh -c "{script}"
            autostart=true
            autorestart=true
            startsecs=1
            startretries={1 if name in broken else EXITS_BEFORE_STAYING_UP + 5}
            redirect_stderr=true
            stdout_logfile={directory}/{name}.log
            """))
    conf = directory / "supervisord.conf"
    conf.write_text(textwrap.dedent(f"""\
        [unix_http_server]
        file={directory}/supervisor.sock
        [supervisord]
        logfile={directory}/supervisord.log
        pidfile={directory}/supervisord.pid
        childlogdir={directory}
        [rpcinterface:supervisor]
        supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
        [supervisorctl]
        serverurl=unix://{directory}/supervisor.sock
        """) + "\n".join(programs))
    return conf


def states(conf: pathlib.Path) -> dict[str, str]:
    out = subprocess.run([BIN / "supervisorctl", "-c", conf, "status"], capture_output=True, text=True).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) > 1}


@pytest.fixture
def supervisord(tmp_path):
    """Start a supervisord of the given programs; shut it down afterwards."""
    started = []

    def start(flaky: list[str], steady: list[str] = (), broken: list[str] = ()) -> pathlib.Path:
        conf = write_supervisord(tmp_path, list(flaky), list(steady), list(broken))
        subprocess.run([BIN / "supervisord", "-c", conf], check=True)
        started.append(conf)
        return conf

    yield start
    for conf in started:
        subprocess.run([BIN / "supervisorctl", "-c", conf, "shutdown"], capture_output=True)
        pid = conf.parent / "supervisord.pid"
        wait_for(lambda pid=pid: not pid.exists(), 30, "supervisord of the test to shut down")


def run_task(role: RoleTask, names: list[str], conf: pathlib.Path,
             tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": role.variables(names, conf), "tasks": [role_task(role)],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               PATH=f"{BIN}:{os.environ['PATH']}")
    return subprocess.run([BIN / "ansible-playbook", "-i", "localhost,", str(playbook)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT)


def task_result(run: subprocess.CompletedProcess) -> dict:
    report = json.loads(run.stdout)
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.mark.parametrize("role", ROLE_TASKS, ids=[role.id for role in ROLE_TASKS])
def test_programs_still_starting_when_the_task_runs_end_up_running(role, supervisord, tmp_path):
    names = PROGRAMS[role.id]
    conf = supervisord(flaky=names[-1:], steady=names[:-1])
    run = run_task(role, names, conf, tmp_path)
    assert run.returncode == 0, f"the role's task failed on a program supervisord was retrying:\n{run.stdout[-3000:]}"
    assert all(states(conf)[name] == "RUNNING" for name in names), states(conf)
    assert (tmp_path / f"{names[-1]}.exits").read_text().strip() == str(EXITS_BEFORE_STAYING_UP)


@pytest.mark.parametrize("role", ROLE_TASKS, ids=[role.id for role in ROLE_TASKS])
def test_a_program_that_gave_up_is_started_again(role, supervisord, tmp_path):
    names = PROGRAMS[role.id]
    conf = supervisord(flaky=[], steady=names)
    subprocess.run([BIN / "supervisorctl", "-c", conf, "stop", names[-1]], check=True, capture_output=True)
    run = run_task(role, names, conf, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:]
    assert task_result(run)["changed"] is True
    assert states(conf)[names[-1]] == "RUNNING"


def test_a_program_that_cannot_stay_up_fails_the_play_with_its_log(supervisord, tmp_path):
    role = ROLE_TASKS[0]
    conf = supervisord(flaky=[], steady=["etcd"], broken=["kube-controller-manager"])
    run = run_task(role, ["etcd", "kube-controller-manager"], conf, tmp_path)
    assert run.returncode != 0
    message = task_result(run)["msg"]
    assert "program kube-controller-manager is FATAL" in message, message
    assert "cannot open its certificate" in message, message
