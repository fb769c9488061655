"""The dashboard's picture (tests/dashboard_picture.py): every panel in its place, each series of
Prometheus's answer drawn, the last value of a stat panel shown, an empty panel said to be so."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from dashboard_picture import DASHBOARD, UNIT, render

SVG = "{http://www.w3.org/2000/svg}"
DASH = json.loads(DASHBOARD.read_text())


def matrix(*series: tuple[dict[str, str], list[float]]) -> list[dict]:
    return [{"metric": labels, "values": [[1000 + 15 * i, str(v)] for i, v in enumerate(values)]}
            for labels, values in series]


def answers(expr: str) -> list[dict]:
    if "tas_extender_decisions_total" in expr:
        return matrix(({"verb": "filter", "result": "passed"}, [1, 2, 3]),
                      ({"verb": "filter", "result": "failed"}, [0, 1, 1, 2]))
    if "tas_extender_policies" in expr:
        return matrix(({"state": "valid"}, [1, 2]), ({"state": "invalid"}, [0, 0]))
    return []


@pytest.fixture(scope="module")
def panels() -> dict[str, ET.Element]:
    root = ET.fromstring(render(DASH, answers))
    assert root.tag == f"{SVG}svg"
    return {g.get("data-title"): g for g in root.iter(f"{SVG}g")}


def test_every_panel_is_drawn_in_its_place(panels):
    assert list(panels) == [p["title"] for p in DASH["panels"]]
    for panel in DASH["panels"]:
        box = panels[panel["title"]].find(f"{SVG}rect")
        assert float(box.get("x")) >= panel["gridPos"]["x"] * UNIT
        assert float(box.get("width")) < panel["gridPos"]["w"] * UNIT


def test_a_timeseries_panel_draws_a_line_per_series_through_each_sample(panels):
    lines = panels["Decisions per second"].findall(f"{SVG}polyline")
    assert [len(line.get("points").split()) for line in lines] == [3, 4]
    texts = [t.text for t in panels["Decisions per second"].iter(f"{SVG}text")]
    assert "filter passed" in texts and "filter failed" in texts


def test_a_stat_panel_shows_each_series_last_value(panels):
    texts = [t.text for t in panels["Policies"].iter(f"{SVG}text")]
    assert texts[1:] == ["2", "valid", "0", "invalid"]


def test_a_panel_without_data_says_so(panels):
    assert "no data" in [t.text for t in panels["Answer time, 99th percentile"].iter(f"{SVG}text")]
