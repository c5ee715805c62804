"""Workflows on a schedule: ``@workflow(cron="0 2 * * *", tz="UTC")``.

Each tick starts exactly one workflow, with the id ``"<name>@<tick>"`` (the
tick in ISO 8601 UTC, ``nightly_report@2026-06-02T02:00:00Z``) and the input
``{"scheduled_at": "<the same tick>"}``:

- a :class:`~django_rivet.models.ScheduledWorkflow` row per scheduled
  workflow holds ``next_tick_at``, the source of truth. A tick moves it
  forward by compare-and-set *in the transaction that starts the tick's
  workflow*, so two beats, two workers or a sweeper racing a Celery task
  start it once; the id makes the start idempotent besides.
- rows follow the code: :func:`sync` creates them from the registered
  definitions and reschedules one whose expression or zone changed (the
  first sweep or worker round after a deploy does it). Only ``paused`` is
  changed from outside (the admin: pause, resume, run now).
- ticks missed while nothing ran are folded into one late tick, the oldest
  missed (as actor cron does); ``manage.py rivet_backfill`` starts the
  others (:func:`backfill`, idempotent by id).

Ticks run from the sweeper (every ``SWEEP_INTERVAL``), the worker loop, and
with Celery a ``rivet.tick_workflows`` ETA task sent when the next tick
comes within the ETA horizon. It lives beside the workflow queues: both
decide when a workflow starts, and neither needs the actors' scheduler.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Min, Q

from .. import clock, crontab, dispatch
from ..engine import WorkflowDefinition
from ..exceptions import InvalidCron, WorkflowNotFound
from ..models import ScheduledWorkflow, Workflow, db
from . import operations, registry

logger = logging.getLogger("django_rivet.scheduler")

__all__ = [
    "MAX_BACKFILL",
    "backfill",
    "definitions",
    "enqueue_upcoming_ticks",
    "next_tick_due",
    "pause",
    "resume",
    "run_due_ticks",
    "run_now",
    "sweep",
    "sync",
    "tick_id",
    "tick_input",
    "zone_of",
]

# Ticks one backfill starts at most (a typo in --from must not start years
# of minutely workflows).
MAX_BACKFILL = 10000


def tick_id(name: str, tick: datetime) -> str:
    """Return the workflow id of ``name``'s tick at ``tick``."""
    return f"{name}@{_iso(tick)}"


def tick_input(tick: datetime) -> dict[str, Any]:
    """Return the input of a tick's workflow."""
    return {"scheduled_at": _iso(tick)}


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def zone_of(definition: WorkflowDefinition) -> str:
    """Return the time zone a scheduled workflow's expression is read in."""
    return definition.tz or getattr(settings, "TIME_ZONE", None) or "UTC"


def definitions() -> dict[str, WorkflowDefinition]:
    """Return the registered workflows that have a ``cron`` schedule."""
    return {
        name: definition
        for name, definition in registry.all_workflows().items()
        if definition.cron
    }


def _definition(name: str) -> WorkflowDefinition:
    definition = definitions().get(name)
    if definition is None:
        raise WorkflowNotFound(f"No workflow {name!r} has a cron schedule")
    return definition


# -- rows follow the code --------------------------------------------------------------
def sync() -> dict[str, WorkflowDefinition]:
    """Create and update the rows of the scheduled workflows; return them.

    A new schedule's first tick is the first one after now; a changed
    expression or zone starts over from now. Invalid ones are skipped and
    logged (``rivet.E702`` reports them at check time).
    """
    found = definitions()
    if not found:
        return {}
    now = clock.now_datetime()
    rows = {
        name: (expression, zone)
        for name, expression, zone in ScheduledWorkflow.objects.filter(
            name__in=found
        ).values_list("name", "expression", "timezone")
    }
    valid = {}
    for name, definition in found.items():
        assert definition.cron is not None
        expression, zone = " ".join(definition.cron.split()), zone_of(definition)
        if rows.get(name) == (expression, zone):
            valid[name] = definition
            continue
        try:
            first = crontab.validate_cron(expression, zone, now)
        except InvalidCron as exc:
            logger.error("scheduled workflow %s is not scheduled: %s", name, exc)
            continue
        valid[name] = definition
        fields = {"expression": expression, "timezone": zone, "next_tick_at": first}
        if name not in rows:
            ScheduledWorkflow.objects.bulk_create(
                [
                    ScheduledWorkflow(
                        name=name, created_at=now, updated_at=now, **fields
                    )
                ],
                ignore_conflicts=True,
            )
        else:
            old_expression, old_zone = rows[name]
            ScheduledWorkflow.objects.filter(
                name=name, expression=old_expression, timezone=old_zone
            ).update(enqueued_for=None, updated_at=now, **fields)
        logger.info("scheduled workflow %s: %s (%s)", name, expression, zone)
    return valid


# -- ticks -----------------------------------------------------------------------------
def _wake_for(name: str, when: datetime) -> dict[str, Any]:
    """Return the row fields for a tick task sent for ``when`` (sent on commit)."""
    timestamp = clock.to_timestamp(when)
    if not dispatch.within_eta_horizon(timestamp):
        return {"enqueued_for": None}
    dispatch.wake_on_commit("tick_workflows", [], eta=timestamp)
    return {"enqueued_for": when}


