"""The retry policy of background work: how often, how long to wait, what to keep.

A scheduled action, a cron firing or a queue message whose handler raises is
tried again, each attempt an invocation of its own (a failed attempt rolls
back like any call), until it succeeds or its retries are spent:

- ``max_retries`` retries after the first attempt (``None`` follows
  ``RIVET["SCHEDULE_MAX_RETRIES"]``, read when the attempt fails);
- retry ``n`` waits ``min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE * 2**(n-1))``
  seconds, less up to a quarter of it at random, so that work failing
  together does not retry together;
- the traceback of the last attempt is kept, bounded, for the admin.

What is never retried (a ``UserError``, a handler gone from the code) is
decided where the attempt fails (:mod:`.claims`).
"""

from __future__ import annotations

import random
import traceback
from typing import Any

from ..conf import MAX_RETRIES, rivet_settings

__all__ = [
    "JITTER",
    "MAX_RETRIES_LIMIT",
    "TRACEBACK_LIMIT",
    "backoff",
    "check_count",
    "check_max_retries",
    "retries_allowed",
    "traceback_text",
]

# One bound for RIVET["SCHEDULE_MAX_RETRIES"] and for each max_retries.
MAX_RETRIES_LIMIT = MAX_RETRIES
# The share of a delay that jitter may take off.
JITTER = 0.25
# Characters of a traceback kept on a row.
TRACEBACK_LIMIT = 16 * 1024


def check_count(
    value: Any, name: str, limit: int, kind: str = "an integer"
) -> int | None:
    """Return ``value``: None or an integer from 0 to ``limit``.

    Else raise ``TypeError`` (not ``kind``) or ``ValueError``, naming the
    argument ``name``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is {kind}")
    if not 0 <= value <= limit:
        raise ValueError(f"{name} must be between 0 and {limit}")
    return value


def check_max_retries(value: Any) -> int | None:
    """Return a valid ``max_retries`` (or raise ``TypeError``, ``ValueError``)."""
    kind = "an integer (or None for the default)"
    return check_count(value, "max_retries", MAX_RETRIES_LIMIT, kind)


def retries_allowed(max_retries: int | None) -> int:
    """Return the retries a piece of work has (its own, or the setting)."""
    if max_retries is not None:
        return max_retries
    return rivet_settings.SCHEDULE_MAX_RETRIES


def backoff(attempt: int) -> float:
    """Return the seconds to wait after failed attempt ``attempt`` (1-based)."""
    base = rivet_settings.RETRY_BACKOFF_BASE
    ceiling = rivet_settings.RETRY_BACKOFF_MAX
    nominal = min(ceiling, base * 2 ** min(max(attempt - 1, 0), 64))
    return float(nominal * (1.0 - JITTER * random.random()))


def traceback_text(exc: BaseException) -> str:
    """Return the exception's traceback, its last ``TRACEBACK_LIMIT`` characters."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    return text
