"""One log line per invocation, with fields a JSON formatter can emit.

Logger ``django_rivet.actions``: a line at DEBUG for every action, connect,
schedule, cron run and queue message, and one at WARNING instead when it
failed on the server's side (outcome ``error``). Each record carries
``extra`` attributes -- ``actor``, ``actor_id``, ``action``, ``kind``,
``transport``, ``outcome``, ``duration`` (seconds), ``code`` (``group/code``,
"" when it succeeded), ``trace_id`` and ``span_id`` (hex, None without an
OpenTelemetry span) -- which structured formatters (python-json-logger,
structlog's stdlib bridge) write as fields.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["enabled", "logger", "record"]

logger = logging.getLogger("django_rivet.actions")


def enabled(failed: bool) -> bool:
    """Tell whether the line of an invocation (failed or not) would be logged."""
    return logger.isEnabledFor(logging.WARNING if failed else logging.DEBUG)


def record(fields: dict[str, Any], *, failed: bool) -> None:
    """Log one invocation described by ``fields`` (the ``extra`` above)."""
    logger.log(
        logging.WARNING if failed else logging.DEBUG,
        "%s %s.%s %s code=%s duration_ms=%.1f trace_id=%s",
        fields["kind"],
        fields["actor"] or "?",
        fields["action"] or "-",
        fields["outcome"],
        fields["code"] or "-",
        fields["duration"] * 1000,
        fields["trace_id"] or "-",
        extra=fields,
    )
