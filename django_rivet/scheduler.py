"""Firing schedules, cron runs and queue messages, exactly once in effect.

Every firing has two steps:

1. **Claim** (a short transaction of its own): a conditional update moves the
   row from ``pending`` to ``running`` with a fresh claim token -- on
   PostgreSQL a batch is picked with ``SELECT ... FOR UPDATE SKIP LOCKED`` so
   concurrent sweepers split the work; on SQLite the update is the first
   statement, which takes the write lock. Whoever loses the race updates
   nothing and stops.
2. **Fire** through :func:`~django_rivet.actors.runtime.invoke`, the one
   invocation path: in the actor's transaction the operation consumes the
   claim only if the token still matches, then runs the action. The claim,
   the action's writes and the bookkeeping commit or roll back together.

So a duplicated Celery delivery, two sweepers, or a sweeper racing a task
fire once. If the action raises, everything rolls back and the error is
recorded (fenced by the same token) without a retry. If the firer dies
between the two steps, the claim goes stale and the sweeper returns the row
to ``pending`` after :func:`claim_lease` seconds; a late firer holding the old
token then finds nothing to consume. Celery ETA tasks and the embedded worker
only make firing prompt: the database decides.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Min

from . import clock, cron
from .actors.definition import Actor, HandlerSpec
from .actors.runtime import ActorRef, Invocation, Origin, invoke, public_error
from .conf import rivet_settings
from .encoding import cbor_dumps, cbor_loads
from .exceptions import ActionNotFound, RivetError
from .models import (
    CronJob,
    CronKind,
    CronRun,
    CronRunResult,
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduleStatus,
)

logger = logging.getLogger("django_rivet.scheduler")

__all__ = [
    "ETA_HORIZON",
    "Fired",
    "claim_lease",
    "deliver_due_queues",
    "deliver_queue",
    "fire_due_schedules",
    "fire_schedule",
    "next_due_at",
    "run_cron",
    "run_due_cron",
    "send_wakeups_to_celery",
    "uses_celery",
    "wake_cron",
    "wake_queue",
    "wake_schedule",
]

# Only work due within this many seconds gets a Celery ETA task when it is
# created; the sweeper sends the rest as their time approaches. Long ETAs sit
# in worker memory and outlive Redis's visibility timeout (redelivered).
ETA_HORIZON = 600.0
CLAIM_BATCH = 20


class Fired(enum.Enum):
    """What one firing attempt did."""

    OK = "ok"  # the action ran and committed
    ERROR = "error"  # the action raised; recorded, not retried
    SKIPPED = "skipped"  # a cron run overlapped a running one
    DELETED = "deleted"  # the action no longer exists; the job was deleted
    NOT_CLAIMED = "not_claimed"  # not due, gone, or someone else has it
    LOST = "lost"  # our claim went stale and was taken over

    @property
    def ran(self) -> bool:
        """Tell whether this attempt handled due work."""
        return self not in (Fired.NOT_CLAIMED, Fired.LOST)


_celery_override: bool | None = None


def uses_celery() -> bool:
    """Tell whether wake-ups go to Celery (else the worker loop polls)."""
    if _celery_override is not None:
        return _celery_override
    return not rivet_settings.EMBEDDED_WORKER


def send_wakeups_to_celery(enabled: bool | None) -> None:
    """Force wake-ups on or off for this process (``None``: follow settings).

    ``rivet_worker`` turns them off: it fires everything itself, and a
    project running it usually has no broker to send to.
    """
    global _celery_override
    _celery_override = enabled


def claim_lease() -> float:
    """Return the seconds after which an uncommitted claim is presumed dead."""
    return 2 * float(rivet_settings.ACTION_TIMEOUT) + 60.0


def _skip_locked() -> bool:
    return bool(connection.features.has_select_for_update_skip_locked)


@contextlib.contextmanager
def _claim_transaction() -> Iterator[None]:
    """Open the short transaction of a claim.

    On PostgreSQL its commit need not wait for the disk: a claim lost in a
    crash leaves the row pending, which is safe, and the later durable commit
    of the action flushes the WAL past it anyway. That saves one fsync per
    firing. Only for a transaction of its own, never inside a caller's.
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def _fired_by(
    kind: str, id: Any, name: str, scheduled_at: datetime, fired_at: datetime
) -> Origin:
    """Return the origin of a scheduled, cron or queue invocation.

    Its ``fire_info`` is what handlers read as ``ctx.fire_info`` (SPEC 3.4).
    """
    return Origin(
        transport=kind,
        fire_info={
            "kind": kind,
            "id": id,
            "name": name,
            "scheduled_at": scheduled_at,
            "fired_at": fired_at,
        },
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, RivetError):
        return f"{exc.qualified_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


