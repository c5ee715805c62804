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

from ..conf import rivet_settings

__all__ = [
    "JITTER",
    "MAX_RETRIES_LIMIT",
    "TRACEBACK_LIMIT",
    "backoff",
    "check_max_retries",
    "retries_allowed",
    "traceback_text",
]

MAX_RETRIES_LIMIT = 1000
# The share of a delay that jitter may take off.
JITTER = 0.25
# Characters of a traceback kept on a row.
TRACEBACK_LIMIT = 16 * 1024


def check_max_retries(value: Any) -> int | None:
    """Return a valid ``max_retries`` (or raise ``TypeError``, ``ValueError``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("max_retries is an integer (or None for the default)")
    if not 0 <= value <= MAX_RETRIES_LIMIT:
        raise ValueError(f"max_retries must be between 0 and {MAX_RETRIES_LIMIT}")
    return value


def retries_allowed(max_retries: int | None) -> int:
    """Return the retries a piece of work has (its own, or the setting)."""
    if max_retries is not None:
        return max_retries
    return int(rivet_settings.SCHEDULE_MAX_RETRIES)


def backoff(attempt: int) -> float:
    """Return the seconds to wait after failed attempt ``attempt`` (1-based)."""
    base = float(rivet_settings.RETRY_BACKOFF_BASE)
    ceiling = float(rivet_settings.RETRY_BACKOFF_MAX)
    nominal = min(ceiling, base * 2 ** min(max(attempt - 1, 0), 64))
    return float(nominal * (1.0 - JITTER * random.random()))


def traceback_text(exc: BaseException) -> str:
    """Return the exception's traceback, its last ``TRACEBACK_LIMIT`` characters."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > TRACEBACK_LIMIT:
        text = "...\n" + text[-TRACEBACK_LIMIT:]
    return text
