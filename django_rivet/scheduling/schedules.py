"""One-shot schedules (SPEC 3.6): ``ctx.schedule`` and how schedules fire.

``ctx.schedule.after/at`` writes a ``Schedule`` row in the invocation's
transaction, so a rolled-back action schedules nothing; the dispatch backend
is woken only after commit. Firing follows :mod:`.claims`: claim the row,
then consume the claim and run the action in the actor's transaction.
"""

from __future__ import annotations

import builtins
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import clock, dispatch, observability
from ..actors.definition import Actor, HandlerSpec
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import ActionNotFound, TooManySchedules
from ..models import Schedule, ScheduleStatus
from .claims import (
    CLAIM_BATCH,
    Fired,
    Firing,
    claim_transaction,
    describe,
    fire,
    fired_by,
    skip_locked,
)

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "MAX_PENDING_SCHEDULES",
    "ScheduleAPI",
    "ScheduleClaim",
    "claim_schedules",
    "encode_call",
    "fire_claimed_schedule",
    "fire_due_schedules",
    "fire_schedule",
    "wake_schedule",
]

MAX_PENDING_SCHEDULES = 1000


def wake_schedule(schedule_id: uuid.UUID | str, run_at: float) -> None:
    """Make a schedule fire on time (a Celery ETA task, or the worker loop)."""
    dispatch.wake("fire_schedule", [str(schedule_id)], eta=run_at)


def encode_call(invocation: Invocation, action: str, args: tuple[Any, ...]) -> bytes:
    """Check that ``action`` exists and takes ``args``; return them as CBOR."""
    definition = invocation.definition
    spec = definition.actions.get(action) if isinstance(action, str) else None
    if spec is None:
        raise ActionNotFound(
            f"Actor {definition.name!r} has no action {action!r}",
            metadata={"action": action},
        )
    spec.check_args(list(args))
    return cbor_dumps(list(args))


def _schedule_info(row: Schedule) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "action": row.action,
        "args": row.decoded_args(),
        "run_at": row.run_at,
        "status": row.status,
        "created_at": row.created_at,
        "fired_at": row.fired_at,
        "finished_at": row.finished_at,
        "error": row.error or None,
    }


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


