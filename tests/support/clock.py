"""Where the virtual clock of the Django-side tests starts.

Tests of schedules, cron, retries, retention, queues and the worker freeze
time at ``START`` (``freeze_time(START)``) and advance it from there, so that
their expected times read as offsets from one instant.
"""

from datetime import UTC, datetime

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