class _HandlerGone(ActionNotFound):
    """The action or queue handler was removed from the actor's code."""


class _ClaimLost(Exception):
    """The claim was taken over while the actor code ran; roll back."""


# -- wake-ups (after commit) ----------------------------------------------------------
def _enqueue(task_name: str, args: list[Any], eta: float | None = None) -> None:
    from . import tasks

    tasks.send(task_name, args, eta)


def _notify_worker() -> None:
    from . import worker

    worker.notify()


def wake_schedule(schedule_id: uuid.UUID | str, run_at: float) -> None:
    """Make a new schedule fire on time (Celery ETA task or worker wake-up)."""
    if uses_celery():
        _enqueue("fire_schedule", [str(schedule_id)], eta=run_at)
    else:
        _notify_worker()


def wake_cron(job_id: int, next_run_at: float) -> None:
    """Make a cron job's next run fire on time."""
    if uses_celery():
        _enqueue("run_cron", [job_id, next_run_at], eta=next_run_at)
    else:
        _notify_worker()


def wake_queue(actor_id: uuid.UUID | str) -> None:
    """Make an actor's pending queue messages get delivered."""
    if uses_celery():
        _enqueue("deliver_queue", [str(actor_id)])
    else:
        _notify_worker()


def within_eta_horizon(when: float) -> bool:
    """Tell whether work due at ``when`` should get a Celery ETA task now."""
    return uses_celery() and when - clock.now() <= ETA_HORIZON


# -- schedules ------------------------------------------------------------------------
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
    with _claim_transaction():
        if _skip_locked():
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


@dataclass(slots=True)
class FireSchedule:
    """Operation: consume a schedule claim and run its action."""

    claim: ScheduleClaim
    fired_at: datetime
    label: str | None = None
    spec: HandlerSpec | None = None
    consumed: bool = False

    def prepare(self, definition: type[Actor]) -> None:
        """Find the action; a removed action deletes the schedule."""
        self.spec = definition.actions.get(self.claim.action)
        if self.spec is None:
            raise _HandlerGone(f"Actor {definition.name!r} has no action")
        self.label = f"schedule {self.claim.action}"

    def run(self, invocation: Invocation) -> Any:
        """Consume the claim, then run the action in the same transaction."""
        claim = self.claim
        self.consumed = bool(
            Schedule.objects.filter(
                pk=claim.id, claim_token=claim.token, status=ScheduleStatus.RUNNING
            ).update(status=ScheduleStatus.DONE, fired_at=self.fired_at)
        )
        if not self.consumed:
            return None
        assert self.spec is not None
        args = cbor_loads(claim.args) if claim.args else []
        self.spec.check_args(args)
        result = invocation.run_handler(self.spec, args)
        Schedule.objects.filter(pk=claim.id).update(finished_at=clock.now_datetime())
        return result


def fire_claimed_schedule(claim: ScheduleClaim) -> Fired:
    """Fire one claimed schedule through the invocation path."""
    fired_at = clock.now_datetime()
    operation = FireSchedule(claim, fired_at)
    origin = _fired_by("schedule", str(claim.id), claim.action, claim.run_at, fired_at)
    try:
        invoke(ActorRef.by_id(claim.actor_id), operation, origin)
    except _HandlerGone:
        logger.warning(
            "schedule deleted: action no longer exists id=%s actor_id=%s action=%s",
            claim.id,
            claim.actor_id,
            claim.action,
        )
        Schedule.objects.filter(pk=claim.id, claim_token=claim.token).delete()
        return Fired.DELETED
    except Exception as exc:
        logger.warning(
            "schedule failed id=%s actor_id=%s action=%s error=%s",
            claim.id,
            claim.actor_id,
            claim.action,
            _describe(exc),
            exc_info=not isinstance(exc, RivetError),
        )
        Schedule.objects.filter(
            pk=claim.id, claim_token=claim.token, status=ScheduleStatus.RUNNING
        ).update(
            status=ScheduleStatus.ERROR,
            fired_at=fired_at,
            finished_at=clock.now_datetime(),
            error=_describe(exc),
        )
        return Fired.ERROR
    return Fired.OK if operation.consumed else Fired.LOST


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


