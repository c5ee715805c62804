"""Timing rules of recurring jobs: cron expressions and anchored intervals.

Pure functions over aware datetimes (no Django, no clock reads), so the rules
are testable on their own and the same everywhere they are applied.

Cron expressions are the five standard fields (or croniter's ``@hourly``,
``@daily``... aliases) evaluated in a named time zone. Around daylight-saving
changes they follow Vixie cron:

- clocks go forward: a time inside the skipped hour runs at the first instant
  after the gap (``30 2 * * *`` runs at 03:00 that night);
- clocks go back: a wall-clock time that happens twice runs once, at its
  first occurrence, unless the hour field is a wildcard (``0 * * * *`` keeps
  running every real hour, both 02:00s included).

``every`` intervals are anchored: run ``n`` is due at ``anchor + n * interval``
whatever the firing latency, so the cadence never drifts.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from .clock import as_seconds
from .exceptions import InvalidCron

__all__ = [
    "MIN_EVERY_SECONDS",
    "next_cron_time",
    "next_every_time",
    "validate_cron",
    "validate_interval",
    "zone",
]

MIN_EVERY_SECONDS = 5.0
_ALIASES = {
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
}
# The five fields and their allowed values (day of week: 0 and 7 are Sunday).
FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
# One value of a field part: a number, possibly with croniter's L or #n.
_NUMBER = re.compile(r"(\d+)(?:L|#\d+)?", re.IGNORECASE)
# Longest a valid expression can go without a run: Feb 29 on a given weekday
# recurs within 28 years; croniter gives up earlier on impossible dates.
_MAX_SKIPS = 8


def zone(name: str) -> ZoneInfo:
    """Return the time zone ``name`` or raise ``actor/invalid_cron``."""
    if not isinstance(name, str) or not name:
        raise InvalidCron("A time zone is a non-empty IANA name such as 'UTC'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidCron(f"Unknown time zone {name!r}", metadata={"tz": name}) from exc


def validate_cron(expression: str, tz: str, now: datetime) -> datetime:
    """Check a cron expression and zone; return the first run after ``now``.

    Raises ``actor/invalid_cron`` for a malformed expression, an unknown zone,
    six-field (seconds) expressions, and expressions that never match.
    """
    if not isinstance(expression, str):
        raise InvalidCron("A cron expression is a string")
    expression = " ".join(expression.split())
    fields = expression.split(" ")
    if not ((len(fields) == 1 and fields[0].lower() in _ALIASES) or len(fields) == 5):
        raise InvalidCron(
            f"Invalid cron expression {expression!r}: use five fields "
            "(minute hour day-of-month month day-of-week) or @hourly, @daily...",
            metadata={"expression": expression},
        )
    if len(fields) == 5:
        _check_fields(expression, fields)
    if not croniter.is_valid(expression):
        raise InvalidCron(
            f"Invalid cron expression {expression!r}: a field is not valid cron "
            "syntax (minute hour day-of-month month day-of-week: numbers, "
            "ranges a-b, lists a,b, steps */n, names jan-dec and sun-sat)",
            metadata={"expression": expression},
        )
    zone(tz)
    return next_cron_time(expression, tz, now)


def _check_fields(expression: str, fields: list[str]) -> None:
    """Name the first field whose number or step is out of its range."""
    for text, (name, low, high) in zip(fields, FIELDS, strict=True):
        for part in text.split(","):
            base, _, step = part.partition("/")
            if step.isdigit() and int(step) == 0:
                raise InvalidCron(
                    f"Invalid cron expression {expression!r}: {name} step 0 "
                    "(a step is at least 1)",
                    metadata={"expression": expression, "field": name, "step": 0},
                )
            for token in base.split("-"):
                number = _NUMBER.fullmatch(token)
                if number is None:
                    continue  # *, ?, names (jan, mon), L: croniter decides
                value = int(number.group(1))
                if not low <= value <= high:
                    raise InvalidCron(
                        f"Invalid cron expression {expression!r}: {name} {value} "
                        f"out of range {low}-{high}",
                        metadata={
                            "expression": expression,
                            "field": name,
                            "value": value,
                            "min": low,
                            "max": high,
                        },
                    )


def _hour_is_wildcard(expression: str) -> bool:
    fields = expression.split()
    if len(fields) == 1:
        return fields[0].lower() == "@hourly"
    return fields[1].startswith("*")


def next_cron_time(expression: str, tz: str, after: datetime) -> datetime:
    """Return the first run strictly after ``after``, as an aware UTC datetime."""
    local_zone = zone(tz)
    wildcard_hour = _hour_is_wildcard(expression)
    try:
        times = croniter(expression, after.astimezone(local_zone))
        for _ in range(_MAX_SKIPS):
            candidate: datetime = times.get_next(datetime).astimezone(UTC)
            if candidate <= after:
                continue
            # Normalizing from UTC sets fold=1 on the second occurrence of a
            # wall-clock time repeated when clocks go back.
            if candidate.astimezone(local_zone).fold and not wildcard_hour:
                continue
            return candidate
    except (CroniterBadCronError, CroniterBadDateError, ValueError) as exc:
        raise InvalidCron(
            f"Cron expression {expression!r} never matches",
            metadata={"expression": expression},
        ) from exc
    raise InvalidCron(
        f"Cron expression {expression!r} never matches",
        metadata={"expression": expression},
    )


def validate_interval(interval: float | int | timedelta) -> float:
    """Return an ``every`` interval in seconds; at least 5 s."""
    seconds = as_seconds(interval)
    if seconds is None:
        raise InvalidCron("An interval is a number of seconds or a timedelta")
    if not math.isfinite(seconds) or seconds < MIN_EVERY_SECONDS:
        raise InvalidCron(
            f"An interval must be at least {MIN_EVERY_SECONDS:g} seconds",
            metadata={"interval": seconds, "minimum": MIN_EVERY_SECONDS},
        )
    return seconds


def next_every_time(previous: datetime, interval: float, now: datetime) -> datetime:
    """Return the first anchored time after both ``previous`` and ``now``.

    ``previous`` is a scheduled time (never a fire time), so lateness does
    not shift the cadence; runs missed while nothing fired are coalesced.
    """
    step = timedelta(seconds=interval)
    following = previous + step
    if following > now:
        return following
    missed = math.floor((now - following) / step) + 1
    following = following + missed * step
    while following <= now:  # float rounding
        following += step
    return following
