"""Workflow schedules created and managed at run time: ``workflows.schedules``.

::

    from django_rivet import workflows

    workflows.schedules.create(
        "report-eu", "nightly_report", "0 2 * * *", tz="Europe/Paris",
        context={"region": "eu"}, queue="reports",
    )
    workflows.schedules.pause("report-eu")
    workflows.schedules.trigger("report-eu")          # a handle
    workflows.schedules.backfill("report-eu", start, end)
    workflows.schedules.apply([{...}, {...}])        # one transaction

A schedule has a name of its own, so a workflow may have several, each
with its ``context``: every tick's workflow gets the input
``{"scheduled_at": "<tick, ISO 8601 UTC>", "schedule": "<name>",
"context": <the schedule's>}``. The ``@workflow(cron=...)`` schedules are
rows of the same kind, named after their workflow and marked
``from_code``: they are listed with these, paused, resumed, triggered and
backfilled alike, but changed only in the code (``create``, ``apply`` and
``delete`` refuse their names). Ticks are started by the worker loop and the
sweep (``django_rivet.workflows.scheduled``, one firing path for both
kinds).

These are plain database functions, each with an async twin (``acreate``,
``alist``...): a workflow calls them inside a step.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError

from .. import clock, crontab
from ..engine import WorkflowDefinition
from ..exceptions import ScheduleExists
from ..models import ScheduledWorkflow, db
from . import registry, scheduled
from .instance import WorkflowHandle
from .placement import placement

__all__ = [
    "WorkflowSchedule",
    "aapply",
    "abackfill",
    "acreate",
    "adelete",
    "aget",
    "alist",
    "apause",
    "apply",
    "aresume",
    "atrigger",
    "backfill",
    "create",
    "delete",
    "get",
    "list",
    "pause",
    "resume",
    "trigger",
]


@dataclass(frozen=True)
class WorkflowSchedule:
    """What ``get`` and ``list`` tell of a schedule."""

    name: str
    workflow_name: str
    cron: str
    tz: str
    context: Any
    queue: str | None
    catch_up: bool
    paused: bool
    from_code: bool
    next_tick_at: datetime
    last_tick_at: datetime | None
    last_workflow_id: str | None
    created_at: datetime
    updated_at: datetime


def _described(row: ScheduledWorkflow) -> WorkflowSchedule:
    return WorkflowSchedule(
        name=row.name,
        workflow_name=row.workflow_name or row.name,
        cron=row.expression,
        tz=row.timezone,
        context=row.context,
        queue=row.queue or None,
        catch_up=row.catch_up,
        paused=row.paused,
        from_code=row.from_code,
        next_tick_at=row.next_tick_at,
        last_tick_at=row.last_tick_at,
        last_workflow_id=row.last_workflow_id or None,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


# -- checking a schedule before it is written ------------------------------------------
_FIELDS = (
    "schedule_name",
    "workflow_name",
    "cron",
    "tz",
    "context",
    "queue",
    "catch_up",
)
_REQUIRED = ("schedule_name", "workflow_name", "cron")
MAX_NAME_LENGTH = 200


def _checked(
    schedule_name: Any,
    workflow_name: str | WorkflowDefinition,
    cron: Any,
    tz: Any,
    context: Any,
    queue: Any,
    catch_up: Any,
) -> tuple[dict[str, Any], datetime]:
    """Return a schedule's row fields and first tick, or raise what is wrong."""
    if not isinstance(schedule_name, str) or not 0 < len(schedule_name) <= (
        MAX_NAME_LENGTH
    ):
        raise ValueError(
            f"A schedule name is a string of 1-{MAX_NAME_LENGTH} characters, "
            f"not {schedule_name!r}"
        )
    if isinstance(workflow_name, WorkflowDefinition):
        workflow_name = workflow_name.name
    definition = registry.get(workflow_name)  # workflow/not_found
    if not isinstance(tz, str):
        raise TypeError(f"A schedule's tz is an IANA zone name, not {tz!r}")
    expression = " ".join(cron.split()) if isinstance(cron, str) else cron
    first = crontab.validate_cron(expression, tz, clock.now_datetime())
    try:
        context = json.loads(json.dumps(context))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"A schedule's context is stored as JSON; {context!r} is not: {exc}"
        ) from None
    if queue is not None:
        placement(queue)  # workflow/unknown_queue, partition_key_required
    fields = {
        "workflow_name": definition.name,
        "expression": expression,
        "timezone": tz,
        "context": context,
        "queue": queue or "",
        "catch_up": bool(catch_up),
    }
    return fields, first


def _refuse_code_names(names: Iterable[str]) -> None:
    """Refuse the names of the code's schedules (they follow the code)."""
    scheduled.sync()
    taken = set(
        ScheduledWorkflow.objects.filter(name__in=names, from_code=True).values_list(
            "name", flat=True
        )
    ) | (set(names) & set(scheduled.definitions()))
    if taken:
        name = sorted(taken)[0]
        raise ScheduleExists(
            f"Workflow schedule {name!r} comes from @workflow(cron=...): "
            "change it in the code",
            metadata={"schedule": name},
        )


