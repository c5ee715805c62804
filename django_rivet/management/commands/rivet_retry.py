"""``manage.py rivet_retry {schedules,messages} [ids...] [--all]``: rerun failures."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_rivet.management.base import INT64_MAX, RivetCommand, printable
from django_rivet.models import QueueMessage, Schedule
from django_rivet.scheduling.queue_delivery import retry_messages
from django_rivet.scheduling.schedule_runs import retry_schedules


class Command(RivetCommand):
    """Make failed schedules or queue messages pending again."""

    help = (
        "Run failed schedules or queue messages again: each goes back to "
        "pending, due now, with its attempts starting over (a message goes "
        "back to the head of its actor's queue). Name them by id, or pass "
        "--all for every failed one. Prints how many were retried; ids that "
        "are unknown or not failed are left alone."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the kind, the ids and --all."""
        parser.add_argument("kind", choices=["schedules", "messages"])
        parser.add_argument("ids", nargs="*", help="Schedule or message ids.")
        parser.add_argument(
            "--all", action="store_true", help="Retry every failed one."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Retry what was named and print how many."""
        ids: list[str] = options["ids"]
        if bool(ids) == bool(options["all"]):
            raise CommandError("Name the ids to retry, or pass --all (not both).")
        if options["kind"] == "schedules":
            schedules = Schedule.objects.failed()
            if ids:
                schedules = schedules.filter(pk__in=[_schedule_id(i) for i in ids])
            count = retry_schedules(schedules)
            self.stdout.write(f"Retried {count} schedule(s).")
        else:
            messages = QueueMessage.objects.failed()
            if ids:
                messages = messages.filter(pk__in=[_message_id(i) for i in ids])
            count = retry_messages(messages)
            self.stdout.write(f"Retried {count} message(s).")


def _schedule_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise CommandError(
            f"{printable(value)!r} is not a schedule id (a UUID)"
        ) from None


def _message_id(value: str) -> int:
    try:
        found = int(value)
    except ValueError:
        found = 0
    if not 0 < found <= INT64_MAX:
        raise CommandError(f"{printable(value)!r} is not a message id (an integer)")
    return found