class ScheduleAPI:
    """One-shot schedules: call an action of this actor later."""

    def __init__(self, invocation: Invocation) -> None:
        self._invocation = invocation
        self._actor_id = invocation.actor_id
        # Pending count, read once per invocation: the actor row is locked,
        # so only this invocation changes it.
        self._pending: int | None = None

    def after(self, delay: float | timedelta, action: str, *args: Any) -> str:
        """Call ``action(*args)`` in ``delay`` seconds; return the schedule id."""
        if isinstance(delay, timedelta):
            seconds = delay.total_seconds()
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            seconds = float(delay)
        else:
            raise TypeError("delay is a number of seconds or a timedelta")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError("delay must be a finite number of seconds >= 0")
        return self._create(clock.now() + seconds, action, args)

    def at(self, when: datetime | float, action: str, *args: Any) -> str:
        """Call ``action(*args)`` at ``when`` (an aware datetime; naive is UTC).

        A time in the past fires as soon as possible.
        """
        if isinstance(when, datetime):
            timestamp = clock.to_timestamp(when)
        elif isinstance(when, int | float) and not isinstance(when, bool):
            timestamp = float(when)
        else:
            raise TypeError("when is a datetime or epoch seconds")
        return self._create(timestamp, action, args)

    def _create(self, timestamp: float, action: str, args: tuple[Any, ...]) -> str:
        data = encode_call(self._invocation, action, args)
        if self._pending is None:
            self._pending = (
                Schedule.objects.active().filter(actor_id=self._actor_id).count()
            )
        pending = self._pending
        if pending >= MAX_PENDING_SCHEDULES:
            raise TooManySchedules(
                f"The actor has {pending} pending schedules; the limit is "
                f"{MAX_PENDING_SCHEDULES}",
                metadata={"limit": MAX_PENDING_SCHEDULES},
            )
        enqueue = dispatch.within_eta_horizon(timestamp)
        row = Schedule.objects.create(
            actor_id=self._actor_id,
            action=action,
            args=data,
            run_at=clock.to_datetime(timestamp),
            enqueued=enqueue,
            created_at=clock.now_datetime(),
            traceparent=observability.traceparent(),
        )
        self._pending = pending + 1
        if enqueue or not dispatch.backend().eta_tasks:
            self._invocation.after_commit(wake_schedule, row.id, timestamp)
        return str(row.id)

    def cancel(self, schedule_id: uuid.UUID | str) -> bool:
        """Cancel a pending schedule; return whether one was cancelled."""
        pk = _as_uuid(schedule_id)
        if pk is None:
            return False
        deleted, _ = Schedule.objects.filter(
            pk=pk, actor_id=self._actor_id, status=ScheduleStatus.PENDING
        ).delete()
        if deleted and self._pending is not None:
            self._pending -= 1
        return bool(deleted)

    def get(self, schedule_id: uuid.UUID | str) -> dict[str, Any] | None:
        """Return a schedule of this actor as a dict, or ``None``.

        Keys: ``id, action, args, run_at, status`` (pending, running, done,
        error), ``created_at, fired_at, finished_at, error``. Fired schedules
        are kept for a day.
        """
        pk = _as_uuid(schedule_id)
        row = (
            Schedule.objects.filter(pk=pk, actor_id=self._actor_id).first()
            if pk is not None
            else None
        )
        return _schedule_info(row) if row is not None else None

    def list(self) -> builtins.list[dict[str, Any]]:
        """Return this actor's schedules that have not fired, by run time."""
        rows = Schedule.objects.active().filter(actor_id=self._actor_id)
        return [_schedule_info(row) for row in rows.order_by("run_at", "created_at")]

    async def aafter(self, delay: float | timedelta, action: str, *args: Any) -> str:
        """Async :meth:`after`."""
        return await sync_to_async(self.after)(delay, action, *args)

    async def aat(self, when: datetime | float, action: str, *args: Any) -> str:
        """Async :meth:`at`."""
        return await sync_to_async(self.at)(when, action, *args)

    async def acancel(self, schedule_id: uuid.UUID | str) -> bool:
        """Async :meth:`cancel`."""
        return await sync_to_async(self.cancel)(schedule_id)

    async def aget(self, schedule_id: uuid.UUID | str) -> dict[str, Any] | None:
        """Async :meth:`get`."""
        return await sync_to_async(self.get)(schedule_id)

    async def alist(self) -> builtins.list[dict[str, Any]]:
        """Async :meth:`list`."""
        return await sync_to_async(self.list)()


# -- firing ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScheduleClaim:
    """A schedule this process may fire."""

    id: uuid.UUID
    actor_id: uuid.UUID
    action: str
    args: bytes
    run_at: datetime
    token: uuid.UUID


def claim_schedules(
    *,
    due_before: datetime,
    ids: Iterable[uuid.UUID | str] | None = None,
    limit: int = CLAIM_BATCH,
) -> list[ScheduleClaim]:
    """Claim up to ``limit`` pending schedules due at ``due_before``."""
    token = uuid.uuid4()
    now = clock.now_datetime()
    due = Schedule.objects.due(due_before)
    if ids is not None:
        due = due.filter(id__in=list(ids))
    due = due.order_by("run_at")
    claimed = {
        "status": ScheduleStatus.RUNNING,
        "claim_token": token,
        "claimed_at": now,
    }
    with claim_transaction():
        if skip_locked():
            picked = list(
                due.select_for_update(skip_locked=True).values_list("id", flat=True)[
                    :limit
                ]
            )
            if not picked:
                return []
            Schedule.objects.filter(id__in=picked).update(**claimed)
        else:
            # SQLite: the write comes first and takes the database write lock,
            # so the subquery and the update see one snapshot.
            found = Schedule.objects.filter(
                id__in=due.values("id")[:limit], status=ScheduleStatus.PENDING
            ).update(**claimed)
            if not found:
                return []
        rows = Schedule.objects.filter(
            status=ScheduleStatus.RUNNING, claimed_at=now, claim_token=token
        ).values_list("id", "actor_id", "action", "args", "run_at")
        return [
            ScheduleClaim(id, actor_id, action, bytes(args), run_at, token)
            for id, actor_id, action, args, run_at in rows
        ]