# -- the front door --------------------------------------------------------------------
def create(
    schedule_name: str,
    workflow_name: str | WorkflowDefinition,
    cron: str,
    tz: str = "UTC",
    context: Any = None,
    queue: str | None = None,
    *,
    catch_up: bool = False,
) -> WorkflowSchedule:
    """Create the schedule ``schedule_name`` of ``workflow_name``; return it.

    ``cron`` is five cron fields (or ``@daily``...) read in ``tz``; its first
    tick is the first one after now. ``context`` (JSON) is handed to each
    tick's workflow; with ``queue`` ticks are started on that workflow queue.
    With ``catch_up`` the ticks missed while nothing ran each start their
    workflow (else they fold into one late tick).

    Raises ``workflow/schedule_exists`` for a name that is taken (by a
    schedule of either kind), ``workflow/not_found`` for an unknown
    workflow, ``actor/invalid_cron`` for an expression or zone that cannot
    be scheduled, ``workflow/unknown_queue`` for a queue not configured.
    """
    fields, first = _checked(
        schedule_name, workflow_name, cron, tz, context, queue, catch_up
    )
    _refuse_code_names([schedule_name])
    now = clock.now_datetime()
    try:
        with db.atomic():
            row = ScheduledWorkflow.objects.create(
                name=schedule_name,
                next_tick_at=first,
                created_at=now,
                updated_at=now,
                **fields,
                **scheduled.wake_for(first),
            )
    except IntegrityError:
        raise ScheduleExists(
            f"A workflow schedule named {schedule_name!r} exists already",
            metadata={"schedule": schedule_name},
        ) from None
    return _described(row)


def get(schedule_name: str) -> WorkflowSchedule | None:
    """Return the schedule ``schedule_name``, or ``None`` if there is none."""
    row = (
        ScheduledWorkflow.objects.filter(scheduled.live(scheduled.sync()))
        .filter(name=schedule_name)
        .first()
    )
    return None if row is None else _described(row)


def _any_of(value: str | Iterable[str]) -> builtins.list[str]:
    return [value] if isinstance(value, str) else builtins.list(value)


def list(  # noqa: A001 - the front door's name, as workflows.filter
    *,
    paused: bool | None = None,
    workflow_name: str | Iterable[str] | None = None,
    prefix: str | Iterable[str] | None = None,
    from_code: bool | None = None,
) -> builtins.list[WorkflowSchedule]:
    """Return the schedules of both kinds, by name; filters combine (AND).

    ``workflow_name`` and ``prefix`` (of the schedule's name) take one value
    or several (any of them).
    """
    rows = ScheduledWorkflow.objects.filter(scheduled.live(scheduled.sync()))
    if paused is not None:
        rows = rows.filter(paused=paused)
    if from_code is not None:
        rows = rows.filter(from_code=from_code)
    if workflow_name is not None:
        rows = rows.filter(workflow_name__in=_any_of(workflow_name))
    if prefix is not None:
        prefixes = _any_of(prefix)
        if not prefixes:
            return []
        matching = ScheduledWorkflow.objects.none()
        for each in prefixes:
            matching |= ScheduledWorkflow.objects.filter(name__startswith=each)
        rows = rows.filter(pk__in=matching.values("pk"))
    return [_described(row) for row in rows.order_by("name")]


def delete(schedule_name: str) -> bool:
    """Delete the schedule; return False if there was none.

    Its workflows stay. The schedules of ``@workflow(cron=...)`` are not
    deleted (``workflow/schedule_exists``): remove the ``cron=``.
    """
    _refuse_code_names([schedule_name])
    deleted, _ = ScheduledWorkflow.objects.filter(
        name=schedule_name, from_code=False
    ).delete()
    return bool(deleted)


def pause(schedule_name: str) -> bool:
    """Stop starting its ticks; return False if it was paused already."""
    return scheduled.pause(schedule_name)


def resume(schedule_name: str) -> bool:
    """Start its ticks again from the next one after now (the paused ones are
    not started); return False if it was not paused."""
    return scheduled.resume(schedule_name)


