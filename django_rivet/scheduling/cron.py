"""Recurring jobs: ``ctx.cron`` and the timing of their runs (docs/scheduling.md).

``ctx.cron.set/every`` writes a ``CronJob`` in the invocation's transaction;
``next_run_at`` is the source of truth for when it runs next, moved forward
by compare-and-set (:func:`advance`) so concurrent firers never run one
occurrence twice. Runs themselves fire in :mod:`.cron_runs`; the timing
rules are in :mod:`.crontab`.
"""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings

from .. import clock, crontab, dispatch
from ..conf import MAX_CRON_HISTORY, rivet_settings
from ..exceptions import TooManySchedules
from ..models import CronJob, CronKind, CronRun, CronRunResult, db
from . import retries
from .schedules import encode_call

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "MAX_CRON_JOBS",
    "MAX_HISTORY_LIMIT",
    "ActorCron",
    "advance",
    "history_limit",
    "next_run_time",
    "record_skipped",
    "skip_overdue",
    "trim_history",
    "wake_cron",
]

MAX_CRON_JOBS = 1000
# One bound for RIVET["CRON_HISTORY"] and for each job's max_history.
MAX_HISTORY_LIMIT = MAX_CRON_HISTORY
CRON_NAME_MAX_LENGTH = 128


def wake_cron(job_id: int, next_run_at: float) -> None:
    """Make a cron job's next run fire on time."""
    dispatch.wake("run_cron", [job_id, next_run_at], eta=next_run_at)


def next_run_time(job: CronJob, scheduled: datetime, now: datetime) -> datetime:
    """Return the run of ``job`` after ``scheduled``, coalescing missed ones."""
    if job.kind == CronKind.EVERY:
        assert job.interval is not None
        return crontab.next_every_time(scheduled, job.interval, now)
    return crontab.next_cron_time(job.expression, job.timezone, max(scheduled, now))


def history_limit(max_history: int | None) -> int | None:
    """Return how many runs a job keeps (``None``: all of them).

    A job set without ``max_history`` follows ``RIVET["CRON_HISTORY"]``, read
    now, so changing the setting applies to it from its next run.
    """
    if max_history is not None:
        return max_history
    return rivet_settings.CRON_HISTORY


def trim_history(job_id: int, keep: int | None) -> None:
    """Delete all but the newest ``keep`` history entries of a job."""
    if keep is None:
        return
    boundary = list(
        CronRun.objects.filter(job_id=job_id)
        .order_by("-id")
        .values_list("id", flat=True)[keep : keep + 1]
    )
    if boundary:
        CronRun.objects.filter(job_id=job_id, id__lte=boundary[0]).delete()


def advance(
    job: CronJob,
    observed: datetime,
    following: datetime,
    where: dict[str, Any] | None = None,
    **changes: Any,
) -> bool:
    """Move ``next_run_at`` from ``observed`` to ``following`` (compare-and-set).

    Sends the Celery task for ``following`` after commit when it is near.
    """
    enqueue = dispatch.within_eta_horizon(clock.to_timestamp(following))
    updated = CronJob.objects.filter(
        pk=job.pk, next_run_at=observed, **(where or {})
    ).update(
        next_run_at=following,
        enqueued_for=following if enqueue else None,
        updated_at=clock.now_datetime(),
        **changes,
    )
    if updated and enqueue:
        db.on_commit(
            lambda: wake_cron(job.pk, clock.to_timestamp(following)), robust=True
        )
    return bool(updated)


def record_skipped(job: CronJob, scheduled: datetime) -> None:
    CronRun.objects.create(
        job_id=job.pk,
        action=job.action,
        scheduled_at=scheduled,
        result=CronRunResult.SKIPPED,
    )


def skip_overdue(job_id: int, claimed_at: datetime | None = None) -> int:
    """Record runs that fell due while a run held the job as skipped.

    Called in the transaction that ends a run (claimed at ``claimed_at``);
    returns how many were skipped. A run already due when it was claimed
    (behind a late retry) did not overlap it: it runs next, late.
    """
    job = CronJob.objects.filter(pk=job_id).first()
    now = clock.now_datetime()
    if job is None or job.next_run_at > now:
        return 0
    if claimed_at is not None and job.next_run_at <= claimed_at:
        return 0
    observed = job.next_run_at
    following = next_run_time(job, observed, now)
    if not advance(job, observed, following):
        return 0
    skipped = 0
    scheduled = observed
    # Older entries would be trimmed right away; don't write them.
    keep = history_limit(job.max_history)
    bound = MAX_HISTORY_LIMIT if keep is None else max(keep, 1)
    while scheduled < following and skipped < bound:
        record_skipped(job, scheduled)
        skipped += 1
        scheduled = next_run_time(job, scheduled, scheduled)
    return skipped