# -- cron -----------------------------------------------------------------------------
def next_run_time(job: CronJob, scheduled: datetime, now: datetime) -> datetime:
    """Return the run of ``job`` after ``scheduled``, coalescing missed ones."""
    if job.kind == CronKind.EVERY:
        assert job.interval is not None
        return cron.next_every_time(scheduled, job.interval, now)
    return cron.next_cron_time(job.expression, job.timezone, max(scheduled, now))


def trim_history(job_id: int, keep: int) -> None:
    """Delete all but the newest ``keep`` history entries of a job."""
    boundary = list(
        CronRun.objects.filter(job_id=job_id)
        .order_by("-id")
        .values_list("id", flat=True)[keep : keep + 1]
    )
    if boundary:
        CronRun.objects.filter(job_id=job_id, id__lte=boundary[0]).delete()


def _advance(
    job: CronJob,
    observed: datetime,
    following: datetime,
    where: dict[str, Any] | None = None,
    **changes: Any,
) -> bool:
    """Move ``next_run_at`` from ``observed`` to ``following`` (compare-and-set).

    Sends the Celery task for ``following`` after commit when it is near.
    """
    enqueue = within_eta_horizon(clock.to_timestamp(following))
    updated = CronJob.objects.filter(
        pk=job.pk, next_run_at=observed, **(where or {})
    ).update(
        next_run_at=following,
        enqueued_for=following if enqueue else None,
        updated_at=clock.now_datetime(),
        **changes,
    )
    if updated and enqueue:
        transaction.on_commit(
            lambda: wake_cron(job.pk, clock.to_timestamp(following)), robust=True
        )
    return bool(updated)


def _record_skipped(job: CronJob, scheduled: datetime) -> None:
    CronRun.objects.create(
        job_id=job.pk,
        action=job.action,
        scheduled_at=scheduled,
        result=CronRunResult.SKIPPED,
    )


def skip_overdue(job_id: int) -> int:
    """Record runs that fell due while a run held the job as skipped.

    Called in the transaction that ends a run; returns how many were skipped.
    """
    job = CronJob.objects.filter(pk=job_id).first()
    now = clock.now_datetime()
    if job is None or job.next_run_at > now:
        return 0
    observed = job.next_run_at
    following = next_run_time(job, observed, now)
    if not _advance(job, observed, following):
        return 0
    skipped = 0
    scheduled = observed
    # Older entries would be trimmed right away; don't write them.
    while scheduled < following and skipped < max(job.max_history, 1):
        _record_skipped(job, scheduled)
        skipped += 1
        scheduled = next_run_time(job, scheduled, scheduled)
    return skipped


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
    max_history: int


def claim_cron(job: CronJob) -> CronClaim | Fired:
    """Claim the due run of ``job`` (or skip it if a run is in progress)."""
    now = clock.now_datetime()
    scheduled = job.next_run_at
    if scheduled > now:
        return Fired.NOT_CLAIMED
    following = next_run_time(job, scheduled, now)
    token = uuid.uuid4()
    with _claim_transaction():
        if job.running:
            # Overlap: the previous run has not committed; skip this one.
            if not _advance(job, scheduled, following, {"running": True}):
                return Fired.NOT_CLAIMED
            _record_skipped(job, scheduled)
            trim_history(job.pk, job.max_history)
            return Fired.SKIPPED
        claimed = _advance(
            job,
            scheduled,
            following,
            {"running": False},
            running=True,
            running_for=scheduled,
            claim_token=token,
            claimed_at=now,
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
    )


def _release(claim: CronClaim) -> int:
    return CronJob.objects.filter(
        pk=claim.job_id, claim_token=claim.token, running=True
    ).update(running=False, running_for=None, claim_token=None, claimed_at=None)


