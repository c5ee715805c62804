"""Cron runs: claim a job's due run, run its action, record the history.

See :mod:`.claims` for the protocol every firing follows. A run that falls
due while the previous one still runs is recorded as ``skipped``; runs
missed while nothing fired are folded into one late run.

A failed run with retries left (:mod:`.retries`) waits on the job
(``retry_at``, ``retry_for``) and is retried before the next run is due: a
retry that would not be is given up, so retries never push into or overlap
the next run, and the run is recorded once, with its attempts, when it
succeeds or fails for good.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from django.db.models import F

from .. import clock
from ..models import CronJob, CronRun, CronRunResult, db
from . import retries
from .claims import (
    Claim,
    ClaimLost,
    Fired,
    Firing,
    claim_transaction,
    describe,
    next_attempt_at,
    stored_args,
)
from .cron import (
    advance,
    history_limit,
    next_run_time,
    record_skipped,
    skip_overdue,
    trim_history,
    wake_cron,
)

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "CronClaim",
    "RunCron",
    "claim_cron",
    "fire_claimed_cron",
    "run_cron",
    "run_cron_job",
    "run_due_cron",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class CronClaim(Claim):
    """A cron run this process may fire.

    ``id`` and ``name`` are its job's, ``handler`` the job's action.
    """

    # The job stays visibly running while its claimed run runs.
    model = CronJob
    held: ClassVar[Mapping[str, Any]] = {"running": True}
    transport = work = "cron"

    args: bytes
    max_history: int | None  # None: follow RIVET["CRON_HISTORY"]
    max_retries: int | None = None  # None: follow SCHEDULE_MAX_RETRIES
    claimed_at: datetime | None = None


def _claim_of(
    job: CronJob, scheduled_at: datetime, token: uuid.UUID, attempt: int, now: datetime
) -> CronClaim:
    """Return the claim of ``job``'s run due at ``scheduled_at``."""
    return CronClaim(
        id=job.pk,
        actor_id=job.actor_id,
        token=token,
        handler=job.action,
        name=job.name,
        scheduled_at=scheduled_at,
        attempt=attempt,
        args=bytes(job.args),
        max_history=job.max_history,
        max_retries=job.max_retries,
        claimed_at=now,
    )


def _claim_retry(job: CronJob, now: datetime) -> CronClaim | Fired:
    """Claim the retry of a failed run that waits on ``job``."""
    assert job.retry_at is not None and job.retry_for is not None
    token = uuid.uuid4()
    with claim_transaction():
        claimed = CronJob.objects.filter(
            pk=job.pk, retry_at=job.retry_at, running=False
        ).update(
            running=True,
            running_for=job.retry_for,
            claim_token=token,
            claimed_at=now,
            retry_at=None,
            attempts=F("attempts") + 1,
        )
    if not claimed:
        return Fired.NOT_CLAIMED
    return _claim_of(job, job.retry_for, token, job.attempts + 1, now)


def claim_cron(job: CronJob) -> CronClaim | Fired:
    """Claim the due run (or retry) of ``job``; skip a run overlapping one."""
    now = clock.now_datetime()
    if job.retry_at is not None and job.retry_at <= now:
        # Retries are due before the next run by construction: take it first.
        return _claim_retry(job, now)
    scheduled = job.next_run_at
    if scheduled > now:
        return Fired.NOT_CLAIMED
    following = next_run_time(job, scheduled, now)
    token = uuid.uuid4()
    with claim_transaction():
        if job.running:
            # Overlap: the previous run has not committed; skip this one.
            if not advance(job, scheduled, following, {"running": True}):
                return Fired.NOT_CLAIMED
            record_skipped(job, scheduled)
            trim_history(job.pk, history_limit(job.max_history))
            return Fired.SKIPPED
        claimed = advance(
            job,
            scheduled,
            following,
            {"running": False},
            running=True,
            running_for=scheduled,
            claim_token=token,
            claimed_at=now,
            attempts=1,
            retry_at=None,
            retry_for=None,
        )
        if not claimed:
            return Fired.NOT_CLAIMED
    return _claim_of(job, scheduled, token, 1, now)


def _release(claim: CronClaim, **changes: Any) -> int:
    return claim.still_held().update(
        running=False, running_for=None, claim_token=None, claimed_at=None, **changes
    )


