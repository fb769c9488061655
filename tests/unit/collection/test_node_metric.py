"""The node_metric module: validation, atomic writes, idempotence and check mode."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

MODULE = (pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel" / "tas"
          / "plugins" / "modules" / "node_metric.py")


def run_module(args: dict, check_mode: bool = False) -> dict:
    """Run the module as Ansible does: a process reading its arguments as JSON."""
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode, "_ansible_diff": True}}
    result = subprocess.run([sys.executable, str(MODULE)], input=json.dumps(payload), capture_output=True, text=True)
    return json.loads(result.stdout)


def test_writes_the_metric_then_reports_no_change(tmp_path):
    first = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 2}})
    assert first["changed"] is True and first["changed_metrics"] == ["node_health_metric"]
    assert (tmp_path / "text.prom").read_text() == "node_health_metric 2\n"
    second = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 2}})
    assert second["changed"] is False


def test_other_lines_are_kept_and_only_the_named_metric_changes(tmp_path):
    (tmp_path / "text.prom").write_text("# HELP other_metric x\nother_metric{a=\"b\"} 5\nnode_health_metric 0\n")
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 1}})
    assert result["changed"] is True
    assert (tmp_path / "text.prom").read_text() == "# HELP other_metric x\nother_metric{a=\"b\"} 5\nnode_health_metric 1\n"


def test_overwrite_false_keeps_a_value_set_earlier(tmp_path):
    (tmp_path / "text.prom").write_text("node_health_metric 2\n")
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 0}, "overwrite": False})
    assert result["changed"] is False and (tmp_path / "text.prom").read_text() == "node_health_metric 2\n"


def test_check_mode_reports_the_change_without_writing(tmp_path):
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 1}}, check_mode=True)
    assert result["changed"] is True and "node_health_metric 1" in result["diff"]["after"]
    assert not (tmp_path / "text.prom").exists()


def test_absent_removes_the_metric(tmp_path):
    (tmp_path / "text.prom").write_text("node_health_metric 1\nkeep 1\n")
    result = run_module({"path": str(tmp_path), "metrics": {"node_health_metric": 0}, "state": "absent"})
    assert result["changed"] is True and (tmp_path / "text.prom").read_text() == "keep 1\n"


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
    ],
)
def test_bad_input_fails_naming_the_problem(tmp_path, args, message):
    result = run_module({"path": str(tmp_path), **args})
    assert result.get("failed") is True and message in result["msg"]
    assert not (tmp_path / "text.prom").exists()


def test_a_missing_directory_fails(tmp_path):
    result = run_module({"path": str(tmp_path / "nope"), "metrics": {"m": 1}})
    assert result.get("failed") is True and "does not exist" in result["msg"]
