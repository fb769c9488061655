"""crane's node-annotation format: key = metric, value = "<usage fraction>,<time>", e.g. `0.90000,2026-01-02T15:04:05Z`.

Written as crane's annotator writes it (pkg/controller/prometheus: the percent / 100, five
decimals; pkg/utils: layout 2006-01-02T15:04:05Z) and read as crane's scheduler reads it
(pkg/plugins/dynamic/stats.go), except that the Z here means UTC: crane writes and reads its
local time (TZ, Asia/Shanghai in its manifests) behind a literal Z.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from tas_extender.decide.load.policy import LoadPolicy

# An annotation stays usable this long after its sync period (crane's ExtraActivePeriod).
VALIDITY_GRACE = 300.0
# crane's annotator also writes the node's hot value; it is valid for 5 minutes.
HOT_VALUE_KEY = "node_hot_value"
HOT_VALUE_VALIDITY = 300.0
# Go's ParseFloat in decimal form; Python's float() would also take "1_0" and spaces.
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")
# crane's layout, which Go also reads with fractional seconds after the seconds.
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?Z$")


def format_value(fraction: float, now: datetime) -> str:
    """A usage fraction and the time it was read: `0.42500,2026-11-22T10:00:00Z` (UTC)."""
    if not math.isfinite(fraction) or fraction < 0:
        raise ValueError(f"usage {fraction!r} is not a finite number >= 0")
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    return f"{fraction:.5f},{now.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def format_hot_value(points: int, now: datetime) -> str:
    """The hot value annotation crane's scheduler reads: `2,2026-11-22T10:00:00Z`."""
    return f"{points},{now.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def parse_value(text: str) -> tuple[float, datetime]:
    """The usage fraction and the UTC time of an annotation; ValueError says what crane would refuse."""
    value, seconds = _read(text)
    return value, datetime.fromtimestamp(seconds, UTC)


def _read(text: str) -> tuple[float, float]:
    """The usage fraction and the time in epoch seconds: the request path's parser."""
    if not isinstance(text, str):
        raise ValueError(f"annotation is not a string: {text!r}")
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not of the form <value>,<timestamp>")
    number, stamp = parts
    if not _NUMBER.match(number):
        raise ValueError(f"value {number!r} is not a number")
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"value {number!r} is not finite")
    if value < 0:
        raise ValueError(f"value {value} is negative")
    return value, _stamp_seconds(stamp)


# One annotator sync writes the same time on every node: parsing each distinct time once keeps a
# request over thousands of nodes from parsing the same string thousands of times.
@functools.lru_cache(maxsize=4096)
def _stamp_seconds(stamp: str) -> float:
    match = _STAMP.match(stamp)
    if not match:
        raise ValueError(f"timestamp {stamp!r} is not of the form 2026-11-22T10:00:00Z")
    clock, fraction = match.groups()
    try:  # the regex fixed the form; fromisoformat checks the date
        taken = datetime.fromisoformat(clock).replace(tzinfo=UTC).timestamp()
    except ValueError as error:
        raise ValueError(f"timestamp {stamp!r}: {error}") from None
    return taken + int(fraction[:6].ljust(6, "0")) / 1e6 if fraction else taken


def parse_timestamp(stamp: str) -> float:
    """Epoch seconds of a time in crane's layout, `2026-11-22T10:00:00Z` (Z as UTC)."""
    return _stamp_seconds(stamp)


def fresh(taken: float, validity: float, now: float) -> bool:
    """crane's inActivePeriod (now before taken + validity), and not more than 5 minutes ahead.

    Times in epoch seconds. The second condition is ours: a stamp hours ahead (crane's local
    time behind a literal Z, east of UTC) would otherwise keep a value alive for hours.
    """
    return taken - now <= VALIDITY_GRACE and now < taken + validity


def fresh_values(annotations: Mapping[str, str], policy: LoadPolicy, now: datetime | float) -> dict[str, float]:
    """Metric -> usage fraction for every synced metric with a valid, fresh annotation; the rest is missing."""
    moment = now.timestamp() if isinstance(now, datetime) else now
    values: dict[str, float] = {}
    for metric, period in policy.sync.items():
        text = annotations.get(metric)
        if text is None:
            continue
        try:
            usage, taken = _read(text)
        except ValueError:
            continue
        if fresh(taken, period + VALIDITY_GRACE, moment):
            values[metric] = usage
    return values


def annotation_keys(policy: LoadPolicy) -> tuple[str, ...]:
    """The annotation keys this mode writes, so they can be removed when it is turned off."""
    return (*sorted(policy.sync), HOT_VALUE_KEY)
