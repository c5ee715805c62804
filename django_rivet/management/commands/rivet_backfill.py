"""``manage.py rivet_backfill NAME --from ISO --to ISO``: start missed ticks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_rivet.exceptions import InvalidCron, WorkflowNotFound
from django_rivet.management.base import RivetCommand, printable
from django_rivet.workflows.scheduled import backfill


def _moment(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"{printable(value)!r} is not an ISO 8601 date or time (2026-06-01T02:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Command(RivetCommand):
    """Start the workflows of a workflow schedule's ticks in a time range."""

    help = (
        "Start the workflows of every tick of the workflow schedule NAME "
        "(a workflow's @workflow(cron=...), or a schedule created at run time "
        "with workflows.schedules) from --from to --to, both included: ticks "
        "missed while nothing ran, or before the schedule existed. Each "
        "tick's workflow has the id NAME@<tick>, so ticks already started "
        "are left alone and running it twice is safe. Times are ISO 8601; "
        "without a zone they are UTC."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the name and the range."""
        parser.add_argument("name", help="The schedule's name.")
        parser.add_argument("--from", dest="start", required=True, type=_moment)
        parser.add_argument("--to", dest="end", required=True, type=_moment)

    def handle(self, *args: Any, **options: Any) -> None:
        """Start the range's ticks and say how many."""
        start, end = options["start"], options["end"]
        if end < start:
            raise CommandError("--to is before --from")
        try:
            started, existing = backfill(options["name"], start, end)
        except (WorkflowNotFound, InvalidCron, ValueError, OverflowError) as exc:
            # OverflowError: a tick before year 1 or after 9999.
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Started {started} workflow(s); {existing} tick(s) had one already."
        )