# -- ctx.cron --------------------------------------------------------------------
def _job_info(job: CronJob) -> dict[str, Any]:
    return {
        "name": job.name,
        "kind": job.kind,
        "expression": job.expression or None,
        "interval": job.interval,
        "tz": job.timezone,
        "action": job.action,
        "args": job.decoded_args(),
        "max_history": history_limit(job.max_history),
        "next_run_at": job.next_run_at,
        "running": job.running,
        "created_at": job.created_at,
        "max_retries": retries.retries_allowed(job.max_retries),
        "retry_at": job.retry_at,
    }


def _same_definition(job: CronJob, definition: dict[str, Any]) -> bool:
    return bool(
        job.kind == definition["kind"]
        and job.expression == definition["expression"]
        and job.interval == definition["interval"]
        and job.timezone == definition["timezone"]
        and job.action == definition["action"]
        and bytes(job.args) == definition["args"]
    )


class ActorCron:
    """``ctx.cron`` (:class:`~django_rivet.actors.services.CronAPI`).

    Named recurring jobs: cron expressions and fixed intervals.
    """

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
        max_history: int | None = None,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Create or update the job ``name``: call ``action`` on ``expression``.

        ``tz`` is an IANA zone name (default: ``settings.TIME_ZONE``).
        Setting a job again with the same definition keeps its next run, so
        it is safe to call from ``on_wake``; any change reschedules it.
        ``max_history`` runs are kept (0-10000; ``None`` follows
        ``RIVET["CRON_HISTORY"]``). A failing run is retried up to
        ``max_retries`` times (default ``RIVET["SCHEDULE_MAX_RETRIES"]``),
        each retry before the next run is due.
        """
        zone_name = tz or getattr(settings, "TIME_ZONE", None) or "UTC"
        first = crontab.validate_cron(expression, zone_name, clock.now_datetime())
        return self._save(
            name,
            action,
            args,
            (max_history, max_retries),
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
        max_history: int | None = None,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Create or update the job ``name``: call ``action`` every ``interval``.

        The interval is at least 5 seconds; the first run is one interval
        after this call, and the cadence is anchored there (no drift).
        ``max_history`` and ``max_retries`` are as in :meth:`set`.
        """
        seconds = crontab.validate_interval(interval)
        first = clock.to_datetime(clock.now() + seconds)
        return self._save(
            name,
            action,
            args,
            (max_history, max_retries),
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
        options: tuple[int | None, int | None],
        rule: dict[str, Any],
        first: datetime,
    ) -> dict[str, Any]:
        # NUL: PostgreSQL text cannot hold it (a 500 instead of this error).
        if (
            not isinstance(name, str)
            or not 0 < len(name) <= CRON_NAME_MAX_LENGTH
            or "\x00" in name
        ):
            raise ValueError(
                f"A cron job name is 1 to {CRON_NAME_MAX_LENGTH} characters, no NUL"
            )
        data = encode_call(self._invocation, action, args)
        max_history = retries.check_count(options[0], "max_history", MAX_HISTORY_LIMIT)
        max_retries = retries.check_max_retries(options[1])
        definition = {**rule, "action": action, "args": data}
        job = CronJob.objects.filter(actor_id=self._actor_id, name=name).first()
        now = clock.now_datetime()
        if job is not None and _same_definition(job, definition):
            if (job.max_history, job.max_retries) != (max_history, max_retries):
                job.max_history = max_history
                job.max_retries = max_retries
                job.save(update_fields=["max_history", "max_retries"])
                trim_history(job.pk, history_limit(max_history))
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
        enqueue = dispatch.within_eta_horizon(timestamp)
        fields = {
            **definition,
            "max_history": max_history,
            "max_retries": max_retries,
            "next_run_at": first,
            "enqueued_for": first if enqueue else None,
            "updated_at": now,
            # A new rule drops a retry the old one was waiting for.
            "retry_at": None,
            "retry_for": None,
            "attempts": 0,
        }
        if job is None:
            job = CronJob.objects.create(
                actor_id=self._actor_id, name=name, created_at=now, **fields
            )
        else:
            for key, value in fields.items():
                setattr(job, key, value)
            job.save(update_fields=list(fields))
            trim_history(job.pk, history_limit(max_history))
        if enqueue or not dispatch.backend().eta_tasks:
            self._invocation.after_commit(wake_cron, job.pk, timestamp)
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
        error, attempts}`` with ``result`` one of ``ok``, ``error``,
        ``skipped``; ``attempts`` is how many times the run was tried (0 for
        a skipped one).
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
        max_history: int | None = None,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Async :meth:`set`."""
        return await sync_to_async(self.set)(
            name,
            expression,
            action,
            *args,
            tz=tz,
            max_history=max_history,
            max_retries=max_retries,
        )

    async def aevery(
        self,
        name: str,
        interval: float | timedelta,
        action: str,
        *args: Any,
        max_history: int | None = None,
        max_retries: int | None = None,
    ) -> dict[str, Any]:
        """Async :meth:`every`."""
        return await sync_to_async(self.every)(
            name,
            interval,
            action,
            *args,
            max_history=max_history,
            max_retries=max_retries,
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
