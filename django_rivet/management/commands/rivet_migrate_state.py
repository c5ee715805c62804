"""``manage.py rivet_migrate_state <actor> [--dry-run] [--batch N]``.

Migrates every stored actor of a class whose state is older than the
class's ``state_version`` now, instead of on each actor's next call:
``migrate_state`` runs for each, in batches of ``--batch`` actors per
transaction. ``--dry-run`` runs the migrations and rolls them back. Actors
whose migration raises are listed and left as they were, and the command
exits with status 1.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_rivet.actors import registry
from django_rivet.actors.migration import (
    DEFAULT_BATCH,
    MigrationReport,
    migrate_stored,
)
from django_rivet.exceptions import ActorNotFound


class Command(BaseCommand):
    """Migrate the stored states of one actor class to its ``state_version``."""

    help = "Migrate the stored states of an actor class to its state_version now."

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the actor name, --dry-run and --batch."""
        parser.add_argument("actor", help="The actor class's registered name.")
        parser.add_argument("--dry-run", action="store_true", help="Roll back.")
        batch = f"Actors per transaction (default {DEFAULT_BATCH})."
        parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=batch)

    def handle(self, *args: Any, **options: Any) -> None:
        """Migrate (or try) and say what happened."""
        name: str = options["actor"]
        batch: int = options["batch"]
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        try:
            definition = registry.get(name)
        except ActorNotFound:
            raise CommandError(f"No actor class is registered as {name!r}") from None
        dry = bool(options["dry_run"])
        verbosity = int(options["verbosity"])

        def progress(report: MigrationReport) -> None:
            if verbosity > 1:
                self.stdout.write(f"  batch {report.batches}: {report.migrated} so far")

        report = migrate_stored(definition, batch=batch, dry_run=dry, progress=progress)
        verb = "Would migrate" if dry else "Migrated"
        self.stdout.write(
            f"{verb} {report.migrated} {name!r} actor(s) to state_version "
            f"{definition.state_version} in {report.batches} batch(es)."
        )
        if report.ahead:
            self.stdout.write(
                f"{report.ahead} actor(s) have a newer state_version than this "
                "code: left alone (is an older version of the code running?)."
            )
        for actor_id, error in report.failed:
            self.stderr.write(f"  {actor_id}: {error}")
        if report.failed:
            raise CommandError(
                f"{len(report.failed)} actor(s) could not be migrated (listed "
                "above); they migrate, or fail, again on their next call."
            )
