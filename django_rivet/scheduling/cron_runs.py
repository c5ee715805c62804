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
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import F

from .. import clock
from ..actors.definition import Actor, HandlerSpec
from ..encoding import cbor_loads
from ..models import CronJob, CronRun, CronRunResult, db
from . import retries
from .claims import (
    ClaimLost,
    Fired,
    Firing,
    claim_transaction,
    describe,
    fire,
    fired_by,
    next_attempt_at,
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


@dataclass(frozen=True, slots=True)
class CronClaim:
    """A cron run this process may fire."""

    job_id: int
    actor_id: uuid.UUID
    name: str
    action: str
    args: bytes
    scheduled_at: datetime
    token: uuid.UUID
    max_history: int | None  # None: follow RIVET["CRON_HISTORY"]
    attempt: int = 1  # this claim's attempt of the run (1 = the first)
    max_retries: int | None = None  # None: follow SCHEDULE_MAX_RETRIES
    claimed_at: datetime | None = None


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
    return CronClaim(
        job.pk,
        job.actor_id,
        job.name,
        job.action,
        bytes(job.args),
        job.retry_for,
        token,
        job.max_history,
        job.attempts + 1,
        job.max_retries,
        now,
    )


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
    return CronClaim(
        job.pk,
        job.actor_id,
        job.name,
        job.action,
        bytes(job.args),
        scheduled,
        token,
        job.max_history,
        1,
        job.max_retries,
        now,
    )


def _release(claim: CronClaim, **changes: Any) -> int:
    return CronJob.objects.filter(
        pk=claim.job_id, claim_token=claim.token, running=True
    ).update(
        running=False, running_for=None, claim_token=None, claimed_at=None, **changes
    )


class RunCron(Firing):
    """Operation: run a claimed cron run and record it in the history.

    The claim stays visibly ``running`` while the action runs, so a run
    falling due meanwhile is recorded as skipped rather than queued; it is
    released at the end, in the same transaction.
    """

    def __init__(self, claim: CronClaim, fired_at: datetime) -> None:
        super().__init__(
            f"cron {claim.name}",
            kind="cron",
            work_id=claim.job_id,
            action=claim.action,
            attempt=claim.attempt,
        )
        self.claim = claim
        self.fired_at = fired_at

    def find_handler(self, definition: type[Actor]) -> HandlerSpec | None:
        """Return the job's action."""
        return definition.actions.get(self.claim.action)

    def consume(self, invocation: Invocation) -> bool:
        """Tell whether our claim still holds the job."""
        claim = self.claim
        return CronJob.objects.filter(
            pk=claim.job_id, claim_token=claim.token, running=True
        ).exists()

    def arguments(self) -> list[Any]:
        """Return the arguments stored with the job."""
        return cbor_loads(self.claim.args) if self.claim.args else []

    def finish(self, invocation: Invocation, result: Any) -> None:
        """Release the claim and record the run."""
        claim = self.claim
        if not _release(claim, attempts=0):
            if CronJob.objects.filter(pk=claim.job_id).exists():
                raise ClaimLost()
            return  # the action deleted its own job
        _record(claim, self.fired_at, CronRunResult.OK)


def _record(
    claim: CronClaim,
    fired_at: datetime,
    result: str,
    error: str = "",
    traceback: str = "",
) -> None:
    CronRun.objects.create(
        job_id=claim.job_id,
        action=claim.action,
        scheduled_at=claim.scheduled_at,
        fired_at=fired_at,
        finished_at=clock.now_datetime(),
        result=result,
        error=error,
        attempts=claim.attempt,
        traceback=traceback,
    )
    skip_overdue(claim.job_id, claim.claimed_at)
    trim_history(claim.job_id, history_limit(claim.max_history))


def _retry_at(claim: CronClaim, exc: BaseException) -> float | None:
    """Return when to retry a failed run, or None when it failed for good."""
    retry_at = next_attempt_at(exc, claim.attempt, claim.max_retries)
    if retry_at is None:
        return None
    following = (
        CronJob.objects.filter(pk=claim.job_id)
        .values_list("next_run_at", flat=True)
        .first()
    )
    if following is None or retry_at >= clock.to_timestamp(following):
        return None  # the next run comes first: this one is given up
    return retry_at


def fire_claimed_cron(claim: CronClaim) -> Fired:
    """Fire one claimed cron run through the invocation path."""
    fired_at = clock.now_datetime()

    def record_error(exc: BaseException) -> bool:
        # Read before the transaction: on SQLite its first statement must
        # be the write that takes the lock.
        retry_at = _retry_at(claim, exc)
        with db.atomic():
            if retry_at is None:
                if not _release(claim, attempts=0):
                    return False
                _record(
                    claim,
                    fired_at,
                    CronRunResult.ERROR,
                    describe(exc),
                    retries.traceback_text(exc),
                )
                return True
            waiting = clock.to_datetime(retry_at)
            if _release(claim, retry_at=waiting, retry_for=claim.scheduled_at):
                db.on_commit(lambda: wake_cron(claim.job_id, retry_at), robust=True)
        return False

    def delete() -> None:
        CronJob.objects.filter(pk=claim.job_id).delete()

    return fire(
        claim.actor_id,
        RunCron(claim, fired_at),
        fired_by(
            "cron",
            claim.job_id,
            claim.name,
            claim.scheduled_at,
            fired_at,
            claim.attempt,
        ),
        what=f"cron job={claim.name} action={claim.action}",
        on_error=record_error,
        on_gone=delete,
    )


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
