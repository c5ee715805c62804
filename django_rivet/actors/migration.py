"""Migrating stored states ahead of time (``manage.py rivet_migrate_state``).

A state older than its class's ``state_version`` is migrated when an
invocation first loads it (:mod:`.states`). :func:`migrate_stored` does it
for every stored actor of a class now, through the same invocation path:
each actor is locked, its state loaded (so migrated, by ``migrate_state``
with a real ``ctx``) and written back, one savepoint per actor inside one
transaction per batch. An actor whose migration raises is left as it was
and reported; the others of its batch commit. ``on_wake`` does not run: a
migration does not wake the actor (the next call in this process does).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..models import Actor as ActorRow
from ..models import db
from .definition import Actor
from .invocation import Invocation
from .rows import ActorRef
from .spine import invoke

__all__ = ["MigrateState", "MigrationReport", "migrate_stored"]

#: Actors migrated per transaction by default.
DEFAULT_BATCH = 500


@dataclass(slots=True)
class MigrateState:
    """Operation: load the actor (migrating its state) and write it back."""

    label: str | None = "migrate state"
    # Server-side maintenance: no caller to authorize, and no wake.
    auth = None
    wakes = False

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> int | None:
        """Return the version the state was migrated from (None: it was current)."""
        return invocation.migrated_from


class _DryRun(Exception):
    """Roll a dry run's batch back."""


@dataclass(slots=True)
class MigrationReport:
    """What :func:`migrate_stored` did (or, dry, would do)."""

    migrated: int = 0
    batches: int = 0
    # Stored by a newer state_version than the code's: left alone.
    ahead: int = 0
    failed: list[tuple[uuid.UUID, str]] = field(default_factory=list)


def migrate_stored(
    definition: type[Actor],
    *,
    batch: int = DEFAULT_BATCH,
    dry_run: bool = False,
    ids: Iterable[uuid.UUID] | None = None,
    progress: Callable[[MigrationReport], None] | None = None,
) -> MigrationReport:
    """Migrate the stored states of ``definition``'s actors older than its version.

    ``batch`` actors per transaction; ``dry_run`` runs every migration and
    rolls each batch back; ``ids`` limits it to those actors; ``progress``
    is called after each batch.
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    target = definition.state_version
    rows = ActorRow.objects.using(db.alias()).filter(name=definition.name)
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    report = MigrationReport(ahead=rows.filter(state_version__gt=target).count())
    behind = rows.filter(state_version__lt=target).order_by("pk")
    last: uuid.UUID | None = None
    while True:
        page = behind if last is None else behind.filter(pk__gt=last)
        found = list(page.values_list("pk", "key_parts")[:batch])
        if not found:
            return report
        last = found[-1][0]
        migrated, failed = _batch(definition, found, dry_run)
        report.migrated += migrated
        report.failed += failed
        report.batches += 1
        if progress is not None:
            progress(report)


def _batch(
    definition: type[Actor], found: list[tuple[uuid.UUID, list[str]]], dry_run: bool
) -> tuple[int, list[tuple[uuid.UUID, str]]]:
    migrated = 0
    failed: list[tuple[uuid.UUID, str]] = []
    try:
        with db.atomic():
            for actor_id, key in found:
                ref = ActorRef(name=definition.name, key=tuple(key), mode="get")
                try:
                    # Nested: one savepoint per actor, in the batch's transaction.
                    if invoke(ref, MigrateState()) is not None:
                        migrated += 1
                except Exception as exc:
                    failed.append((actor_id, f"{type(exc).__name__}: {exc}"))
            if dry_run:
                raise _DryRun()
    except _DryRun:
        pass
    return migrated, failed
