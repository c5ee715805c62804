"""One-shot schedules: ``ctx.schedule`` and how they fire (docs/scheduling.md).

``ctx.schedule.after/at`` writes a ``Schedule`` row in the invocation's
transaction, so a rolled-back action schedules nothing; the dispatch backend
is woken only after commit. How schedules fire, fail, are retried and are
run again from ``failed`` is :mod:`.schedule_runs`.
"""

from __future__ import annotations

import builtins
import math
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import clock, dispatch, observability
from ..encoding import cbor_dumps
from ..exceptions import ActionNotFound, TooManySchedules
from ..models import Schedule, ScheduleStatus
from . import retries
from .schedule_runs import retry_schedules, wake_schedule

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "MAX_PENDING_SCHEDULES",
    "ActorSchedules",
    "encode_call",
]

MAX_PENDING_SCHEDULES = 1000


def encode_call(invocation: Invocation, action: str, args: tuple[Any, ...]) -> bytes:
    """Check that ``action`` exists and takes ``args``; return them as CBOR."""
    definition = invocation.definition
    spec = definition.actions.get(action) if isinstance(action, str) else None
    if spec is None:
        raise ActionNotFound(
            f"Actor {definition.name!r} has no action {action!r}",
            metadata={"action": action},
        )
    # Typed arguments are stored as the wire carries them, checked now
    # against the action's annotations (request/invalid_args).
    stored = spec.wire_args(list(args))
    spec.arguments(stored)
    return cbor_dumps(stored, "args")


def _schedule_info(row: Schedule) -> dict[str, Any]:
    failed = row.status == ScheduleStatus.FAILED
    return {
        "id": str(row.id),
        "action": row.action,
        "args": row.decoded_args(),
        "run_at": row.run_at,
        "status": row.status,
        "created_at": row.created_at,
        "fired_at": row.fired_at,
        "finished_at": row.finished_at,
        "error": (row.error or None) if failed else None,
        "attempts": row.attempts,
        "max_retries": retries.retries_allowed(row.max_retries),
        "last_error": row.error or None,
    }


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


class ActorSchedules:
    """``ctx.schedule`` (:class:`~django_rivet.actors.services.ScheduleAPI`).

    One-shot schedules: call an action of this actor later.
    """

    def __init__(self, invocation: Invocation) -> None:
        self._invocation = invocation
        self._actor_id = invocation.actor_id
        # Pending count, read once per invocation: the actor row is locked,
        # so only this invocation changes it.
        self._pending: int | None = None

    def after(
        self,
        delay: float | timedelta,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Call ``action(*args)`` in ``delay`` seconds; return the schedule id.

        A failing action is tried again up to ``max_retries`` times (default
        ``RIVET["SCHEDULE_MAX_RETRIES"]``; 0: never retried).
        """
        seconds = clock.as_seconds(delay)
        if seconds is None:
            raise TypeError("delay is a number of seconds or a timedelta")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError("delay must be a finite number of seconds >= 0")
        return self._create(clock.now() + seconds, action, args, max_retries)

    def at(
        self,
        when: datetime | float,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Call ``action(*args)`` at ``when`` (an aware datetime; naive is UTC).

        A time in the past fires as soon as possible; ``max_retries`` is as
        in :meth:`after`.
        """
        if isinstance(when, datetime):
            timestamp = clock.to_timestamp(when)
        elif isinstance(when, int | float) and not isinstance(when, bool):
            timestamp = float(when)
        else:
            raise TypeError("when is a datetime or epoch seconds")
        return self._create(timestamp, action, args, max_retries)

    def _create(
        self,
        timestamp: float,
        action: str,
        args: tuple[Any, ...],
        max_retries: int | None,
    ) -> str:
        max_retries = retries.check_max_retries(max_retries)
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
            max_retries=max_retries,
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

    def retry(self, schedule_id: uuid.UUID | str) -> bool:
        """Run a failed schedule of this actor again now (attempts start over).

        Returns False unless the schedule is ``failed``.
        """
        pk = _as_uuid(schedule_id)
        if pk is None:
            return False
        retried = retry_schedules(
            Schedule.objects.filter(pk=pk, actor_id=self._actor_id)
        )
        if retried and self._pending is not None:
            self._pending += 1
        return bool(retried)

    def get(self, schedule_id: uuid.UUID | str) -> dict[str, Any] | None:
        """Return a schedule of this actor as a dict, or ``None``.

        Keys: ``id, action, args, run_at, status`` (pending, running, done,
        failed), ``created_at, fired_at, finished_at``, ``error`` (the last
        error of a failed one), ``attempts`` (so far), ``max_retries``,
        ``last_error`` (of the last failed attempt, also while a retry
        waits). Fired schedules are kept for ``SCHEDULE_RETENTION``.
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

    async def aafter(
        self,
        delay: float | timedelta,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Async :meth:`after`."""
        return await sync_to_async(self.after)(
            delay, action, *args, max_retries=max_retries
        )

    async def aat(
        self,
        when: datetime | float,
        action: str,
        *args: Any,
        max_retries: int | None = None,
    ) -> str:
        """Async :meth:`at`."""
        return await sync_to_async(self.at)(
            when, action, *args, max_retries=max_retries
        )

    async def aretry(self, schedule_id: uuid.UUID | str) -> bool:
        """Async :meth:`retry`."""
        return await sync_to_async(self.retry)(schedule_id)

    async def acancel(self, schedule_id: uuid.UUID | str) -> bool:
        """Async :meth:`cancel`."""
        return await sync_to_async(self.cancel)(schedule_id)

    async def aget(self, schedule_id: uuid.UUID | str) -> dict[str, Any] | None:
        """Async :meth:`get`."""
        return await sync_to_async(self.get)(schedule_id)

    async def alist(self) -> builtins.list[dict[str, Any]]:
        """Async :meth:`list`."""
        return await sync_to_async(self.list)()
