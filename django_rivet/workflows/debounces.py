"""Debounced starts: ``workflows.start(..., dedup_key=k, debounce=s)``.

A burst of starts of one ``dedup_key`` on one queue becomes one workflow,
which starts once ``debounce`` seconds passed without another start of that
key, with the latest input. The first start of a burst stores the workflow
``queued`` with ``run_after`` = now + ``debounce`` (``debounced``); each
later start of the key *bounces* it: its input is replaced and its
``run_after`` moved to now + that start's ``debounce`` -- never past the
burst's ``debounce_deadline`` (its first start + ``debounce_max``). Every
start of the burst returns that workflow's id. Admission starts it when
``run_after`` comes, as any delayed queued workflow, and clears its
``dedup_key`` (:meth:`~..models.sql.Dialect.admission_sql`): the next start
of the key begins a new burst, even while this one still runs.

A key held by a workflow that was not debounced, or by a workflow of
another name, is ``workflow/duplicate`` as for any start. The queue's
deduplication index decides between concurrent first starts: the one whose
insert is refused bounces the winner instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError
from django.db.models import F

from .. import clock
from ..engine import keys
from ..models import WORKFLOW_ACTIVE, Workflow, WorkflowKV, WorkflowStatus, db, sql
from . import queues
from .children import id_conflict
from .placement import Placement, duplicate_of, invalid

__all__ = ["bounce_or_create", "check", "debounce_seconds"]

# Rounds of "bounce the holder, else create": each one lost only to a
# concurrent start or admission of the same key, which changed the holder.
ATTEMPTS = 20


def debounce_seconds(value: float | timedelta | None, argument: str) -> float | None:
    """Return a ``debounce``/``debounce_max`` in seconds (a number or a
    timedelta); not a non-negative number is ``workflow/invalid_queue_args``."""
    if value is None:
        return None
    found = clock.as_seconds(value)
    # NaN compares false with everything: refused here.
    if found is None or not 0 <= found < float("inf"):
        raise invalid(f"{argument} is a number of seconds (or a timedelta)", argument)
    return found


def check(
    where: Placement | None,
    debounce: float | None,
    debounce_max: float | None,
    run_after: datetime | None,
) -> None:
    """Refuse a debounced start's misuses (``workflow/invalid_queue_args``)."""
    if debounce is None:
        if debounce_max is not None:
            raise invalid("debounce_max needs debounce=", "debounce_max")
        return
    if where is None or not where.dedup_key:
        raise invalid(
            "debounce needs a queue= and a dedup_key=: the burst is the starts "
            "of one dedup_key on one queue",
            "debounce",
        )
    if run_after is not None:
        raise invalid("debounce and run_after cannot be combined", "run_after")


def _run_after(now: datetime, debounce: float, deadline: datetime | None) -> datetime:
    due = clock.to_datetime(clock.to_timestamp(now) + debounce)
    return due if deadline is None else min(due, deadline)


def bounce_or_create(
    workflow_id: str,
    name: str,
    where: Placement,
    fields: dict[str, Any],
    encoded: bytes,
    debounce: float,
    debounce_max: float | None,
    create: Callable[[dict[str, Any]], str | None],
) -> str:
    """Bounce the burst's workflow, or start the burst; return the workflow id.

    ``fields`` are a new workflow's row fields, ``encoded`` its stored
    input; ``create(fields)`` creates the row and its input (in the
    caller's transaction) and returns the name of an existing workflow
    holding ``workflow_id`` (None: created).
    """
    for _ in range(ATTEMPTS):
        now = clock.now_datetime()
        with db.atomic():
            if sql.dialect(db.connection()).locks_by_writing_first:
                # SQLite: take the write lock before reading (as
                # operations._create_or_find does).
                Workflow.objects.filter(
                    queue=where.queue,
                    dedup_key=where.dedup_key,
                    status__in=WORKFLOW_ACTIVE,
                ).update(updated_at=F("updated_at"))
            holder = (
                Workflow.objects.filter(
                    queue=where.queue,
                    dedup_key=where.dedup_key,
                    status__in=WORKFLOW_ACTIVE,
                )
                .values("pk", "name", "debounced", "status", "run_after")
                .first()
            )
            if holder is not None:
                if not holder["debounced"] or holder["name"] != name:
                    raise _refused(where)
                if _bounce(holder, where, encoded, now, debounce):
                    return str(holder["pk"])
                continue  # admitted meanwhile: its key is free now
            deadline = (
                None
                if debounce_max is None
                else clock.to_datetime(clock.to_timestamp(now) + debounce_max)
            )
            due = _run_after(now, debounce, deadline)
            debounced = {
                **fields,
                "run_after": due,
                "debounced": True,
                "debounce_deadline": deadline,
                "deadline_at": _shift(fields.get("deadline_at"), now, due),
            }
            try:
                with db.atomic():
                    found = create(debounced)
            except IntegrityError:
                continue  # a concurrent first start won: bounce it
            if found is not None:
                if found != name:
                    raise id_conflict(workflow_id, found)
                return workflow_id  # idempotent per id, as any start
            queues.admit_when_due(where.queue, due)
            return workflow_id
    raise _refused(where)


def _refused(where: Placement) -> Exception:
    try:
        return duplicate_of(where, IntegrityError("the key is held"))
    except IntegrityError as error:  # its holder finished meanwhile
        return error


def _shift(
    deadline: datetime | None, old: datetime, new: datetime | None
) -> datetime | None:
    """Return the ``timeout`` deadline moved along with the start time: a
    debounced workflow's timeout counts from when it is due to start."""
    if deadline is None or new is None:
        return deadline
    return deadline + (new - old)


def _bounce(
    holder: Mapping[str, Any],
    where: Placement,
    encoded: bytes,
    now: datetime,
    debounce: float,
) -> bool:
    """Move the holder's start and replace its input; False if it was
    admitted (or bounced by another start) since it was read."""
    row = Workflow.objects.filter(
        pk=holder["pk"],
        status=WorkflowStatus.QUEUED,
        debounced=True,
        dedup_key=where.dedup_key,
        run_after=holder["run_after"],
    )
    found = row.values("debounce_deadline", "deadline_at").first()
    if found is None:
        return False
    due = _run_after(now, debounce, found["debounce_deadline"])
    # A new input, written without a lease: no cached history holds.
    moved: dict[str, Any] = {"run_after": due, "updated_at": now, "history_mark": ""}
    if found["deadline_at"] is not None and holder["run_after"] is not None:
        moved["deadline_at"] = _shift(found["deadline_at"], holder["run_after"], due)
    if not row.update(**moved):
        return False
    WorkflowKV.objects.filter(
        workflow_id=holder["pk"], key=keys.workflow_key(keys.WORKFLOW_INPUT)
    ).update(value=encoded)
    queues.admit_when_due(where.queue, due)
    return True