def _tick(row: ScheduledWorkflow, definition: WorkflowDefinition) -> bool:
    """Start the workflow of ``row``'s due tick; tell whether this call did."""
    now = clock.now_datetime()
    tick = row.next_tick_at
    following = crontab.next_cron_time(row.expression, row.timezone, max(tick, now))
    workflow_id = tick_id(row.name, tick)
    with db.atomic():
        advanced = ScheduledWorkflow.objects.filter(
            name=row.name, next_tick_at=tick, paused=False
        ).update(
            next_tick_at=following,
            last_tick_at=tick,
            last_workflow_id=workflow_id,
            updated_at=now,
            **_wake_for(row.name, following),
        )
        if not advanced:
            return False  # another beat or worker took this tick
        operations.start(definition, tick_input(tick), workflow_id)
    logger.info("scheduled workflow started workflow=%s", workflow_id)
    return True


def run_due_ticks(limit: int = 100) -> int:
    """Start the workflows of every due tick; return how many were started."""
    found = sync()
    if not found:
        return 0
    due = ScheduledWorkflow.objects.due(clock.now_datetime()).filter(name__in=found)
    started = 0
    for row in list(due.order_by("next_tick_at")[:limit]):
        if _tick(row, found[row.name]):
            started += 1
    return started


def next_tick_due() -> float | None:
    """Return when the next tick of a scheduled workflow is due (the worker)."""
    found = definitions()
    if not found:
        return None
    at = (
        ScheduledWorkflow.objects.filter(paused=False, name__in=found)
        .aggregate(at=Min("next_tick_at"))
        .get("at")
    )
    return None if at is None else clock.to_timestamp(at)


def enqueue_upcoming_ticks() -> int:
    """Send tick tasks for ticks that entered the ETA horizon (Celery only)."""
    if not dispatch.backend().eta_tasks:
        return 0
    horizon = clock.to_datetime(clock.now() + dispatch.ETA_HORIZON)
    upcoming = ScheduledWorkflow.objects.filter(
        paused=False, next_tick_at__lte=horizon
    ).filter(Q(enqueued_for__isnull=True) | ~Q(enqueued_for=F("next_tick_at")))
    sent = 0
    for name, next_tick_at in upcoming.values_list("name", "next_tick_at"):
        # The conditional update decides which sweeper sends the task.
        if ScheduledWorkflow.objects.filter(
            name=name, next_tick_at=next_tick_at
        ).update(enqueued_for=next_tick_at):
            dispatch.wake("tick_workflows", [], eta=clock.to_timestamp(next_tick_at))
            sent += 1
    return sent


def sweep() -> int:
    """The sweep step: start due ticks, send tasks for upcoming ones."""
    return run_due_ticks() + enqueue_upcoming_ticks()


# -- pause, resume, run now, backfill (the admin and rivet_backfill) -------------------
def pause(name: str) -> bool:
    """Stop starting ``name``'s ticks; return False if it was paused already."""
    sync()
    return bool(
        ScheduledWorkflow.objects.filter(name=name, paused=False).update(
            paused=True, updated_at=clock.now_datetime()
        )
    )


def resume(name: str) -> bool:
    """Start ``name``'s ticks again from the next one after now (none missed).

    Returns False if it was not paused.
    """
    sync()
    row = ScheduledWorkflow.objects.filter(name=name, paused=True).first()
    if row is None:
        return False
    now = clock.now_datetime()
    following = crontab.next_cron_time(row.expression, row.timezone, now)
    with db.atomic():
        resumed = ScheduledWorkflow.objects.filter(name=name, paused=True).update(
            paused=False,
            next_tick_at=following,
            updated_at=now,
            **_wake_for(name, following),
        )
    return bool(resumed)


def run_now(name: str) -> str:
    """Start ``name`` now, as a tick at this second; return the workflow id."""
    definition = _definition(name)
    now = clock.now_datetime().replace(microsecond=0)
    workflow_id = tick_id(name, now)
    operations.start(definition, tick_input(now), workflow_id)
    return workflow_id


def backfill(name: str, start: datetime, end: datetime) -> tuple[int, int]:
    """Start ``name``'s ticks from ``start`` to ``end`` (both included).

    Idempotent by id: returns ``(started, already there)``. Raises
    ``ValueError`` for more than :data:`MAX_BACKFILL` ticks.
    """
    definition = _definition(name)
    assert definition.cron is not None
    zone = zone_of(definition)
    crontab.validate_cron(definition.cron, zone, start)
    ticks: list[datetime] = []
    # The first tick at or after ``start``.
    tick = crontab.next_cron_time(definition.cron, zone, start - timedelta(seconds=1))
    while tick <= end:
        ticks.append(tick)
        if len(ticks) > MAX_BACKFILL:
            raise ValueError(
                f"More than {MAX_BACKFILL} ticks between {start} and {end}; "
                "backfill a shorter range"
            )
        tick = crontab.next_cron_time(definition.cron, zone, tick)
    ids = [tick_id(name, tick) for tick in ticks]
    existing = set(Workflow.objects.filter(pk__in=ids).values_list("pk", flat=True))
    for tick, workflow_id in zip(ticks, ids, strict=True):
        if workflow_id not in existing:
            operations.start(definition, tick_input(tick), workflow_id)
    return len(ids) - len(existing), len(existing)