class FireSchedule(Firing):
    """Operation: consume a schedule claim and run its action."""

    def __init__(self, claim: ScheduleClaim, fired_at: datetime) -> None:
        super().__init__(f"schedule {claim.action}")
        self.claim = claim
        self.fired_at = fired_at

    def find_handler(self, definition: type[Actor]) -> HandlerSpec | None:
        """Return the scheduled action."""
        return definition.actions.get(self.claim.action)

    def consume(self, invocation: Invocation) -> bool:
        """Mark the schedule done if our claim still holds it."""
        claim = self.claim
        return bool(
            Schedule.objects.filter(
                pk=claim.id, claim_token=claim.token, status=ScheduleStatus.RUNNING
            ).update(status=ScheduleStatus.DONE, fired_at=self.fired_at)
        )

    def arguments(self) -> list[Any]:
        """Return the arguments stored with the schedule."""
        return cbor_loads(self.claim.args) if self.claim.args else []

    def finish(self, invocation: Invocation, result: Any) -> None:
        """Record when the action finished."""
        Schedule.objects.filter(pk=self.claim.id).update(
            finished_at=clock.now_datetime()
        )


def fire_claimed_schedule(claim: ScheduleClaim) -> Fired:
    """Fire one claimed schedule through the invocation path."""
    fired_at = clock.now_datetime()

    def record_error(exc: BaseException) -> None:
        Schedule.objects.filter(
            pk=claim.id, claim_token=claim.token, status=ScheduleStatus.RUNNING
        ).update(
            status=ScheduleStatus.ERROR,
            fired_at=fired_at,
            finished_at=clock.now_datetime(),
            error=describe(exc),
        )

    def delete() -> None:
        Schedule.objects.filter(pk=claim.id, claim_token=claim.token).delete()

    return fire(
        claim.actor_id,
        FireSchedule(claim, fired_at),
        fired_by("schedule", str(claim.id), claim.action, claim.run_at, fired_at),
        what=f"schedule id={claim.id} action={claim.action}",
        on_error=record_error,
        on_gone=delete,
    )


def fire_schedule(schedule_id: uuid.UUID | str, *, force: bool = False) -> Fired:
    """Fire one schedule if it is due and nobody else has (the task entry).

    ``force=True`` fires a pending schedule now, whatever its time (the
    admin's "fire now").
    """
    now = clock.now_datetime()
    due_before = datetime.max.replace(tzinfo=now.tzinfo) if force else now
    claims = claim_schedules(due_before=due_before, ids=[schedule_id], limit=1)
    if not claims:
        row = (
            Schedule.objects.filter(pk=schedule_id, status=ScheduleStatus.PENDING)
            .values_list("run_at", flat=True)
            .first()
        )
        if row is not None and row > now:
            # Delivered early (clock skew, a redelivery): wait for its time.
            wake_schedule(schedule_id, clock.to_timestamp(row))
        return Fired.NOT_CLAIMED
    return fire_claimed_schedule(claims[0])


def fire_due_schedules(limit: int = 100, grace: float = 0.0) -> int:
    """Fire up to ``limit`` schedules due ``grace`` seconds ago; return how many."""
    done = 0
    while done < limit:
        before = clock.to_datetime(clock.now() - grace)
        claims = claim_schedules(
            due_before=before, limit=min(CLAIM_BATCH, limit - done)
        )
        if not claims:
            break
        for claim in claims:
            if fire_claimed_schedule(claim).ran:
                done += 1
    return done
