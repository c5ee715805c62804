"""Workflow schedules: their ticks, one workflow per tick.

A schedule is a :class:`~django_rivet.models.ScheduledWorkflow` row, of one
of two kinds that share everything below:

- ``@workflow(cron="0 2 * * *", tz="UTC")``: the row is named after the
  workflow, ``from_code``, and follows the code: :func:`sync` creates the
  rows from the registered definitions and reschedules one whose
  expression or zone changed (the first sweep or worker round after a
  deploy does it, and :mod:`.schedules` before it answers);
- schedules created at run time (:mod:`.schedules`: ``create``,
  ``apply``...), several per workflow, each with its ``context`` (handed
  to every tick) and its ``queue``.

Each tick starts exactly one workflow, with the id ``"<schedule>@<tick>"``
(the tick in ISO 8601 UTC, ``nightly_report@2026-06-02T02:00:00Z``) and the
input ``{"scheduled_at": "<the same tick>", "schedule": "<schedule>",
"context": <the schedule's>}``:

- ``next_tick_at`` is the source of truth. A tick moves it forward by
  compare-and-set *in the transaction that starts the tick's workflow*, so
  two beats, two workers or a sweeper racing a Celery task start it once;
  the id makes the start idempotent besides.
- ticks missed while nothing ran are folded into one late tick, the oldest
  missed (as actor cron does), unless the schedule has ``catch_up``: then
  each missed tick starts its workflow. :func:`backfill` (and ``manage.py
  rivet_backfill``) starts the ticks of a range, idempotent by id.

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
from ..exceptions import InvalidCron, ScheduleNotFound
from ..models import ScheduledWorkflow, Workflow, db
from . import operations, registry

logger = logging.getLogger("django_rivet.scheduler")

__all__ = [
    "MAX_BACKFILL",
    "backfill",
    "backfill_ids",
    "definitions",
    "enqueue_upcoming_ticks",
    "live",
    "next_tick_due",
    "pause",
    "resume",
    "run_due_ticks",
    "run_now",
    "sweep",
    "sync",
    "tick_id",
    "tick_input",
    "trigger",
    "zone_of",
]

# Ticks one backfill starts at most (a typo in --from must not start years
# of minutely workflows).
MAX_BACKFILL = 10000


def tick_id(name: str, tick: datetime) -> str:
    """Return the workflow id of schedule ``name``'s tick at ``tick``."""
    return f"{name}@{_iso(tick)}"


def tick_input(name: str, tick: datetime, context: Any = None) -> dict[str, Any]:
    """Return the input of schedule ``name``'s tick at ``tick``."""
    return {"scheduled_at": _iso(tick), "schedule": name, "context": context}


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


def live(found: dict[str, WorkflowDefinition] | None = None) -> Q:
    """Return the filter of the rows that tick in this process.

    The code's rows whose workflow still has its ``cron=`` (``found``:
    :func:`sync`'s answer), and the run-time ones whose workflow is
    registered. A row left by a removed ``cron=`` stays (a deploy may be
    under way) but neither ticks nor is listed.
    """
    found = definitions() if found is None else found
    return Q(from_code=True, name__in=list(found)) | Q(
        from_code=False, workflow_name__in=list(registry.all_workflows())
    )


def _row(name: str) -> ScheduledWorkflow:
    row = ScheduledWorkflow.objects.filter(live(sync()), name=name).first()
    if row is None:
        raise ScheduleNotFound(
            f"No workflow schedule {name!r}: no workflow of that name has a "
            "cron schedule and no schedule of that name was created at run time",
            metadata={"schedule": name},
        )
    return row


def _definition_of(row: ScheduledWorkflow) -> WorkflowDefinition:
    return registry.get(row.workflow_name or row.name)


# -- the code's rows follow the code ---------------------------------------------------
def sync() -> dict[str, WorkflowDefinition]:
    """Create and update the rows of ``@workflow(cron=)``; return them.

    A new schedule's first tick is the first one after now; a changed
    expression or zone starts over from now. Invalid ones are skipped and
    logged (``rivet.E702`` reports them at check time), and so is one whose
    name a schedule created at run time holds.
    """
    found = definitions()
    if not found:
        return {}
    now = clock.now_datetime()
    rows = {
        name: (expression, zone, from_code)
        for name, expression, zone, from_code in ScheduledWorkflow.objects.filter(
            name__in=found
        ).values_list("name", "expression", "timezone", "from_code")
    }
    valid = {}
    for name, definition in found.items():
        assert definition.cron is not None
        expression, zone = " ".join(definition.cron.split()), zone_of(definition)
        if name in rows and not rows[name][2]:
            logger.error(
                "scheduled workflow %s is not scheduled: a schedule created at "
                "run time has its name",
                name,
            )
            continue
        if rows.get(name) == (expression, zone, True):
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
                        name=name,
                        workflow_name=name,
                        from_code=True,
                        created_at=now,
                        updated_at=now,
                        **fields,
                    )
                ],
                ignore_conflicts=True,
            )
        else:
            old_expression, old_zone, _ = rows[name]
            ScheduledWorkflow.objects.filter(
                name=name, from_code=True, expression=old_expression, timezone=old_zone
            ).update(enqueued_for=None, updated_at=now, **fields)
        logger.info("scheduled workflow %s: %s (%s)", name, expression, zone)
    return valid


