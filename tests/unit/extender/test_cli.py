"""The command line: evaluate's JSON document, crd, and flag checks."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from tas_extender.cli import duration, parser
from tas_extender.cli.serve import MAX_CONNECTIONS, ServeSettings, server_settings
from tas_extender.decide.duration import parse_duration

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tas_extender.cli", *args], capture_output=True, text=True)


def test_evaluate_prints_the_decision_document():
    result = run("evaluate", "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
                 "--metrics-file", str(FIXTURES / "health.prom"))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    decision = doc["policies"]["health-metric-demo/demo-policy"]
    assert set(decision) == {"filter", "scores", "violating", "labels"}
    assert decision["filter"]["node-1"] == {"passed": True, "reason": ""}
    assert decision["filter"]["node-2"]["passed"] is False
    assert decision["scores"] == {"node-1": 10, "node-2": 5, "node-3": 0}
    assert decision["violating"] == ["node-3"]
    assert decision["labels"] == {"node-3": {"demo-policy": "violating"}}


def test_evaluate_labels_of_the_four_strategy_policy(tmp_path):
    metrics = tmp_path / "m.prom"
    metrics.write_text('node_metric{node="a"} 150\nnode_metric{node="b"} -1\nnode_metric{node="c"} 50\n')
    result = run("evaluate", "--policy-file", str(FIXTURES / "policies" / "scheduling-policy.yaml"),
                 "--metrics-file", str(metrics))
    decision = json.loads(result.stdout)["policies"]["default/scheduling-policy"]
    assert decision["labels"] == {
        "a": {"telemetry.aware.scheduling.scheduling-policy/label1": "foo",
              "telemetry.aware.scheduling.scheduling-policy/label2": "bar"},
        "b": {"scheduling-policy": "violating"},
    }
    assert [n for n, f in decision["filter"].items() if not f["passed"]] == ["b"]


def test_evaluate_refuses_an_invalid_policy_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: TASPolicy\nmetadata: {name: x}\nspec: {strategies: {dontschedule: {rules: [\n"
                   "  {metricname: health_metric, operator: Above}]}}}\n")
    result = run("evaluate", "--policy-file", str(bad), "--metrics-file", str(FIXTURES / "health.prom"))
    assert result.returncode == 1
    assert "spec.strategies.dontschedule.rules[0].operator" in result.stderr


def test_crd_prints_a_custom_resource_definition():
    result = run("crd")
    assert yaml.safe_load(result.stdout)["kind"] == "CustomResourceDefinition"


def test_serve_without_certificates_refuses_to_start():
    result = run("serve", "--policy-file", str(FIXTURES / "policies" / "demo-policy.yaml"),
                 "--metrics-file", str(FIXTURES / "health.prom"))
    assert result.returncode == 2
    assert "--cert, --key and --cacert are required" in result.stderr


# One Go-duration parser serves the flags and the load policy's periods (Go's time.ParseDuration).
GO_DURATIONS = [("30s", 30), ("3m", 180), ("1h", 3600), ("1h30m", 5400), ("1.5h", 5400), ("300ms", 0.3),
                ("2h45m30s", 9930), (".5s", 0.5), ("1.s", 1), ("1500us", 0.0015), ("0", 0), ("-1m", -60),
                ("+5s", 5)]


@pytest.mark.parametrize(("text", "seconds"), GO_DURATIONS)
def test_go_durations_parse_to_seconds(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1d", "5x", "m", "1m 30s", " 5s", "--1s", ".s", 180])
def test_what_go_refuses_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5), ("1m30s", 90), ("500ms", 0.5), ("2", 2), ("1h", 3600),
                                               (" 5s ", 5)])
def test_flag_durations_accept_go_style_and_plain_seconds(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-1", "0", "5x", "0s", "-1m", "inf", "nan"])
def test_bad_flag_durations_are_refused(text):
    import argparse
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


SERVE = ["serve", "--unsafe"]


@pytest.mark.parametrize(("flags", "header", "body", "connections"), [
    ([], 10.0, 10.0, MAX_CONNECTIONS),
    (["--header-timeout", "3s", "--body-timeout", "500ms", "--max-connections", "20"], 3.0, 0.5, 20),
])
def test_slow_client_deadlines_and_the_connection_cap_reach_uvicorn(flags, header, body, connections):
    settings = ServeSettings.from_args(parser().parse_args([*SERVE, *flags]))
    options = server_settings(settings, settings.port, settings.max_connections)
    assert (options["http"].header_timeout, options["http"].body_timeout) == (header, body)
    assert options["limit_concurrency"] == connections
    assert options["timeout_keep_alive"] > header  # a kept-alive connection outlives the head's deadline


def test_every_serve_flag_is_a_setting_and_every_setting_a_flag():
    """ServeSettings takes each field from the parsed flag of the same `dest`: a flag without a
    field would be parsed and then ignored."""
    import dataclasses

    flags = set(vars(parser().parse_args(["serve"]))) - {"command", "run"}
    assert flags == {field.name for field in dataclasses.fields(ServeSettings)}


@pytest.mark.parametrize("flags", [["--max-connections", "0"], ["--max-connections", "many"],
                                   ["--header-timeout", "0s"], ["--body-timeout", "-1"],
                                   ["--descheduler-cron-job", "tas-descheduler"],
                                   ["--descheduler-cron-job", "kube-system/"],
                                   ["--descheduler-cron-job", "a/b/c"]])
def test_bad_deadlines_and_caps_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        parser().parse_args([*SERVE, *flags])
    assert flags[0] in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "cron_job"), [([], ""), (["--descheduler-cron-job", "kube-system/tas-descheduler"],
                                                             "kube-system/tas-descheduler")])
def test_the_descheduler_runs_on_violation_only_when_its_cron_job_is_named(flags, cron_job):
    assert ServeSettings.from_args(parser().parse_args([*SERVE, *flags])).descheduler_cron_job == cron_job


def test_the_collection_ships_exactly_the_crd_the_model_generates():
    shipped = (pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel"
               / "tas" / "roles" / "extender" / "files" / "taspolicy-crd.yaml").read_text()
    assert shipped.split("\n", 1)[1] == run("crd").stdout, "regenerate it: tas-extender crd"


ROLES = pathlib.Path(__file__).resolve().parents[3] / "collections" / "ansible_collections" / "intel" / "tas" / "roles"


@pytest.mark.parametrize("command", ["serve", "renew-certificates"])
def test_every_long_running_subcommand_takes_the_same_log_levels(command):
    from tas_extender.cli.common import LOG_LEVELS

    assert [parser().parse_args([command, "--log-level", level]).log_level for level in LOG_LEVELS] == LOG_LEVELS
    with pytest.raises(SystemExit):
        parser().parse_args([command, "--log-level", "trace"])


def test_the_collection_offers_the_log_levels_the_command_line_takes():
    from tas_extender.cli.common import LOG_LEVELS

    offered = {name: spec["choices"] for path in ROLES.glob("*/meta/argument_specs.yml")
               for name, spec in yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"].items()
               if name.endswith("_log_level")}
    assert offered, "no role has a log level"
    assert all(choices == LOG_LEVELS for choices in offered.values()), offered
