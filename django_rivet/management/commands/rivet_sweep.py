"""``manage.py rivet_sweep``: one sweep, in this process."""

from __future__ import annotations

from typing import Any

from django_rivet.management.base import RivetCommand
from django_rivet.upkeep.sweeper import sweep


class Command(RivetCommand):
    """Run one sweep: fire lost schedules, cron runs and queue messages."""

    help = (
        "Run one sweep: return stale claims to pending, fire schedules, cron "
        "runs and queue messages whose task was lost, purge old records. Safe "
        "to run from several machines at once (e.g. from system cron)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        """Sweep once and report what each step handled."""
        counts = sweep()
        for name, count in counts.items():
            self.stdout.write(f"{name}: {count}")
