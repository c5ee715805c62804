"""``manage.py rivet_purge``: apply the retention settings now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_rivet.management.base import RivetCommand, bounded_int
from django_rivet.upkeep.retention import (
    PURGE_BATCH,
    TABLES,
    eligible_counts,
    purge_all,
)

# Rows per transaction at most (SQLite binds each id of a batch).
MAX_BATCH = 10_000


class Command(RivetCommand):
    """Delete what the retention settings let go, in bounded batches."""

    help = (
        "Delete finished workflows, fired schedules and processed queue "
        "messages past their retention (WORKFLOW_RETENTION, "
        "SCHEDULE_RETENTION, QUEUE_RETENTION) and cron history beyond "
        "CRON_HISTORY, batch after batch, and print the rows deleted per "
        "table. The sweeper does the same a batch at a time; run this from "
        "system cron when nothing runs rivet.sweep, or after lowering a "
        "setting. Safe to run while the site runs and from several machines."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add --dry-run and --batch-size."""
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only print how many rows per table would be deleted.",
        )
        parser.add_argument(
            "--batch-size",
            type=bounded_int(1, MAX_BATCH),
            default=PURGE_BATCH,
            help=f"Rows per transaction (default {PURGE_BATCH}, at most {MAX_BATCH}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Purge (or count) and print one line per table."""
        batch = options["batch_size"]
        if options["dry_run"]:
            counts = eligible_counts()
            self.stdout.write("Dry run: nothing deleted. Eligible rows:")
        else:
            counts = purge_all(batch)
            self.stdout.write("Deleted rows:")
        for table in TABLES:
            self.stdout.write(f"{table}: {counts.get(table, 0)}")
