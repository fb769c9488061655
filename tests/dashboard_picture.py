"""The collection's Grafana dashboard drawn as an SVG from a Prometheus's answers to its panels.

Grafana cannot be built on the machines the tests run on, so the tests draw what it would show:
each panel in its place on the dashboard's grid, with its title, a line per series for a
timeseries panel and the last value per series for a stat panel. `tests/incluster` draws it from
the real-node cluster's Prometheus after the demo (build/dashboard.svg); docs/ keeps one.

    python tests/dashboard_picture.py PROMETHEUS_URL OUT.svg    draw the last 15 minutes
"""

from __future__ import annotations

import html
import json
import pathlib
import sys
import time

DASHBOARD = (pathlib.Path(__file__).resolve().parent.parent
             / "collections/ansible_collections/intel/tas/dashboards/tas-extender.json")
UNIT, GAP, TITLE = 40, 8, 22  # pixels per grid unit (24 across), between panels, a title's height
COLOURS = ("#5794f2", "#73bf69", "#f2cc0c", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#96d98d")

Series = tuple[str, list[tuple[float, float]]]  # legend, (time, value) samples


def legend(template: str, labels: dict[str, str]) -> str:
    text = template or ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def panel_series(panel: dict, query_range) -> list[Series]:
    """Each target's series, by `query_range(expr)` (Prometheus's matrix result)."""
    found = []
    for target in panel["targets"]:
        for result in query_range(target["expr"]):
            samples = [(float(t), float(v)) for t, v in result["values"] if v not in ("NaN", "+Inf", "-Inf")]
            found.append((legend(target.get("legendFormat", ""), result["metric"]), samples))
    return found


def _number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _timeseries(series: list[Series], x: float, y: float, w: float, h: float) -> list[str]:
    points = [p for _, samples in series for p in samples]
    if not points:
        return [f'<text x="{x + w / 2}" y="{y + h / 2}" text-anchor="middle" fill="#888">no data</text>']
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    v0, v1 = min(0.0, min(v for _, v in points)), max(v for _, v in points)
    t1, v1 = (t1 if t1 > t0 else t0 + 1), (v1 if v1 > v0 else v0 + 1)
    columns = 3  # legend entries side by side, as many rows as needed
    plot_h = h - 16 * -(-len(series) // columns)
    out = [f'<text x="{x}" y="{y + 10}" font-size="10" fill="#888">{_number(v1)}</text>',
           f'<text x="{x}" y="{y + plot_h - 3}" font-size="10" fill="#888">{_number(v0)}</text>',
           f'<line x1="{x}" y1="{y + plot_h}" x2="{x + w}" y2="{y + plot_h}" stroke="#444"/>']
    for index, (name, samples) in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{x + (t - t0) / (t1 - t0) * w:.1f},{y + plot_h - (v - v0) / (v1 - v0) * plot_h:.1f}"
                        for t, v in samples)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        row, column = divmod(index, columns)
        out.append(f'<text x="{x + column * w / columns:.1f}" y="{y + plot_h + 14 + 16 * row}" font-size="11" '
                   f'fill="{colour}">{html.escape(name)}</text>')
    return out


def _stat(series: list[Series], x: float, y: float, w: float, h: float) -> list[str]:
    shown = [(name, samples[-1][1]) for name, samples in series if samples][:4]
    if not shown:
        return [f'<text x="{x + w / 2}" y="{y + h / 2}" text-anchor="middle" fill="#888">no data</text>']
    out, cell = [], w / len(shown)
    for index, (name, value) in enumerate(shown):
        centre = x + cell * (index + 0.5)
        out.append(f'<text x="{centre:.1f}" y="{y + h / 2}" text-anchor="middle" font-size="28" '
                   f'fill="{COLOURS[index % len(COLOURS)]}">{_number(value)}</text>')
        out.append(f'<text x="{centre:.1f}" y="{y + h / 2 + 20}" text-anchor="middle" font-size="11" '
                   f'fill="#ccc">{html.escape(name)}</text>')
    return out


def render(dashboard: dict, query_range, span: str = "the last 15 minutes") -> str:
    """The dashboard as an SVG document; `query_range(expr)` answers each panel's query over `span`."""
    panels = dashboard["panels"]
    width = 24 * UNIT
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * UNIT
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + TITLE + GAP}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="#111217"/>',
           f'<text x="{GAP}" y="{TITLE - 4}" font-size="16" fill="#eee">{html.escape(dashboard["title"])}</text>',
           f'<text x="{width - GAP}" y="{TITLE - 4}" text-anchor="end" fill="#888">{html.escape(span)}</text>']
    for panel in panels:
        grid = panel["gridPos"]
        x, y = grid["x"] * UNIT + GAP, grid["y"] * UNIT + TITLE + GAP
        w, h = grid["w"] * UNIT - 2 * GAP, grid["h"] * UNIT - 2 * GAP
        out.append(f'<g class="panel" data-title="{html.escape(panel["title"])}">')
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="#181b1f" stroke="#2c3235"/>')
        out.append(f'<text x="{x + 8}" y="{y + 18}" fill="#ccc">{html.escape(panel["title"])}</text>')
        draw = _stat if panel["type"] == "stat" else _timeseries
        out += draw(panel_series(panel, query_range), x + 8, y + 28, w - 16, h - 36)
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def prometheus_range(url: str, minutes: int = 15, step: str = "15s"):
    import httpx

    end = time.time()

    def query_range(expr: str) -> list[dict]:
        answer = httpx.get(f"{url}/api/v1/query_range", timeout=10,
                           params={"query": expr, "start": end - minutes * 60, "end": end, "step": step}).json()
        return answer["data"]["result"] if answer.get("status") == "success" else []

    return query_range


def main(argv: list[str]) -> int:
    url, out = argv
    pathlib.Path(out).write_text(render(json.loads(DASHBOARD.read_text()), prometheus_range(url)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
