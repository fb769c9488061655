"""The real-node scenario's before/after comparison of the host (tests/realnode/host_state.py).

The comparison must still find what a run leaves behind or takes away, and must accept one thing
only: this run's uninstall removing the CA an earlier, cut-off run left in the automation host's
/etc/tas/pki (the managed phase keeps it there).
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

PATH = pathlib.Path(__file__).resolve().parents[2] / "realnode" / "host_state.py"
_spec = importlib.util.spec_from_file_location("host_state", PATH)
host_state = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_state)


def state(directories: list[str], tas_files: list[str] | None, **other: object) -> dict[str, object]:
    return {"host directories": directories, "collection files on this machine": tas_files, **other}


def test_the_same_host_has_no_difference():
    before = state(["/etc/kubernetes"], None, mounts=["/"])
    assert host_state.compare(before, dict(before)) == []


def test_a_directory_left_behind_is_found():
    assert host_state.compare(state([], None), state(["/etc/tas"], ["pki", "pki/ca.crt"])) == [
        "host directories: left behind '/etc/tas'",
        "collection files on this machine: was None, now ['pki', 'pki/ca.crt']",
    ]


def test_an_earlier_runs_ca_removed_by_this_runs_uninstall_is_accepted():
    before = state(["/etc/kubernetes", "/etc/tas"], ["pki", "pki/ca.crt", "pki/ca.key"])
    assert host_state.compare(before, state(["/etc/kubernetes"], None)) == []


@pytest.mark.parametrize("files", [["pki", "notes.txt"], ["other"]])
def test_anything_else_of_the_users_in_etc_tas_must_not_go(files):
    problems = host_state.compare(state(["/etc/tas"], files), state([], None))
    assert "host directories: gone '/etc/tas'" in problems


def test_an_earlier_runs_ca_still_there_afterwards_is_no_difference():
    files = ["pki", "pki/ca.crt"]
    assert host_state.compare(state(["/etc/tas"], files), state(["/etc/tas"], files)) == []


def test_another_directory_gone_is_still_found_when_the_ca_went_too():
    before = state(["/etc/kubernetes", "/etc/tas"], ["pki"])
    assert host_state.compare(before, state([], None)) == ["host directories: gone '/etc/kubernetes'"]


def test_the_collection_files_are_read_from_the_directory(tmp_path):
    assert host_state._collection_files(str(tmp_path / "missing")) is None
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_text("x")
    assert host_state._collection_files(str(tmp_path)) == ["pki", "pki/ca.crt"]
