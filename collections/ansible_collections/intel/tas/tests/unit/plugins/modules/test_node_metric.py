"""intel.tas.node_metric: rendering, validation, atomic writes, file attributes, check mode."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.intel.tas.plugins.modules import node_metric

MODULE = node_metric.__file__


def run_module(args, check_mode=False):
    """Run the module as Ansible does: a process reading its arguments as JSON."""
    payload = dict(ANSIBLE_MODULE_ARGS=dict(args, _ansible_check_mode=check_mode, _ansible_diff=True))
    result = subprocess.run([sys.executable, MODULE], input=json.dumps(payload),
                            capture_output=True, text=True, check=False)
    return json.loads(result.stdout)


def mode_of(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


@pytest.mark.parametrize(
    ("existing", "metrics", "state", "overwrite", "content", "changed"),
    [
        pytest.param("", {"m": 1.0}, "present", True, "m 1\n", ["m"], id="an empty file gets the metric"),
        pytest.param("m 1\n", {"m": 1.0}, "present", True, "m 1\n", [], id="an equal value changes nothing"),
        pytest.param("m 1\n", {"m": 2.5}, "present", True, "m 2.5\n", ["m"], id="a new value replaces the line"),
        pytest.param("m 2\n", {"m": 0.0}, "present", False, "m 2\n", [], id="overwrite false keeps a value"),
        pytest.param("", {"m": 0.0}, "present", False, "m 0\n", ["m"], id="overwrite false still adds a missing metric"),
        pytest.param("# HELP m x\nm 1\nk 3\n", {"m": 0.0}, "absent", True, "k 3\n", ["m"],
                     id="absent removes the metric and its comments"),
        pytest.param('o{a="b"} 5\n', {"m": 1.0}, "present", True, 'o{a="b"} 5\nm 1\n', ["m"],
                     id="lines of other metrics are kept"),
    ],
)
def test_render(existing, metrics, state, overwrite, content, changed):
    assert node_metric.render(existing, metrics, state, overwrite) == (content, changed)


def test_writes_the_metric_readable_by_node_exporter_then_reports_no_change(tmp_path):
    first = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 2}})
    assert first["changed"] is True and first["changed_metrics"] == ["node_health_metric"]
    assert (tmp_path / "text.prom").read_text() == "node_health_metric 2\n"
    assert mode_of(tmp_path / "text.prom") == 0o644
    second = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 2}})
    assert second["changed"] is False


def test_other_lines_are_kept_and_only_the_named_metric_changes(tmp_path):
    (tmp_path / "text.prom").write_text("# HELP other_metric x\nother_metric{a=\"b\"} 5\nnode_health_metric 0\n")
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 1}})
    assert result["changed"] is True
    assert (tmp_path / "text.prom").read_text() == "# HELP other_metric x\nother_metric{a=\"b\"} 5\nnode_health_metric 1\n"


def test_a_wrong_mode_alone_is_corrected_and_reported(tmp_path):
    (tmp_path / "text.prom").write_text("node_health_metric 1\n")
    os.chmod(str(tmp_path / "text.prom"), 0o600)
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 1}})
    assert result["changed"] is True and result["changed_metrics"] == []
    assert mode_of(tmp_path / "text.prom") == 0o644


@pytest.mark.parametrize("mode", ["0640", "u=rw,g=r,o="])
def test_the_mode_given_octal_or_symbolic_is_applied(tmp_path, mode):
    result = run_module({"path": str(tmp_path), "metrics": {"m": 1}, "mode": mode})
    assert result["changed"] is True and mode_of(tmp_path / "text.prom") == 0o640


def test_check_mode_reports_the_change_without_writing(tmp_path):
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 1}}, check_mode=True)
    assert result["changed"] is True and "node_health_metric 1" in result["diff"][0]["after"]
    assert not (tmp_path / "text.prom").exists()


def test_check_mode_reports_a_mode_change_without_making_it(tmp_path):
    (tmp_path / "text.prom").write_text("m 1\n")
    os.chmod(str(tmp_path / "text.prom"), 0o600)
    result = run_module({"path": str(tmp_path), "metrics": {"m": 1}}, check_mode=True)
    assert result["changed"] is True and mode_of(tmp_path / "text.prom") == 0o600


def test_no_temporary_file_is_left_behind(tmp_path):
    run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 3.5}})
    assert [p.name for p in tmp_path.iterdir()] == ["text.prom"]
    assert (tmp_path / "text.prom").read_text() == "node_health_metric 3.5\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"metrics": {"bad-name": 1}}, "not a valid Prometheus metric name"),
        ({"metrics": {"node_health_metric": "high"}}, "must be a number"),
        ({"metrics": {"node_health_metric": "nan"}}, "finite number"),
        ({"metrics": {}}, "at least one metric"),
        ({"metrics": {"m": 1}, "file": "metrics.txt"}, "ending in .prom"),
        ({"metrics": {"m": 1}, "mode": "rw-everything"}, "mode must be in octal or symbolic form"),
    ],
)
def test_bad_input_fails_naming_the_problem(tmp_path, args, message):
    result = run_module(dict({"path": str(tmp_path)}, **args))
    assert result.get("failed") is True and message in result["msg"]
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_mode_leaves_the_live_file_as_it_was(tmp_path):
    (tmp_path / "text.prom").write_text("m 1\n")
    result = run_module({"path": str(tmp_path), "metrics": {"m": 2}, "mode": "rw-everything"})
    assert result.get("failed") is True and "mode must be in octal or symbolic form" in result["msg"]
    assert [p.name for p in tmp_path.iterdir()] == ["text.prom"]
    assert (tmp_path / "text.prom").read_text() == "m 1\n"


def test_a_missing_directory_fails(tmp_path):
    result = run_module({"path": str(tmp_path / "nope"), "metrics": {"m": 1}})
    assert result.get("failed") is True and "does not exist" in result["msg"]
