"""How one-shot schedules fire, fail, are retried and run again.

Firing follows :mod:`.claims`: claim the row, then consume the claim and run
the action in the actor's transaction. A failed attempt with retries left
(:mod:`.retries`) puts the row back to ``pending`` at a later ``run_at``;
one whose retries are spent is ``failed`` until :func:`retry_schedules`
(``ctx.schedule.retry``, the admin's "Retry now", ``rivet_retry``) makes it
pending again.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from django.db.models import F, QuerySet

from .. import clock, dispatch
from ..models import Schedule, ScheduleStatus, db
from .claims import (
    CLAIM_BATCH,
    Claim,
    Fired,
    Firing,
    claim_transaction,
    describe,
    next_attempt_at,
    release_failed,
    skip_locked,
    stored_args,
)

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "FireSchedule",
    "ScheduleClaim",
    "claim_schedules",
    "fire_claimed_schedule",
    "fire_due_schedules",
    "fire_schedule",
    "retry_schedules",
    "wake_schedule",
]


def wake_schedule(schedule_id: uuid.UUID | str, run_at: float) -> None:
    """Make a schedule fire on time (a Celery ETA task, or the worker loop)."""
    dispatch.wake("fire_schedule", [str(schedule_id)], eta=run_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleClaim(Claim):
    """A schedule this process may fire (its action is handler and name)."""

    model = Schedule
    held: ClassVar[Mapping[str, Any]] = {"status": ScheduleStatus.RUNNING}
    transport = work = "schedule"

    args: bytes
    max_retries: int | None = None  # None: follow SCHEDULE_MAX_RETRIES

    @property
    def work_id(self) -> str:
        """Return the schedule's id as text."""
        return str(self.id)


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
        "attempts": F("attempts") + 1,
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
        ).values_list(
            "id", "actor_id", "action", "args", "run_at", "attempts", "max_retries"
        )
        return [
            ScheduleClaim(
                id=pk,
                actor_id=actor_id,
                token=token,
                handler=action,
                name=action,
                scheduled_at=run_at,
                attempt=attempt,
                args=bytes(args),
                max_retries=max_retries,
            )
            for pk, actor_id, action, args, run_at, attempt, max_retries in rows
        ]


class FireSchedule(Firing[ScheduleClaim]):
    """Operation: consume a schedule claim and run its action."""

    @property
    def what(self) -> str:
        """Name the schedule and its action."""
        return f"schedule id={self.claim.id} action={self.claim.handler}"

    def consume(self, invocation: Invocation) -> bool:
        """Mark the schedule done if our claim still holds it."""
        return bool(
            self.claim.still_held().update(
                status=ScheduleStatus.DONE, fired_at=self.fired_at
            )
        )

    def arguments(self) -> list[Any]:
        """Return the arguments stored with the schedule."""
        return stored_args(self.claim.args)

    def finish(self, invocation: Invocation, result: Any) -> None:
        """Record when the action finished."""
        Schedule.objects.filter(pk=self.claim.id).update(
            finished_at=clock.now_datetime()
        )

    def record_error(self, exc: BaseException) -> bool:
        """Make the schedule pending again at its retry time, or failed."""
        claim = self.claim
        retry_at = next_attempt_at(exc, claim.attempt, claim.max_retries)
        retry = None
        wake = False
        if retry_at is not None:
            enqueue = dispatch.within_eta_horizon(retry_at)
            retry = {"run_at": clock.to_datetime(retry_at), "enqueued": enqueue}
            wake = enqueue or not dispatch.backend().eta_tasks
        with db.atomic():
            recorded = release_failed(
                claim, exc, retry, fired_at=self.fired_at, error=describe(exc)
            )
            if recorded and retry_at is not None and wake:
                due = retry_at
                db.on_commit(lambda: wake_schedule(claim.id, due), robust=True)
        return retry is None and recorded

    def forget(self) -> bool:
        """Delete the schedule: its action is gone."""
        claim = self.claim
        Schedule.objects.filter(pk=claim.id, claim_token=claim.token).delete()
        return True


def fire_claimed_schedule(claim: ScheduleClaim) -> Fired:
    """Fire one claimed schedule through the invocation path."""
    return FireSchedule(claim, clock.now_datetime()).fire()


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


def retry_schedules(schedules: QuerySet[Schedule] | Iterable[uuid.UUID]) -> int:
    """Make the failed schedules of ``schedules`` pending again, due now.

    ``schedules`` is a queryset (or ids). Attempts start over;
    returns how many were retried. The ``rivet_retry`` command, the admin's
    "Retry now" and ``ctx.schedule.retry`` use it.
    """
    if not isinstance(schedules, QuerySet):
        schedules = Schedule.objects.filter(pk__in=list(schedules))
    now = clock.now_datetime()
    enqueue = dispatch.within_eta_horizon(clock.now())
    with db.atomic():
        ids = list(
            schedules.filter(status=ScheduleStatus.FAILED).values_list("id", flat=True)
        )
        retried = Schedule.objects.filter(
            pk__in=ids, status=ScheduleStatus.FAILED
        ).update(
            status=ScheduleStatus.PENDING,
            run_at=now,
            attempts=0,
            enqueued=enqueue,
            fired_at=None,
            finished_at=None,
            error="",
            traceback="",
        )
        for schedule_id in ids:
            db.on_commit(
                functools.partial(wake_schedule, schedule_id, clock.to_timestamp(now)),
                robust=True,
            )
    return retried
