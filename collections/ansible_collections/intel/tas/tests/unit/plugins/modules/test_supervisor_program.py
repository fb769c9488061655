"""intel.tas.supervisor_program: each supervisord state leads to waiting, starting or failing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.intel.tas.plugins.modules import supervisor_program as sp


class FakeSupervisor(object):
    """A supervisord whose programs walk through given states, one per status call."""

    def __init__(self, timelines, start_answers=None):
        self.timelines = dict((name, list(states)) for name, states in timelines.items())
        self.start_answers = start_answers or {}
        self.starts = []

    def states(self, names):
        seen = {}
        for name in names:
            timeline = self.timelines[name]
            if timeline:
                state = timeline.pop(0) if len(timeline) > 1 else timeline[0]
                if state is not None:
                    seen[name] = state
        return seen

    def start(self, name):
        self.starts.append(name)
        return self.start_answers.get(name, True)

    def log_tail(self, name, size):
        return "last words of %s" % name


def run(supervisor, names, timeout=30, attempts=3, check_mode=False):
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds

    return sp.converge(supervisor, names, timeout, attempts, 1000, check_mode,
                       sleep=sleep, clock=lambda: clock[0])


@pytest.mark.parametrize(
    ("state", "step"),
    [
        ("RUNNING", "done"),
        ("STARTING", "wait"),
        ("BACKOFF", "wait"),
        ("STOPPING", "wait"),
        ("STOPPED", "start"),
        ("EXITED", "start"),
        ("FATAL", "start"),
        ("UNKNOWN", "start"),
        (None, "wait"),
        ("NO SUCH PROCESS", "missing"),
    ],
)
def test_each_state_has_one_next_step(state, step):
    assert sp.next_step(state) == step


def test_status_output_is_read_per_program():
    output = (
        "etcd                             RUNNING   pid 10, uptime 0:01:00\n"
        "kube-controller-manager          BACKOFF   Exited too quickly (process log may have details)\n"
        "ghost: ERROR (no such process)\n"
    )
    assert sp.parse_status(output, ["etcd", "kube-controller-manager", "ghost", "other"]) == {
        "etcd": "RUNNING", "kube-controller-manager": "BACKOFF", "ghost": "NO SUCH PROCESS"}


def test_supervisord_not_answering_yet_gives_no_states():
    assert sp.parse_status("unix:///tmp/s.sock no such file\n", ["etcd"]) == {}


def test_a_program_in_backoff_is_waited_for_not_started():
    supervisor = FakeSupervisor({"kcm": ["STARTING", "BACKOFF", "STARTING", "RUNNING"]})
    started, states, error = run(supervisor, ["kcm"])
    assert (started, error, supervisor.starts) == ([], None, [])
    assert states == {"kcm": "RUNNING"}


def test_supervisord_still_starting_is_waited_for():
    supervisor = FakeSupervisor({"etcd": [None, None, "STARTING", "RUNNING"]})
    assert run(supervisor, ["etcd"])[2] is None


def test_a_fatal_program_is_started_and_reported():
    supervisor = FakeSupervisor({"kcm": ["FATAL", "RUNNING"]})
    started, dummy, error = run(supervisor, ["kcm"])
    assert (started, error, supervisor.starts) == (["kcm"], None, ["kcm"])


def test_already_started_answer_is_a_race_not_a_failure():
    supervisor = FakeSupervisor({"kcm": ["EXITED", "STARTING", "RUNNING"]}, start_answers={"kcm": True})
    assert run(supervisor, ["kcm"])[2] is None


def test_a_program_that_cannot_stay_up_fails_with_its_log():
    supervisor = FakeSupervisor({"kcm": ["FATAL"]}, start_answers={"kcm": False})
    started, states, error = run(supervisor, ["kcm"], attempts=2)
    assert supervisor.starts == ["kcm", "kcm"]
    assert "program kcm is FATAL after 2 starts" in error
    assert "last words of kcm" in error


def test_a_program_stuck_starting_fails_at_the_deadline_naming_its_state():
    supervisor = FakeSupervisor({"kcm": ["STARTING"], "etcd": ["RUNNING"]})
    error = run(supervisor, ["etcd", "kcm"], timeout=5)[2]
    assert "program kcm still STARTING after 5 s" in error
    assert "etcd" not in error


def test_an_unknown_program_fails_at_once():
    supervisor = FakeSupervisor({"ghost": ["NO SUCH PROCESS"]})
    assert "not in supervisord's configuration" in run(supervisor, ["ghost"])[2]


def test_check_mode_reports_what_would_start_and_starts_nothing():
    supervisor = FakeSupervisor({"a": ["STOPPED"], "b": ["RUNNING"]})
    started, dummy, error = run(supervisor, ["a", "b"], check_mode=True)
    assert (started, error, supervisor.starts) == (["a"], None, [])
