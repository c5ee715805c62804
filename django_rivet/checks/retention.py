"""Retention settings (rivet.E301, E302, W301).

Messages are module constants so tests compare them by equality.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.checks import Tags, register

from ..conf import docs_url, rivet_settings
from ..conf.kinds import CRON_HISTORY, RETENTION
from .base import message

__all__ = [
    "E301",
    "E301_HINT",
    "E302",
    "E302_HINT",
    "RETENTION_SETTINGS",
    "W301",
    "W301_HINT",
    "check_retention",
]

# -- retention ------------------------------------------------------------------------
# The sentences InvalidSetting says too: the kinds are declared in conf.
E301 = "RIVET[{key!r}] must be " + RETENTION.expected + "."
E301_HINT = "None keeps rows forever; see {docs}"
E302 = "RIVET['CRON_HISTORY'] must be " + CRON_HISTORY.expected + "."
E302_HINT = "It is how many runs each cron job keeps; None keeps them all."
W301 = (
    "RIVET['QUEUE_RETENTION'] is shorter than RIVET['ACTION_TIMEOUT']: a sender "
    "waiting for a reply may find its message purged."
)
W301_HINT = "Keep processed queue messages at least as long as senders wait."

RETENTION_SETTINGS = ("WORKFLOW_RETENTION", "SCHEDULE_RETENTION", "QUEUE_RETENTION")


@register(Tags.compatibility)
def check_retention(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check the retention settings and that replies outlive waiting senders."""
    errors: list[Any] = []
    hint = E301_HINT.format(docs=docs_url("settings", "retention"))
    for key in rivet_settings.problems("rivet.E301"):
        errors.append(message("rivet.E301", E301.format(key=key), hint))
    if rivet_settings.problem("CRON_HISTORY") is not None:
        errors.append(message("rivet.E302", E302, E302_HINT))
    queue = rivet_settings.valid("QUEUE_RETENTION")
    timeout = rivet_settings.valid("ACTION_TIMEOUT")
    if queue is not None and timeout is not None and _seconds(queue) < timeout:
        errors.append(message("rivet.W301", W301, W301_HINT))
    return errors


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else value