@dataclass(slots=True)
class RunCron:
    """Operation: run a claimed cron run and record it in the history."""

    claim: CronClaim
    fired_at: datetime
    label: str | None = None
    spec: HandlerSpec | None = None
    lost: bool = field(default=False)

    def prepare(self, definition: type[Actor]) -> None:
        """Find the action; a removed action deletes the job."""
        self.spec = definition.actions.get(self.claim.action)
        if self.spec is None:
            raise _HandlerGone(f"Actor {definition.name!r} has no action")
        self.label = f"cron {self.claim.name}"

    def run(self, invocation: Invocation) -> Any:
        """Run the action; release the claim at the end, in this transaction.

        The claim stays visibly ``running`` while the action runs, so a run
        falling due meanwhile is recorded as skipped rather than queued.
        """
        claim = self.claim
        if not CronJob.objects.filter(
            pk=claim.job_id, claim_token=claim.token, running=True
        ).exists():
            self.lost = True
            return None
        assert self.spec is not None
        args = cbor_loads(claim.args) if claim.args else []
        self.spec.check_args(args)
        result = invocation.run_handler(self.spec, args)
        if not _release(claim):
            if CronJob.objects.filter(pk=claim.job_id).exists():
                raise _ClaimLost()
            return result  # the action deleted its own job
        CronRun.objects.create(
            job_id=claim.job_id,
            action=claim.action,
            scheduled_at=claim.scheduled_at,
            fired_at=self.fired_at,
            finished_at=clock.now_datetime(),
            result=CronRunResult.OK,
        )
        skip_overdue(claim.job_id)
        trim_history(claim.job_id, claim.max_history)
        return result


def fire_claimed_cron(claim: CronClaim) -> Fired:
    """Fire one claimed cron run through the invocation path."""
    fired_at = clock.now_datetime()
    operation = RunCron(claim, fired_at)
    origin = _fired_by("cron", claim.job_id, claim.name, claim.scheduled_at, fired_at)
    try:
        invoke(ActorRef.by_id(claim.actor_id), operation, origin)
    except _HandlerGone:
        logger.warning(
            "cron job deleted: action no longer exists job=%s actor_id=%s action=%s",
            claim.name,
            claim.actor_id,
            claim.action,
        )
        CronJob.objects.filter(pk=claim.job_id).delete()
        return Fired.DELETED
    except _ClaimLost:
        return Fired.LOST
    except Exception as exc:
        logger.warning(
            "cron run failed job=%s actor_id=%s action=%s error=%s",
            claim.name,
            claim.actor_id,
            claim.action,
            _describe(exc),
            exc_info=not isinstance(exc, RivetError),
        )
        with transaction.atomic():
            if _release(claim):
                CronRun.objects.create(
                    job_id=claim.job_id,
                    action=claim.action,
                    scheduled_at=claim.scheduled_at,
                    fired_at=fired_at,
                    finished_at=clock.now_datetime(),
                    result=CronRunResult.ERROR,
                    error=_describe(exc),
                )
                skip_overdue(claim.job_id)
                trim_history(claim.job_id, claim.max_history)
        return Fired.ERROR
    return Fired.LOST if operation.lost else Fired.OK


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
        if abs((job.next_run_at - expected).total_seconds()) > 0.001:
            return Fired.NOT_CLAIMED
        if job.next_run_at > clock.now_datetime():
            wake_cron(job.pk, clock.to_timestamp(job.next_run_at))
            return Fired.NOT_CLAIMED
    return run_cron_job(job)


def run_due_cron(limit: int = 100, grace: float = 0.0) -> int:
    """Run up to ``limit`` cron runs due ``grace`` seconds ago; return how many."""
    before = clock.to_datetime(clock.now() - grace)
    jobs = list(CronJob.objects.due(before).order_by("next_run_at")[:limit])
    return sum(1 for job in jobs if run_cron_job(job).ran)


# -- queues -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MessageClaim:
    """A queue message this process may deliver."""

    id: int
    actor_id: uuid.UUID
    queue: str
    body: bytes
    created_at: datetime
    token: uuid.UUID


def claim_next_message(actor_id: uuid.UUID | str) -> MessageClaim | None:
    """Claim the actor's oldest unprocessed message, unless one is claimed.

    Only the head of the actor's queue can be claimed, so messages are
    handled one by one in FIFO order even with several deliverers.
    """
    token = uuid.uuid4()
    now = clock.now_datetime()
    head = (
        QueueMessage.objects.active()
        .filter(actor_id=actor_id)
        .order_by("id")
        .values("id")[:1]
    )
    with _claim_transaction():
        claimed = QueueMessage.objects.filter(
            id__in=head, status=QueueMessageStatus.PENDING
        ).update(status=QueueMessageStatus.RUNNING, claim_token=token, claimed_at=now)
        if not claimed:
            return None
        row = (
            QueueMessage.objects.active()
            .filter(actor_id=actor_id, claim_token=token)
            .values_list("id", "queue", "body", "created_at")
            .first()
        )
    if row is None:  # pragma: no cover - the update just wrote it
        return None
    msg_id, queue, body, created_at = row
    return MessageClaim(
        msg_id, uuid.UUID(str(actor_id)), queue, bytes(body), created_at, token
    )