class RunCron(Firing[CronClaim]):
    """Operation: run a claimed cron run and record it in the history.

    The claim stays visibly ``running`` while the action runs, so a run
    falling due meanwhile is recorded as skipped rather than queued; it is
    released at the end, in the same transaction.
    """

    @property
    def what(self) -> str:
        """Name the job and its action."""
        return f"cron job={self.claim.name} action={self.claim.handler}"

    def consume(self, invocation: Invocation) -> bool:
        """Tell whether our claim still holds the job."""
        return self.claim.still_held().exists()

    def arguments(self) -> list[Any]:
        """Return the arguments stored with the job."""
        return stored_args(self.claim.args)

    def finish(self, invocation: Invocation, result: Any) -> None:
        """Release the claim and record the run."""
        claim = self.claim
        if not _release(claim, attempts=0):
            if CronJob.objects.filter(pk=claim.id).exists():
                raise ClaimLost()
            return  # the action deleted its own job
        _record(claim, self.fired_at, CronRunResult.OK)

    def record_error(self, exc: BaseException) -> bool:
        """Release the job waiting for the run's retry, or record it failed."""
        claim = self.claim
        # Read before the transaction: on SQLite its first statement must
        # be the write that takes the lock.
        retry_at = _retry_at(claim, exc)
        with db.atomic():
            if retry_at is None:
                if not _release(claim, attempts=0):
                    return False
                _record(
                    claim,
                    self.fired_at,
                    CronRunResult.ERROR,
                    describe(exc),
                    retries.traceback_text(exc),
                )
                return True
            waiting = clock.to_datetime(retry_at)
            if _release(claim, retry_at=waiting, retry_for=claim.scheduled_at):
                db.on_commit(lambda: wake_cron(claim.id, retry_at), robust=True)
        return False

    def forget(self) -> bool:
        """Delete the job: its action is gone."""
        CronJob.objects.filter(pk=self.claim.id).delete()
        return True


def _record(
    claim: CronClaim,
    fired_at: datetime,
    result: str,
    error: str = "",
    traceback: str = "",
) -> None:
    CronRun.objects.create(
        job_id=claim.id,
        action=claim.handler,
        scheduled_at=claim.scheduled_at,
        fired_at=fired_at,
        finished_at=clock.now_datetime(),
        result=result,
        error=error,
        attempts=claim.attempt,
        traceback=traceback,
    )
    skip_overdue(claim.id, claim.claimed_at)
    trim_history(claim.id, history_limit(claim.max_history))


def _retry_at(claim: CronClaim, exc: BaseException) -> float | None:
    """Return when to retry a failed run, or None when it failed for good."""
    retry_at = next_attempt_at(exc, claim.attempt, claim.max_retries)
    if retry_at is None:
        return None
    following = (
        CronJob.objects.filter(pk=claim.id)
        .values_list("next_run_at", flat=True)
        .first()
    )
    if following is None or retry_at >= clock.to_timestamp(following):
        return None  # the next run comes first: this one is given up
    return retry_at


def fire_claimed_cron(claim: CronClaim) -> Fired:
    """Fire one claimed cron run through the invocation path."""
    return RunCron(claim, clock.now_datetime()).fire()


def run_cron_job(job: CronJob) -> Fired:
    """Claim and fire the due run of ``job`` (or record it as skipped)."""
    claim = claim_cron(job)
    if isinstance(claim, Fired):
        return claim
    return fire_claimed_cron(claim)


def run_cron(job_id: int, scheduled_at: float | None = None) -> Fired:
    """Run a cron job's due run (the task entry).

    ``scheduled_at`` is the run the task was sent for; a task for a run that
    already happened (a duplicate, or superseded by the sweeper) does nothing.
    """
    job = CronJob.objects.filter(pk=job_id).first()
    if job is None:
        return Fired.NOT_CLAIMED
    if scheduled_at is not None:
        expected = clock.to_datetime(scheduled_at)
        # Sent for the next run, or for the retry of a failed one.
        due = next(
            (
                at
                for at in (job.next_run_at, job.retry_at)
                if at is not None and abs((at - expected).total_seconds()) <= 0.001
            ),
            None,
        )
        if due is None:
            return Fired.NOT_CLAIMED
        if due > clock.now_datetime():
            wake_cron(job.pk, clock.to_timestamp(due))
            return Fired.NOT_CLAIMED
    return run_cron_job(job)


def run_due_cron(limit: int = 100, grace: float = 0.0) -> int:
    """Run up to ``limit`` cron runs due ``grace`` seconds ago; return how many."""
    before = clock.to_datetime(clock.now() - grace)
    jobs = list(CronJob.objects.due(before).order_by("next_run_at")[:limit])
    return sum(1 for job in jobs if run_cron_job(job).ran)
