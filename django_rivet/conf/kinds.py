"""The kinds of values the settings take: what each accepts, in words, and its type.

:class:`Kind` pairs a test of a value with the sentence that names what it
accepts (the system checks and :class:`~django_rivet.conf.InvalidSetting`
say it) and the Python type the value is read as.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

# Longer retention periods are "forever" anyway, and would overflow date
# arithmetic.
MAX_RETENTION_SECONDS = 100 * 365 * 86400
# The most runs a cron job keeps (the setting, and each job's max_history).
MAX_CRON_HISTORY = 10000
# The most retries of a piece of background work (the setting, and each
# schedule's, cron job's or queue handler's max_retries).
MAX_RETRIES = 1000


# -- kinds of values -------------------------------------------------------------------
def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Kind:
    """The values a setting takes.

    ``expected`` says which in words (it completes "RIVET['X'] must be
    ..."); ``accepts(value)`` tells whether a value is one; ``convert(value)``
    turns an accepted value into what reads return.
    """

    expected: str
    accepts: Callable[[Any], bool]
    convert: Callable[[Any], Any] = _same


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _integer(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def optional(kind: Kind) -> Kind:
    """Return ``kind``, or ``None``."""
    return Kind(
        f"None or {kind.expected}",
        lambda value: value is None or kind.accepts(value),
        lambda value: None if value is None else kind.convert(value),
    )


def _strings(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def _seconds(value: Any) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value) if _number(value) else None


def _retention(value: Any) -> bool:
    seconds = _seconds(value)
    # NaN compares false with everything: refused here.
    return seconds is not None and 0 <= seconds <= MAX_RETENTION_SECONDS


def _http_url(value: Any) -> bool:
    return isinstance(value, str) and urlsplit(value).scheme in ("http", "https")


POSITIVE_NUMBER = Kind("a positive number", lambda v: _number(v) and v > 0, float)
POSITIVE_SECONDS = Kind("a positive number of seconds", POSITIVE_NUMBER.accepts, float)
POSITIVE_INTEGER = Kind("a positive integer", lambda v: _integer(v) and v > 0)
BOOLEAN = Kind("True or False", lambda v: isinstance(v, bool))
ALIAS = Kind("the name of a channel layer", lambda v: isinstance(v, str) and bool(v))
ORIGINS = Kind("a list of origin strings", _strings, list)
DOTTED_PATHS = Kind("a list of dotted import paths", _strings, list)
IP_NETWORKS = Kind(
    "a list of IP addresses or networks", lambda v: isinstance(v, list | tuple), list
)
HTTP_URL = Kind("an http(s) URL", _http_url)
INCOMING_TRACES = ("continue", "link", "new")
INCOMING_TRACE = Kind(
    "'continue', 'link' or 'new'", lambda v: isinstance(v, str) and v in INCOMING_TRACES
)
OPENAPI_ACCESS = Kind(
    "None, 'staff' or 'public'", lambda v: v is None or v in ("staff", "public")
)
BACKEND_NAME = Kind(
    "None, 'celery', 'worker', 'none' or the dotted path of a backend class",
    lambda v: v is None or (isinstance(v, str) and bool(v)),
)
RETENTION = Kind(
    "None or a number of seconds (or a timedelta) from 0 to 100 years",
    lambda v: v is None or _retention(v),
)
CRON_HISTORY = Kind(
    f"None or an integer from 0 to {MAX_CRON_HISTORY}",
    lambda v: v is None or (_integer(v) and 0 <= v <= MAX_CRON_HISTORY),
)
MAX_LIVE_WAIT = 3600.0
LIVE_WAIT = Kind(
    f"0 (off) or a number of seconds up to {MAX_LIVE_WAIT:g}",
    lambda v: _number(v) and 0 <= v <= MAX_LIVE_WAIT,
    float,
)
CACHE_SIZE = Kind("0 (off) or a positive integer", lambda v: _integer(v) and v >= 0)
RETRIES = Kind(
    f"an integer from 0 to {MAX_RETRIES}",
    lambda v: _integer(v) and 0 <= v <= MAX_RETRIES,
)
QUEUES = Kind(
    "a dict of queue names to their limits", lambda v: isinstance(v, dict), dict
)
MAX_VERSION_LENGTH = 64  # the Workflow.version column
VERSION = Kind(
    f"None or a version string of 1 to {MAX_VERSION_LENGTH} characters",
    lambda v: v is None or (isinstance(v, str) and 0 < len(v) <= MAX_VERSION_LENGTH),
)