def trigger(schedule_name: str) -> WorkflowHandle:
    """Start its workflow now, as a tick at this second; return the handle.

    The id is ``"<schedule>@<now, to the second>"``; the input, context and
    queue are a tick's.
    """
    workflow_id = scheduled.trigger(schedule_name)
    row = ScheduledWorkflow.objects.get(name=schedule_name)
    return WorkflowHandle(workflow_id, row.workflow_name or row.name)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def backfill(
    schedule_name: str, start: datetime, end: datetime
) -> builtins.list[WorkflowHandle]:
    """Start the ticks from ``start`` to ``end``, both included; their handles.

    A datetime without a zone is UTC. Idempotent by id: a tick that has its
    workflow already is left alone (its handle is returned too). At most
    ``scheduled.MAX_BACKFILL`` ticks (``ValueError``).
    """
    ids, _ = scheduled.backfill_ids(schedule_name, _utc(start), _utc(end))
    row = ScheduledWorkflow.objects.get(name=schedule_name)
    return [WorkflowHandle(each, row.workflow_name or row.name) for each in ids]


def apply(schedules: Iterable[Mapping[str, Any]]) -> builtins.list[WorkflowSchedule]:
    """Create or replace these schedules in one transaction; return them.

    Each is a mapping of ``create``'s arguments (``schedule_name``,
    ``workflow_name``, ``cron``; optional ``tz``, ``context``, ``queue``,
    ``catch_up``). A schedule that exists keeps its paused state and its last
    tick, and its next tick unless its expression or zone changed; the
    schedules not named are left as they are. All are checked before any is
    written: one that is wrong (``ValueError`` for a missing or unknown
    field, else what ``create`` raises) changes nothing.
    """
    checked: builtins.list[tuple[str, dict[str, Any], datetime]] = []
    for spec in schedules:
        for field in _REQUIRED:
            if field not in spec:
                raise ValueError(f"A schedule is missing required field {field!r}")
        unknown = set(spec) - set(_FIELDS)
        if unknown:
            raise ValueError(f"Unknown schedule field(s): {', '.join(sorted(unknown))}")
        fields, first = _checked(
            spec["schedule_name"],
            spec["workflow_name"],
            spec["cron"],
            spec.get("tz", "UTC"),
            spec.get("context"),
            spec.get("queue"),
            spec.get("catch_up", False),
        )
        checked.append((spec["schedule_name"], fields, first))
    _refuse_code_names([name for name, _, _ in checked])
    now = clock.now_datetime()
    with db.atomic():
        for name, fields, first in checked:
            ScheduledWorkflow.objects.bulk_create(
                [
                    ScheduledWorkflow(
                        name=name,
                        next_tick_at=first,
                        created_at=now,
                        updated_at=now,
                        **fields,
                    )
                ],
                ignore_conflicts=True,
            )
            row = ScheduledWorkflow.objects.select_for_update().get(name=name)
            if row.from_code:
                raise ScheduleExists(
                    f"Workflow schedule {name!r} comes from @workflow(cron=...)",
                    metadata={"schedule": name},
                )
            changes = dict(fields, updated_at=now)
            if (row.expression, row.timezone) != (
                fields["expression"],
                fields["timezone"],
            ) or row.next_tick_at == first:
                changes.update(next_tick_at=first, **scheduled.wake_for(first))
            ScheduledWorkflow.objects.filter(name=name).update(**changes)
    return [
        _described(row)
        for row in ScheduledWorkflow.objects.filter(
            name__in=[name for name, _, _ in checked]
        ).order_by("name")
    ]


# -- the async twins -------------------------------------------------------------------
async def acreate(
    schedule_name: str,
    workflow_name: str | WorkflowDefinition,
    cron: str,
    tz: str = "UTC",
    context: Any = None,
    queue: str | None = None,
    *,
    catch_up: bool = False,
) -> WorkflowSchedule:
    """Async :func:`create`."""
    return await sync_to_async(create)(
        schedule_name, workflow_name, cron, tz, context, queue, catch_up=catch_up
    )


async def aget(schedule_name: str) -> WorkflowSchedule | None:
    """Async :func:`get`."""
    return await sync_to_async(get)(schedule_name)


async def alist(**filters: Any) -> builtins.list[WorkflowSchedule]:
    """Async :func:`list`."""
    return await sync_to_async(list)(**filters)


async def adelete(schedule_name: str) -> bool:
    """Async :func:`delete`."""
    return await sync_to_async(delete)(schedule_name)


async def apause(schedule_name: str) -> bool:
    """Async :func:`pause`."""
    return await sync_to_async(pause)(schedule_name)


async def aresume(schedule_name: str) -> bool:
    """Async :func:`resume`."""
    return await sync_to_async(resume)(schedule_name)


async def atrigger(schedule_name: str) -> WorkflowHandle:
    """Async :func:`trigger`."""
    return await sync_to_async(trigger)(schedule_name)


async def abackfill(
    schedule_name: str, start: datetime, end: datetime
) -> builtins.list[WorkflowHandle]:
    """Async :func:`backfill`."""
    return await sync_to_async(backfill)(schedule_name, start, end)


async def aapply(
    schedules: Iterable[Mapping[str, Any]],
) -> builtins.list[WorkflowSchedule]:
    """Async :func:`apply`."""
    return await sync_to_async(apply)(builtins.list(schedules))
