"""The node-annotation format crane's node-annotator writes: key = metric, value = "<percent>,<RFC3339>"."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from tas_extender.load.policy import LoadPolicy

# An annotation stays usable this long after its sync period, as in crane.
VALIDITY_GRACE = 300.0
# RFC 3339 with seconds and an explicit offset; a naive timestamp cannot be aged safely.
_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")


def annotation_keys(policy: LoadPolicy) -> tuple[str, ...]:
    """The annotation keys this mode writes, so they can be removed when it is turned off."""
    return tuple(sorted(policy.sync))


def format_value(value: float, now: datetime) -> str:
    """A usage percent and the time it was read, e.g. `42.5,2026-11-22T10:00:00Z` (always UTC, real Z)."""
    if not math.isfinite(value):
        raise ValueError(f"usage {value!r} is not a finite number")
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    number = f"{value:.5f}".rstrip("0").rstrip(".")
    if number in ("-0", ""):
        number = "0"
    stamp = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{number},{stamp}"


def parse_value(text: str) -> tuple[float, datetime]:
    """The usage percent (0..100) and the aware timestamp of an annotation; ValueError says what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"annotation is not a string: {text!r}")
    number, comma, stamp = text.partition(",")
    if not comma:
        raise ValueError(f"{text!r} is not of the form <value>,<timestamp>")
    try:
        value = float(number.strip())
    except ValueError:
        raise ValueError(f"value {number!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"value {number!r} is not finite")
    if not 0 <= value <= 100:
        raise ValueError(f"value {value} is outside 0..100 percent")
    return value, _parse_timestamp(stamp.strip())


def _parse_timestamp(stamp: str) -> datetime:
    match = _RFC3339.match(stamp)
    if not match:
        raise ValueError(f"timestamp {stamp!r} is not RFC 3339 with a zone (such as 2026-11-22T10:00:00Z)")
    date, clock, fraction, zone = match.groups()
    micro = (fraction or "")[:6].ljust(6, "0")
    zone = "+00:00" if zone in ("Z", "z") else zone
    try:
        return datetime.fromisoformat(f"{date}T{clock}.{micro}{zone}")
    except ValueError as error:
        raise ValueError(f"timestamp {stamp!r}: {error}") from None


def fresh_values(annotations: dict[str, str], policy: LoadPolicy, now: datetime) -> dict[str, float]:
    """Metric -> usage fraction for every synced metric with a valid, fresh annotation; the rest is missing.

    Fresh means read no longer than its sync period + 300 s ago, and no more than 300 s in the
    future: a clock far ahead (such as crane's local time written with a literal Z) would
    otherwise keep a value alive for hours.
    """
    values: dict[str, float] = {}
    for metric, period in policy.sync.items():
        text = annotations.get(metric)
        if text is None:
            continue
        try:
            percent, taken = parse_value(text)
        except ValueError:
            continue
        age = (now - taken).total_seconds()
        if -VALIDITY_GRACE <= age <= period + VALIDITY_GRACE:
            values[metric] = percent / 100.0
    return values