# -- ticks -----------------------------------------------------------------------------
def wake_for(when: datetime) -> dict[str, Any]:
    """Return the row fields for a tick task sent for ``when`` (sent on commit)."""
    timestamp = clock.to_timestamp(when)
    if not dispatch.within_eta_horizon(timestamp):
        return {"enqueued_for": None}
    dispatch.wake_on_commit("tick_workflows", [], eta=timestamp)
    return {"enqueued_for": when}


def _start(row: ScheduledWorkflow, definition: WorkflowDefinition, at: datetime) -> str:
    workflow_id = tick_id(row.name, at)
    operations.start(
        definition,
        tick_input(row.name, at, row.context),
        workflow_id,
        queue=row.queue or None,
    )
    return workflow_id


def _tick(
    row: ScheduledWorkflow, definition: WorkflowDefinition, budget: int = 1
) -> int:
    """Start the workflows of ``row``'s due ticks; return how many this call did.

    One tick, the oldest due (the missed ones fold into it), unless the row
    has ``catch_up``: then each missed tick, at most ``budget`` in this call.
    """
    tick = row.next_tick_at
    started = 0
    while True:
        now = clock.now_datetime()
        after = tick if row.catch_up else max(tick, now)
        following = crontab.next_cron_time(row.expression, row.timezone, after)
        with db.atomic():
            advanced = ScheduledWorkflow.objects.filter(
                name=row.name, next_tick_at=tick, paused=False
            ).update(
                next_tick_at=following,
                last_tick_at=tick,
                last_workflow_id=tick_id(row.name, tick),
                updated_at=now,
                **wake_for(following),
            )
            if not advanced:
                return started  # another beat or worker took this tick
            workflow_id = _start(row, definition, tick)
        logger.info("scheduled workflow started workflow=%s", workflow_id)
        started += 1
        if following > now or started >= budget:
            return started
        tick = following


def run_due_ticks(limit: int = 100) -> int:
    """Start the workflows of due ticks, at most ``limit``; return how many."""
    due = ScheduledWorkflow.objects.due(clock.now_datetime()).filter(live(sync()))
    started = 0
    for row in list(due.order_by("next_tick_at")[:limit]):
        if started >= limit:
            break
        try:
            started += _tick(row, _definition_of(row), limit - started)
        except Exception:
            # A queue removed from the settings, an input the workflow
            # refuses...: the row stays due (and logged), the others tick.
            logger.exception("workflow schedule %s: its tick did not start", row.name)
    return started


def next_tick_due() -> float | None:
    """Return when the next tick of a workflow schedule is due (the worker)."""
    at = (
        ScheduledWorkflow.objects.filter(live(), paused=False)
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


# -- pause, resume, trigger, backfill (either kind) ------------------------------------
def pause(name: str) -> bool:
    """Stop starting ``name``'s ticks; return False if it was paused already."""
    _row(name)
    return bool(
        ScheduledWorkflow.objects.filter(name=name, paused=False).update(
            paused=True, updated_at=clock.now_datetime()
        )
    )


def resume(name: str) -> bool:
    """Start ``name``'s ticks again from the next one after now (none missed).

    Returns False if it was not paused.
    """
    row = _row(name)
    if not row.paused:
        return False
    now = clock.now_datetime()
    following = crontab.next_cron_time(row.expression, row.timezone, now)
    with db.atomic():
        resumed = ScheduledWorkflow.objects.filter(name=name, paused=True).update(
            paused=False,
            next_tick_at=following,
            updated_at=now,
            **wake_for(following),
        )
    return bool(resumed)


def trigger(name: str) -> str:
    """Start ``name``'s workflow now, as a tick at this second; return its id.

    It has the schedule's context and queue; two triggers in one second
    start one workflow (the id is the tick's).
    """
    row = _row(name)
    now = clock.now_datetime().replace(microsecond=0)
    return _start(row, _definition_of(row), now)


run_now = trigger  # the admin's older name


def backfill_ids(name: str, start: datetime, end: datetime) -> tuple[list[str], int]:
    """Start ``name``'s ticks from ``start`` to ``end`` (both included).

    Idempotent by id: returns every tick's workflow id and how many were
    there already. Raises ``ValueError`` for more than :data:`MAX_BACKFILL`
    ticks.
    """
    row = _row(name)
    definition = _definition_of(row)
    crontab.validate_cron(row.expression, row.timezone, start)
    ticks: list[datetime] = []
    # The first tick at or after ``start``.
    tick = crontab.next_cron_time(
        row.expression, row.timezone, start - timedelta(seconds=1)
    )
    while tick <= end:
        ticks.append(tick)
        if len(ticks) > MAX_BACKFILL:
            raise ValueError(
                f"More than {MAX_BACKFILL} ticks between {start} and {end}; "
                "backfill a shorter range"
            )
        tick = crontab.next_cron_time(row.expression, row.timezone, tick)
    ids = [tick_id(name, tick) for tick in ticks]
    existing = set(Workflow.objects.filter(pk__in=ids).values_list("pk", flat=True))
    for tick, workflow_id in zip(ticks, ids, strict=True):
        if workflow_id not in existing:
            _start(row, definition, tick)
    return ids, len(existing)


def backfill(name: str, start: datetime, end: datetime) -> tuple[int, int]:
    """Start ``name``'s ticks in a range: ``(started, already there)``."""
    ids, existing = backfill_ids(name, start, end)
    return len(ids) - existing, existing
