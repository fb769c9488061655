#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: supervisor_program
short_description: Bring supervisord programs to RUNNING, whatever state each is in
version_added: 0.3.0
description:
  - Converges supervisord programs to C(RUNNING) from any state. A program supervisord is
    still starting or retrying (C(STARTING), C(BACKOFF), C(STOPPING)) is waited for; one that
    is stopped or gave up (C(STOPPED), C(EXITED), C(FATAL), C(UNKNOWN)) is started.
  - C(community.general.supervisorctl) with O(community.general.supervisorctl#module:state=started)
    runs C(supervisorctl start) on a program in C(BACKOFF), which supervisord refuses with
    C(ERROR (already started)); right after supervisord starts, a program that exits once
    (a controller whose API server is not up yet) is in that state.
  - Waits while supervisord itself is not answering yet (its socket not created).
  - Fails with the program's last state and the tail of its log when it does not reach
    C(RUNNING) within O(timeout) or after O(start_attempts) starts.
options:
  name:
    description: Program names as in C([program:NAME]).
    type: list
    elements: str
    required: true
  config:
    description: supervisord's configuration file, passed to C(supervisorctl -c).
    type: path
  supervisorctl_path:
    description: The supervisorctl executable; found on the path when not given.
    type: path
  timeout:
    description: Seconds to wait for all programs together.
    type: int
    default: 300
  start_attempts:
    description: How many times a program that stopped or gave up is started before the task fails.
    type: int
    default: 3
  log_bytes:
    description: How much of a failing program's log the failure message carries.
    type: int
    default: 3000
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports which programs would be started; waits for nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - Telemetry-aware scheduling maintainers (@tas-maintainers)
"""

EXAMPLES = r"""
- name: Make sure every control-plane program is running
  intel.tas.supervisor_program:
    name: [etcd, kube-apiserver, kube-controller-manager, kube-scheduler]
    config: /var/lib/tas/supervisord.conf
    supervisorctl_path: /opt/tas/venv/bin/supervisorctl
"""

RETURN = r"""
started:
  description: Programs this task started (supervisord's own retries are not counted).
  returned: always
  type: list
  elements: str
  sample: [kube-controller-manager]
states:
  description: The last state seen of each program.
  returned: always
  type: dict
  sample: {etcd: RUNNING, kube-apiserver: RUNNING}
"""

import time

from ansible.module_utils.basic import AnsibleModule

# supervisord moves a program out of these by itself: starting it now would be refused.
TRANSIENT = frozenset(["STARTING", "BACKOFF", "STOPPING"])
# supervisord leaves a program in these until told otherwise.
RESTING = frozenset(["STOPPED", "EXITED", "FATAL", "UNKNOWN"])


def next_step(state):
    """What to do about one program: 'done', 'wait' or 'start' ('missing' when unknown)."""
    if state == "RUNNING":
        return "done"
    if state in RESTING:
        return "start"
    if state == "NO SUCH PROCESS":
        return "missing"
    # A transient state, or supervisord not answering yet.
    return "wait"


def parse_status(output, names):
    """Each named program's state from `supervisorctl status` output; absent when not given."""
    states = {}
    for line in output.splitlines():
        fields = line.split()
        if not fields or fields[0].rstrip(":") not in names:
            continue
        name = fields[0].rstrip(":")
        if "no such process" in line:
            states[name] = "NO SUCH PROCESS"
        elif len(fields) > 1:
            states[name] = fields[1]
    return states


class Supervisor(object):
    """supervisorctl for one supervisord."""

    def __init__(self, module, path, config):
        self.module = module
        self.base = [path] + (["-c", config] if config else [])

    def run(self, *args):
        rc, out, err = self.module.run_command(self.base + list(args))
        return rc, out + err

    def states(self, names):
        # status exits non-zero when a program is not running; its output still says why.
        return parse_status(self.run("status", *names)[1], names)

    def start(self, name):
        """Start one program; True unless supervisord refused for a reason other than a race."""
        rc, out = self.run("start", name)
        return rc == 0 or "already started" in out

    def log_tail(self, name, size):
        rc, out = self.run("tail", "-%d" % size, name)
        return out.strip() if rc == 0 else "(no log: %s)" % out.strip()


def converge(supervisor, names, timeout, start_attempts, log_bytes, check_mode, sleep=time.sleep, clock=time.monotonic):
    """Drive every program to RUNNING; returns (started, states, error or None)."""
    deadline = clock() + timeout
    starts = dict((name, 0) for name in names)
    started = []
    states = {}
    pending = list(names)
    while True:
        states.update(supervisor.states(pending))
        for name in list(pending):
            step = next_step(states.get(name))
            if step == "done":
                pending.remove(name)
            elif step == "missing":
                return started, states, (
                    "program %s is not in supervisord's configuration: run `supervisorctl update` "
                    "after adding its [program:%s] section" % (name, name))
            elif step == "start":
                if check_mode:
                    started.append(name)
                    pending.remove(name)
                    continue
                if starts[name] >= start_attempts:
                    return started, states, (
                        "program %s is %s after %d starts; its log ends with:\n%s"
                        % (name, states[name], starts[name], supervisor.log_tail(name, log_bytes)))
                starts[name] += 1
                if supervisor.start(name) and name not in started:
                    started.append(name)
        if not pending:
            return started, states, None
        if clock() >= deadline:
            return started, states, "\n".join(
                "program %s still %s after %d s; its log ends with:\n%s"
                % (name, states.get(name, "not answering (supervisord not running?)"), timeout,
                   supervisor.log_tail(name, log_bytes))
                for name in pending)
        sleep(1)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="list", elements="str", required=True),
            config=dict(type="path"),
            supervisorctl_path=dict(type="path"),
            timeout=dict(type="int", default=300),
            start_attempts=dict(type="int", default=3),
            log_bytes=dict(type="int", default=3000),
        ),
        supports_check_mode=True,
    )
    path = module.params["supervisorctl_path"] or module.get_bin_path("supervisorctl", required=True)
    supervisor = Supervisor(module, path, module.params["config"])
    started, states, error = converge(
        supervisor, module.params["name"], module.params["timeout"], module.params["start_attempts"],
        module.params["log_bytes"], module.check_mode)
    if error:
        module.fail_json(msg=error, started=started, states=states)
    module.exit_json(changed=bool(started), started=started, states=states)


if __name__ == "__main__":
    main()
