"""Parents and children on the ``Workflow`` table.

What the engine's child entries need from the database (:class:`DjangoDriver`
calls :func:`create_child` and :func:`outcome`), and what ending a workflow
does for its family: :func:`notify_parent` wakes a parent waiting for the
child that just ended (the name ``child:<id>`` in its ``waiting_for``). The
cancel cascade is :mod:`.cancels`'.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db.models import F

from .. import clock
from ..engine import ChildOutcome, ChildStart, keys, schema
from ..engine.values import child_wake_name
from ..exceptions import WorkflowIdConflict, WorkflowNotFound
from ..models import (
    WORKFLOW_ACTIVE,
    WORKFLOW_FINISHED,
    Workflow,
    WorkflowKV,
    WorkflowStatus,
    db,
    sql,
)
from . import live, queues, registry, versions
from .placement import create_placed, placement
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "ChildMethods",
    "create_child",
    "deadline_for",
    "id_conflict",
    "notify_parent",
    "notify_waiters",
    "outcome",
    "start_fields",
    "watch",
]


def deadline_for(timeout: float | None, now: float) -> datetime | None:
    """Return the deadline of a workflow started at ``now`` with ``timeout``."""
    if timeout is None:
        return None
    return clock.to_datetime(now + float(timeout))


def start_fields(
    name: str, timeout: float | None, now: datetime, version: str | None = None
) -> dict[str, Any]:
    """Return the fields of a new workflow row: pending, due ``now``, on
    application ``version`` (default: this process's, versions.py)."""
    return {
        "name": name,
        "version": versions.resolved(version),
        "status": WorkflowStatus.PENDING,
        "wake_at": now,
        "created_at": now,
        "updated_at": now,
        "deadline_at": deadline_for(timeout, clock.now()),
    }


def create_child(start: ChildStart) -> None:
    """Create the child row unless it exists (call in a transaction).

    Idempotent per id (an id is an idempotency key, as in DBOS): an existing
    workflow of the same name is the child, whoever started it -- a parent
    waiting for one it did not start is woken when it ends too. An id held
    by a workflow of another name is ``workflow/id_conflict``; an unknown
    workflow name ``workflow/not_found``. Unless detached, a new child's
    deadline is never later than its parent's.
    """
    definition = registry.get(start.workflow)
    queued = start.queued or {}
    where = placement(
        queued.get("queue"),
        queued.get("priority", 0),
        queued.get("dedup_key"),
        queued.get("partition_key"),
    )
    encoded = schema.encode_workflow_field(keys.WORKFLOW_INPUT, start.input)
    timeout = definition.timeout if start.timeout is None else start.timeout
    now = clock.now_datetime()
    fields = start_fields(definition.name, timeout, now)
    if not start.detached:
        fields["deadline_at"] = _within_parent(start.parent_id, fields["deadline_at"])
    placed = wake_fields(now) if where is None else where.fields()
    row, created = create_placed(
        where,
        lambda: Workflow.objects.get_or_create(
            id=start.child_id,
            defaults={
                **fields,
                "parent_id": start.parent_id,
                "detached": start.detached,
                **placed,
            },
        ),
    )
    if not created:
        if row.name != definition.name:
            raise id_conflict(start.child_id, row.name)
        if row.parent_id != start.parent_id:
            _await(start.child_id, start.parent_id)
        return
    WorkflowKV.objects.create(
        workflow=row, key=keys.workflow_key(keys.WORKFLOW_INPUT), value=encoded
    )
    if where is None:
        schedule_wake(start.child_id, now)
    else:
        queues.admit_on_commit(where.queue)  # after the parent's write commits
    logger.info(
        "workflow child started workflow=%s parent=%s name=%s",
        start.child_id,
        start.parent_id,
        definition.name,
    )


def id_conflict(workflow_id: str, name: str) -> WorkflowIdConflict:
    """Return the error of an id already used by a ``name`` workflow."""
    return WorkflowIdConflict(
        f"Workflow id {workflow_id!r} is already used by a {name!r} workflow",
        metadata={"workflow_id": workflow_id, "name": name},
    )


def _within_parent(parent_id: str, deadline: datetime | None) -> datetime | None:
    """Return ``deadline``, or the parent's deadline when that comes first."""
    found = Workflow.objects.filter(pk=parent_id).values_list("deadline_at").first()
    inherited = None if found is None else found[0]
    if inherited is None or (deadline is not None and deadline <= inherited):
        return deadline
    return inherited


def watch(waiter_id: str, workflow_ids: list[str]) -> None:
    """Record that ``waiter_id`` waits for each of ``workflow_ids`` (a
    ``ctx.wait_first``): their ends wake it, its children or not.

    Call in a transaction. An id no workflow has is ``workflow/not_found``.
    """
    found = dict(
        Workflow.objects.filter(pk__in=workflow_ids).values_list("pk", "parent_id")
    )
    for workflow_id in workflow_ids:
        if workflow_id not in found:
            raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
        if found[workflow_id] != waiter_id:
            _await(workflow_id, waiter_id)


def _await(workflow_id: str, waiter_id: str) -> None:
    """Record that ``waiter_id`` waits for ``workflow_id`` (not its parent)."""
    rows = Workflow.objects.filter(pk=workflow_id)
    if sql.dialect(db.connection()).skip_locked:
        rows = rows.select_for_update()  # concurrent waiters add in turn
    waiting = list(rows.values_list("awaited_by", flat=True).get() or [])
    if waiter_id not in waiting:
        rows.update(awaited_by=[*waiting, waiter_id])


def outcome(child_id: str) -> ChildOutcome | None:
    """Return how the child ended, or None while it is active."""
    found = (
        Workflow.objects.filter(pk=child_id)
        .values_list("status", "finished_at")
        .first()
    )
    if found is None:
        # Purged by retention (it ended long ago) or never created.
        return ChildOutcome(
            "failed",
            error={
                "name": "WorkflowNotFound",
                "message": f"No workflow has id {child_id!r}",
            },
        )
    status, finished_at = found
    if status not in WORKFLOW_FINISHED:
        return None
    wanted = [
        keys.workflow_key(keys.WORKFLOW_OUTPUT),
        keys.workflow_key(keys.WORKFLOW_ERROR),
    ]
    fields: dict[int, Any] = {}
    for key, value in WorkflowKV.objects.filter(
        workflow_id=child_id, key__in=wanted
    ).values_list("key", "value"):
        field_id = keys.unpack(bytes(key))[1]
        fields[field_id] = schema.decode_workflow_field(field_id, bytes(value))
    return ChildOutcome(
        str(status),
        output=fields.get(keys.WORKFLOW_OUTPUT),
        error=fields.get(keys.WORKFLOW_ERROR),
        finished_at=0.0 if finished_at is None else clock.to_timestamp(finished_at),
    )


def notify_waiters(
    workflow_id: str, parent_id: str, awaited_by: list[Any] | None = None
) -> None:
    """Wake the parent and the other workflows waiting for ``workflow_id``.

    Call when it ends, in the transaction that records it. ``awaited_by``:
    its waiters as the transaction read them already (None: read them here).
    """
    notify_parent(workflow_id, parent_id)
    if awaited_by is None:
        waiting = Workflow.objects.filter(pk=workflow_id).values_list("awaited_by")
        found = waiting.first()
        awaited_by = (found[0] if found else None) or []
    for waiter_id in awaited_by:
        notify_parent(workflow_id, str(waiter_id))


def notify_parent(child_id: str, parent_id: str) -> None:
    """Wake ``parent_id`` if it waits for ``child_id`` (call when the child ends).

    The signal bump comes first, as for a message: a parent run releasing
    concurrently sees it and runs again.
    """
    if not parent_id:
        return
    name = child_wake_name(child_id)
    now = clock.now_datetime()
    rows = Workflow.objects.filter(pk=parent_id)
    if not rows.update(wake_signal=F("wake_signal") + 1):
        return
    live.signal_on_commit(parent_id, name)  # a live run of it, in this process
    status, waiting_for = rows.values_list("status", "waiting_for").get()
    if status in WORKFLOW_ACTIVE and name in (waiting_for or []):
        rows.update(wake_at=now, **wake_fields(now))
        schedule_wake(parent_id, now)


class ChildMethods:
    """The engine's child methods, for a driver of one workflow.

    The driver provides ``workflow_id``, ``_db`` (where database work runs)
    and ``_write`` (a fenced write).
    """

    workflow_id: str
    _db: Callable[..., Any]
    _write: Callable[..., Any]

    async def start_child(self, start: ChildStart) -> None:
        """Create the child's row (idempotent per id) in a fenced transaction.

        Its first run is enqueued when that transaction commits. An id held
        by another workflow (``ValueError``) or an unknown name
        (``workflow/not_found``) is the parent's failure, not storage trouble.
        """
        await self._db(self._write, functools.partial(create_child, start))

    async def watch_children(self, child_ids: list[str]) -> None:
        """Have the ends of ``child_ids`` wake this workflow (``ctx.wait_first``)."""
        await self._db(
            self._write, functools.partial(watch, self.workflow_id, child_ids)
        )

    async def child_outcome(self, child_id: str) -> ChildOutcome | None:
        """Return how the child ended, or None while it is active."""
        return await self._db(outcome, child_id)  # type: ignore[no-any-return]
