"""``ctx.schedule`` and ``ctx.cron``: durable timers of an actor (SPEC 3.6).

Everything here writes in the invocation's transaction, so a rolled-back
action schedules nothing, and wake-ups (Celery ETA tasks, the embedded
worker) go out only after commit. Scheduled work always calls an action of
the same actor, through :mod:`django_rivet.scheduler`.
"""

from __future__ import annotations

import builtins
import math
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings

from .. import clock, cron, scheduler
from ..encoding import cbor_dumps
from ..exceptions import ActionNotFound, TooManySchedules
from ..models import CronJob, CronKind, CronRun, Schedule, ScheduleStatus

if TYPE_CHECKING:
    from .runtime import Invocation

__all__ = [
    "DEFAULT_MAX_HISTORY",
    "MAX_CRON_JOBS",
    "MAX_PENDING_SCHEDULES",
    "CronAPI",
    "ScheduleAPI",
]

MAX_PENDING_SCHEDULES = 1000
MAX_CRON_JOBS = 1000
DEFAULT_MAX_HISTORY = 100
MAX_HISTORY_LIMIT = 10000
CRON_NAME_MAX_LENGTH = 128


def _encode_call(invocation: Invocation, action: str, args: tuple[Any, ...]) -> bytes:
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
        data = _encode_call(self._invocation, action, args)
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
        enqueue = scheduler.within_eta_horizon(timestamp)
        row = Schedule.objects.create(
            actor_id=self._actor_id,
            action=action,
            args=data,
            run_at=clock.to_datetime(timestamp),
            enqueued=enqueue,
            created_at=clock.now_datetime(),
        )
        self._pending = pending + 1
        if enqueue or not scheduler.uses_celery():
            self._invocation.after_commit(scheduler.wake_schedule, row.id, timestamp)
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


def _job_info(job: CronJob) -> dict[str, Any]:
    return {
        "name": job.name,
        "kind": job.kind,
        "expression": job.expression or None,
        "interval": job.interval,
        "tz": job.timezone,
        "action": job.action,
        "args": job.decoded_args(),
        "max_history": job.max_history,
        "next_run_at": job.next_run_at,
        "running": job.running,
        "created_at": job.created_at,
    }


def _same_definition(job: CronJob, definition: dict[str, Any]) -> bool:
    return (
        job.kind == definition["kind"]
        and job.expression == definition["expression"]
        and job.interval == definition["interval"]
        and job.timezone == definition["timezone"]
        and job.action == definition["action"]
        and bytes(job.args) == definition["args"]
    )


def _check_max_history(max_history: int) -> int:
    if isinstance(max_history, bool) or not isinstance(max_history, int):
        raise TypeError("max_history is an integer")
    if not 0 <= max_history <= MAX_HISTORY_LIMIT:
        raise ValueError(f"max_history must be between 0 and {MAX_HISTORY_LIMIT}")
    return max_history


