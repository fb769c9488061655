"""Go duration strings (`500ms`, `3m`, `1h30m`), the one parser for flags and policy files alike."""

from __future__ import annotations

import re

# Go's time.ParseDuration units, in seconds.
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds from a Go duration: a sign, then number-unit pairs; `0` alone needs no unit.

    Negative durations parse (as in Go); callers that need a positive one say so.
    """
    if not isinstance(text, str):
        raise ValueError(f"must be a duration string such as 3m, got {text!r}")
    body, sign = text, 1.0
    if body[:1] in ("+", "-"):
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if not match:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(body):
        raise ValueError(f"{text!r} is not a duration such as 500ms, 30s, 3m or 1h30m")
    return sign * total
