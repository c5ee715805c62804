"""Retention settings (rivet.E301, E302, W301).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.checks import Error, Tags, Warning, register

from ..conf import DEFAULTS, docs_url, rivet_settings
from ..scheduling.cron import MAX_HISTORY_LIMIT

# -- retention ------------------------------------------------------------------------
E301 = (
    "RIVET[{key!r}] must be None or a number of seconds (or a timedelta) "
    "from 0 to 100 years."
)
E301_HINT = "None keeps rows forever; see {docs}"
# Longer periods are "forever" anyway, and would overflow date arithmetic.
MAX_RETENTION_SECONDS = 100 * 365 * 86400
E302 = "RIVET['CRON_HISTORY'] must be None or an integer from 0 to {limit}."
E302_HINT = "It is how many runs each cron job keeps; None keeps them all."
W301 = (
    "RIVET['QUEUE_RETENTION'] is shorter than RIVET['ACTION_TIMEOUT']: a sender "
    "waiting for a reply may find its message purged."
)
W301_HINT = "Keep processed queue messages at least as long as senders wait."

RETENTION_SETTINGS = ("WORKFLOW_RETENTION", "SCHEDULE_RETENTION", "QUEUE_RETENTION")


def _seconds(value: Any) -> float | None:
    """Return a retention value in seconds; None if it is not one."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@register(Tags.compatibility)
def check_retention(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the retention settings and that replies outlive waiting senders."""
    errors: list[Any] = []
    user = rivet_settings.user_settings
    for key in RETENTION_SETTINGS:
        value = user.get(key, DEFAULTS[key])
        seconds = _seconds(value)
        if value is not None and (
            seconds is None or not 0 <= seconds <= MAX_RETENTION_SECONDS
        ):
            errors.append(
                Error(
                    E301.format(key=key),
                    hint=E301_HINT.format(docs=docs_url("settings", "retention")),
                    obj="settings.RIVET",
                    id="rivet.E301",
                )
            )
    history = user.get("CRON_HISTORY", DEFAULTS["CRON_HISTORY"])
    if history is not None and (
        isinstance(history, bool)
        or not isinstance(history, int)
        or not 0 <= history <= MAX_HISTORY_LIMIT
    ):
        errors.append(
            Error(
                E302.format(limit=MAX_HISTORY_LIMIT),
                hint=E302_HINT,
                obj="settings.RIVET",
                id="rivet.E302",
            )
        )
    queue = _seconds(user.get("QUEUE_RETENTION", DEFAULTS["QUEUE_RETENTION"]))
    timeout = _seconds(user.get("ACTION_TIMEOUT", DEFAULTS["ACTION_TIMEOUT"]))
    if queue is not None and timeout is not None and queue < timeout:
        errors.append(
            Warning(W301, hint=W301_HINT, obj="settings.RIVET", id="rivet.W301")
        )
    return errors
