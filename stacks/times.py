"""RFC 3339 timestamps, one function per format the project writes, and one reader for all of them.

    rfc3339_seconds   2024-05-01T12:00:00Z         kstatus conditions, run and claim times, Events
    rfc3339_micro     2024-05-01T12:00:00.000123Z  a Lease's MicroTime, the registry's fact versions
"""
from __future__ import annotations

from datetime import datetime, timezone


def _utc(moment: datetime) -> datetime:
    """A naive datetime is UTC (SQLite hands them back so); an aware one is converted."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def rfc3339_seconds(moment: float | datetime) -> str:
    """`moment` (epoch seconds, or a datetime) to the second: 2024-05-01T12:00:00Z."""
    when = datetime.fromtimestamp(moment, timezone.utc) if isinstance(moment, (int, float)) else _utc(moment)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime) -> str:
    """`moment` to the microsecond: 2024-05-01T12:00:00.000123Z (Kubernetes' MicroTime)."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: str | None) -> datetime | None:
    """A timestamp in any of the formats above (an offset or none: UTC) as an aware datetime; None when absent or
    unreadable."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return _utc(parsed)


def parse_seconds(value: str | None) -> float | None:
    """`parse_rfc3339` as epoch seconds."""
    parsed = parse_rfc3339(value)
    return None if parsed is None else parsed.timestamp()