@dataclass(slots=True)
class DeliverMessage:
    """Operation: consume a message claim and run its queue handler."""

    claim: MessageClaim
    fired_at: datetime
    label: str | None = None
    spec: HandlerSpec | None = None
    consumed: bool = False

    def prepare(self, definition: type[Actor]) -> None:
        """Find the queue handler."""
        self.spec = definition.queue_handlers.get(self.claim.queue)
        if self.spec is None:
            raise _HandlerGone(
                f"Actor {definition.name!r} has no handler for queue "
                f"{self.claim.queue!r}",
                metadata={"queue": self.claim.queue},
            )
        self.label = f"queue {self.claim.queue}"

    def run(self, invocation: Invocation) -> Any:
        """Consume the claim, run the handler, store its reply."""
        claim = self.claim
        self.consumed = bool(
            QueueMessage.objects.filter(
                pk=claim.id, claim_token=claim.token, status=QueueMessageStatus.RUNNING
            ).update(status=QueueMessageStatus.DONE)
        )
        if not self.consumed:
            return None
        assert self.spec is not None
        result = invocation.run_handler(self.spec, [cbor_loads(claim.body)])
        QueueMessage.objects.filter(pk=claim.id).update(
            response=cbor_dumps(result), finished_at=clock.now_datetime()
        )
        return result


def deliver_claimed_message(claim: MessageClaim) -> Fired:
    """Run the queue handler for one claimed message."""
    fired_at = clock.now_datetime()
    operation = DeliverMessage(claim, fired_at)
    origin = _fired_by("queue", claim.id, claim.queue, claim.created_at, fired_at)
    try:
        invoke(ActorRef.by_id(claim.actor_id), operation, origin)
    except Exception as exc:
        logger.info(
            "queue handler failed message=%s actor_id=%s queue=%s error=%s",
            claim.id,
            claim.actor_id,
            claim.queue,
            _describe(exc),
        )
        error = public_error(exc).to_dict()  # logs internal errors in full
        error["detail"] = _describe(exc)
        QueueMessage.objects.filter(
            pk=claim.id, claim_token=claim.token, status=QueueMessageStatus.RUNNING
        ).update(
            status=QueueMessageStatus.FAILED,
            finished_at=clock.now_datetime(),
            error=error,
        )
        return Fired.ERROR
    return Fired.OK if operation.consumed else Fired.LOST


def deliver_queue(
    actor_id: uuid.UUID | str, *, limit: int = 100, until: int | None = None
) -> int:
    """Deliver the actor's pending messages in order; return how many.

    Stops after message ``until`` when given (a waiting sender delivers up to
    its own message), or when another deliverer holds the head of the queue.
    """
    delivered = 0
    while delivered < limit:
        claim = claim_next_message(actor_id)
        if claim is None:
            break
        if deliver_claimed_message(claim).ran:
            delivered += 1
        if until is not None and claim.id >= until:
            break
    return delivered


def deliver_due_queues(limit: int = 100, grace: float = 0.0) -> int:
    """Deliver messages older than ``grace`` seconds, per actor; return how many."""
    before = clock.to_datetime(clock.now() - grace)
    actor_ids = list(
        QueueMessage.objects.pending()
        .filter(created_at__lte=before)
        .order_by()
        .values_list("actor_id", flat=True)
        .distinct()[:limit]
    )
    return sum(deliver_queue(actor_id, limit=limit) for actor_id in actor_ids)


# -- what is due next -----------------------------------------------------------------
def next_due_at() -> float | None:
    """Return when the next schedule, cron run or queue message is due."""
    times = [
        Schedule.objects.filter(status=ScheduleStatus.PENDING).aggregate(
            at=Min("run_at")
        )["at"],
        CronJob.objects.aggregate(at=Min("next_run_at"))["at"],
    ]
    if QueueMessage.objects.pending().exists():
        times.append(clock.now_datetime())
    found = [clock.to_timestamp(t) for t in times if t is not None]
    return min(found) if found else None


def grace_period() -> timedelta:
    """Return how late due work must be before the sweeper presumes it lost."""
    return timedelta(seconds=float(rivet_settings.SWEEP_INTERVAL))