class CronAPI:
    """Named recurring jobs: cron expressions and fixed intervals."""

    def __init__(self, invocation: Invocation) -> None:
        self._invocation = invocation
        self._actor_id = invocation.actor_id

    def set(
        self,
        name: str,
        expression: str,
        action: str,
        *args: Any,
        tz: str | None = None,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> dict[str, Any]:
        """Create or update the job ``name``: call ``action`` on ``expression``.

        ``tz`` is an IANA zone name (default: ``settings.TIME_ZONE``).
        Setting a job again with the same definition keeps its next run, so
        it is safe to call from ``on_wake``; any change reschedules it.
        """
        zone_name = tz or getattr(settings, "TIME_ZONE", None) or "UTC"
        first = cron.validate_cron(expression, zone_name, clock.now_datetime())
        return self._save(
            name,
            action,
            args,
            max_history,
            {
                "kind": CronKind.CRON,
                "expression": " ".join(expression.split()),
                "interval": None,
                "timezone": zone_name,
            },
            first,
        )

    def every(
        self,
        name: str,
        interval: float | timedelta,
        action: str,
        *args: Any,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> dict[str, Any]:
        """Create or update the job ``name``: call ``action`` every ``interval``.

        The interval is at least 5 seconds; the first run is one interval
        after this call, and the cadence is anchored there (no drift).
        """
        seconds = cron.validate_interval(interval)
        first = clock.to_datetime(clock.now() + seconds)
        return self._save(
            name,
            action,
            args,
            max_history,
            {
                "kind": CronKind.EVERY,
                "expression": "",
                "interval": seconds,
                "timezone": "UTC",
            },
            first,
        )

    def _save(
        self,
        name: str,
        action: str,
        args: tuple[Any, ...],
        max_history: int,
        rule: dict[str, Any],
        first: datetime,
    ) -> dict[str, Any]:
        if not isinstance(name, str) or not 0 < len(name) <= CRON_NAME_MAX_LENGTH:
            raise ValueError(
                f"A cron job name is 1 to {CRON_NAME_MAX_LENGTH} characters"
            )
        data = _encode_call(self._invocation, action, args)
        max_history = _check_max_history(max_history)
        definition = {**rule, "action": action, "args": data}
        job = CronJob.objects.filter(actor_id=self._actor_id, name=name).first()
        now = clock.now_datetime()
        if job is not None and _same_definition(job, definition):
            if job.max_history != max_history:
                job.max_history = max_history
                job.save(update_fields=["max_history"])
                scheduler.trim_history(job.pk, max_history)
            return _job_info(job)
        if (
            job is None
            and CronJob.objects.filter(actor_id=self._actor_id).count() >= MAX_CRON_JOBS
        ):
            raise TooManySchedules(
                f"The actor has {MAX_CRON_JOBS} cron jobs; that is the limit",
                metadata={"limit": MAX_CRON_JOBS},
            )
        timestamp = clock.to_timestamp(first)
        enqueue = scheduler.within_eta_horizon(timestamp)
        fields = {
            **definition,
            "max_history": max_history,
            "next_run_at": first,
            "enqueued_for": first if enqueue else None,
            "updated_at": now,
        }
        if job is None:
            job = CronJob.objects.create(
                actor_id=self._actor_id, name=name, created_at=now, **fields
            )
        else:
            for key, value in fields.items():
                setattr(job, key, value)
            job.save(update_fields=list(fields))
            scheduler.trim_history(job.pk, max_history)
        if enqueue or not scheduler.uses_celery():
            self._invocation.after_commit(scheduler.wake_cron, job.pk, timestamp)
        return _job_info(job)

    def get(self, name: str) -> dict[str, Any] | None:
        """Return the job ``name`` as a dict, or ``None``."""
        job = CronJob.objects.filter(actor_id=self._actor_id, name=name).first()
        return _job_info(job) if job is not None else None

    def list(self) -> builtins.list[dict[str, Any]]:
        """Return this actor's jobs, by name."""
        jobs = CronJob.objects.filter(actor_id=self._actor_id).order_by("name")
        return [_job_info(job) for job in jobs]

    def delete(self, name: str) -> bool:
        """Delete the job ``name`` and its history; return whether it existed."""
        deleted, _ = CronJob.objects.filter(actor_id=self._actor_id, name=name).delete()
        return bool(deleted)

    def history(self, name: str, limit: int = 20) -> builtins.list[dict[str, Any]]:
        """Return the newest ``limit`` runs of the job ``name``, newest first.

        Entries: ``{action, scheduled_at, fired_at, finished_at, result,
        error}`` with ``result`` one of ``ok``, ``error``, ``skipped``.
        """
        runs = CronRun.objects.filter(
            job__actor_id=self._actor_id, job__name=name
        ).order_by("-id")[: max(int(limit), 0)]
        return [run.as_entry() for run in runs]

    async def aset(
        self,
        name: str,
        expression: str,
        action: str,
        *args: Any,
        tz: str | None = None,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> dict[str, Any]:
        """Async :meth:`set`."""
        return await sync_to_async(self.set)(
            name, expression, action, *args, tz=tz, max_history=max_history
        )

    async def aevery(
        self,
        name: str,
        interval: float | timedelta,
        action: str,
        *args: Any,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> dict[str, Any]:
        """Async :meth:`every`."""
        return await sync_to_async(self.every)(
            name, interval, action, *args, max_history=max_history
        )

    async def aget(self, name: str) -> dict[str, Any] | None:
        """Async :meth:`get`."""
        return await sync_to_async(self.get)(name)

    async def alist(self) -> builtins.list[dict[str, Any]]:
        """Async :meth:`list`."""
        return await sync_to_async(self.list)()

    async def adelete(self, name: str) -> bool:
        """Async :meth:`delete`."""
        return await sync_to_async(self.delete)(name)

    async def ahistory(
        self, name: str, limit: int = 20
    ) -> builtins.list[dict[str, Any]]:
        """Async :meth:`history`."""
        return await sync_to_async(self.history)(name, limit)
