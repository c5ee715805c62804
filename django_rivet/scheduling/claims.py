"""Claim, invoke, record: how schedules, cron runs and queue messages fire.

Every firing has two steps:

1. **Claim** (a short transaction of its own, :func:`claim_transaction`): a
   conditional update moves the row from ``pending`` to ``running`` with a
   fresh claim token -- on PostgreSQL a batch is picked with ``SELECT ...
   FOR UPDATE SKIP LOCKED`` so concurrent sweepers split the work; on SQLite
   the update is the first statement, which takes the write lock. Whoever
   loses the race updates nothing and stops; the winner holds a
   :class:`Claim` of the row.
2. **Fire** (:meth:`Firing.fire`) through :func:`~django_rivet.actors.spine.invoke`,
   the one invocation path: in the actor's transaction the
   :class:`Firing` operation consumes the claim only if the token still
   matches, runs the handler and records the outcome. The claim, the
   handler's writes and the bookkeeping commit or roll back together.

So a duplicated Celery delivery, two sweepers, or a sweeper racing a task
fire once. If the handler raises, everything rolls back and the error is
recorded (fenced by the same token): work with retries left goes back to
``pending`` for a later attempt (:mod:`.retries`), other work is failed for
good, which logs an ERROR and sends :data:`~django_rivet.signals.work_failed`.
Each claim counts one attempt, so a firer that crashes mid-attempt uses one
up too. If the firer dies between the two steps, the claim goes stale and the
sweeper returns the row to ``pending`` after :func:`claim_lease` seconds; a
late firer holding the old token then finds nothing to consume. Dispatch
(Celery ETA tasks, the worker loop) only makes firing prompt: the database
decides.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from django.db.models import Model, QuerySet

from .. import clock, observability
from ..actors.calls import Origin
from ..actors.definition import Actor, HandlerSpec
from ..actors.invocation import longest_action_timeout
from ..actors.rows import ActorRef
from ..actors.spine import invoke
from ..encoding import cbor_loads
from ..exceptions import ActionNotFound, InvalidArgs, RivetError, UserError
from ..models import db, sql
from ..signals import work_failed
from . import retries

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

logger = logging.getLogger("django_rivet.scheduler")

__all__ = [
    "CLAIM_BATCH",
    "Claim",
    "ClaimLost",
    "Fired",
    "Firing",
    "HandlerGone",
    "claim_lease",
    "claim_transaction",
    "describe",
    "next_attempt_at",
    "release_failed",
    "retryable",
    "skip_locked",
    "stored_args",
]

CLAIM_BATCH = 20


class Fired(enum.Enum):
    """What one firing attempt did."""

    OK = "ok"  # the handler ran and committed
    RETRYING = "retrying"  # the handler raised; it is tried again later
    ERROR = "error"  # the handler raised and the work failed for good
    SKIPPED = "skipped"  # a cron run overlapped a running one
    DELETED = "deleted"  # the handler no longer exists; the row was deleted
    NOT_CLAIMED = "not_claimed"  # not due, gone, or someone else has it
    LOST = "lost"  # our claim went stale and was taken over

    @property
    def ran(self) -> bool:
        """Tell whether this attempt handled due work (even if it failed)."""
        return self not in (Fired.NOT_CLAIMED, Fired.LOST)


class HandlerGone(ActionNotFound):
    """The action or queue handler was removed from the actor's code."""


class ClaimLost(Exception):
    """The claim was taken over while the actor code ran; roll back."""


def claim_lease() -> float:
    """Return the seconds after which an uncommitted claim is presumed dead."""
    return 2 * longest_action_timeout() + 60.0


def skip_locked() -> bool:
    """Tell whether the database can pick claim batches with SKIP LOCKED."""
    return sql.dialect(db.connection()).skip_locked


@contextlib.contextmanager
def claim_transaction() -> Iterator[None]:
    """Open the short transaction of a claim.

    Its commit need not wait for the disk (on PostgreSQL): a claim lost in a
    crash leaves the row pending, which is safe, and the later durable commit
    of the handler flushes the WAL past it anyway. That saves one fsync per
    firing. Only for a transaction of its own, never inside a caller's.
    """
    connection = db.connection()
    outermost = not connection.in_atomic_block
    with db.atomic():
        if outermost:
            sql.dialect(connection).defer_commit_flush(connection)
        yield


def next_attempt_at(
    exc: BaseException, attempt: int, max_retries: int | None
) -> float | None:
    """Return when failed attempt ``attempt`` is tried again (epoch seconds).

    ``None`` when the work failed for good: no retry left (``max_retries``,
    ``None`` following the setting), or none would help (:func:`retryable`).
    """
    if not retryable(exc) or attempt > retries.retries_allowed(max_retries):
        return None
    return clock.now() + retries.backoff(attempt)


def retryable(exc: BaseException) -> bool:
    """Tell whether another attempt could end differently.

    A ``UserError`` is the handler's deliberate answer; a handler gone from
    the code, or stored arguments its signature refuses, stay so.
    """
    return not isinstance(exc, UserError | HandlerGone | InvalidArgs)


def describe(exc: BaseException) -> str:
    """Describe an error for a history record or a log line."""
    if isinstance(exc, RivetError):
        return f"{exc.qualified_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A row this process claimed: what every firing of it shares.

    Subclasses (:class:`~.schedule_runs.ScheduleClaim`,
    :class:`~.cron_runs.CronClaim`, :class:`~.queue_delivery.MessageClaim`)
    name the row's model and kind, and add what their handler and their
    bookkeeping need.
    """

    # The claimed row's model, and what marks it claimed besides the token.
    model: ClassVar[type[Model]]
    held: ClassVar[Mapping[str, Any]]
    # "schedule", "cron" or "queue": the origin's transport, fire_info's kind.
    transport: ClassVar[str]
    # "schedule", "cron" or "message": what work_failed reports as its kind.
    work: ClassVar[str]

    id: Any  # the row's primary key
    actor_id: uuid.UUID
    token: uuid.UUID
    handler: str  # the action, or the queue, whose handler runs
    name: str  # what fire_info names: the action, the cron job, the queue
    scheduled_at: datetime  # when it was due (a message: when it was sent)
    attempt: int = 1  # this claim's attempt (1 = the first)

    @property
    def work_id(self) -> Any:
        """Return the row's id as ``fire_info`` and ``work_failed`` give it."""
        return self.id

    def still_held(self) -> QuerySet[Any]:
        """Return the claimed row, if this claim still holds it."""
        return self.model._default_manager.filter(
            pk=self.id, claim_token=self.token, **self.held
        )

    def origin(self, fired_at: datetime) -> Origin:
        """Return the origin of this claim's firing at ``fired_at``.

        Its ``fire_info`` is what handlers read as ``ctx.fire_info``
        (docs/scheduling.md, "What fired me").
        """
        return Origin(
            transport=self.transport,
            fire_info={
                "kind": self.transport,
                "id": self.work_id,
                "name": self.name,
                "scheduled_at": self.scheduled_at,
                "fired_at": fired_at,
                "attempt": self.attempt,
            },
        )


C = TypeVar("C", bound=Claim)


class Firing(ABC, Generic[C]):
    """The operation of a firing: consume the claim, run the handler, record.

    :meth:`fire` runs it through the invocation path. Subclasses say how the
    claim is consumed (:meth:`consume`), the handler's arguments and what is
    recorded after it returned (:meth:`finish`), which handler runs when it
    is not the claim's action (:meth:`find_handler`) -- all of it in the
    actor's transaction -- and, in a transaction of their own, how a
    failed attempt is recorded (:meth:`record_error`) and whether work whose
    handler is gone is deleted (:meth:`forget`).
    """

    # Fired by the actor's own schedule or queue: on_auth guards callers
    # from outside, and this work was accepted when it was created.
    auth = None

    def __init__(self, claim: C, fired_at: datetime) -> None:
        self.claim = claim
        self.fired_at = fired_at
        self.origin = claim.origin(fired_at)
        self.label: str | None = f"{claim.transport} {claim.name}"
        # What interceptors see (actors/interceptors.py: Call.kind, Call.name).
        self.kind = claim.transport
        self.handler_name = claim.handler
        self.spec: HandlerSpec | None = None
        self.definition: type[Actor] | None = None
        self.consumed = False

    def find_handler(self, definition: type[Actor]) -> HandlerSpec | None:
        """Return the handler to run, or ``None`` if the code no longer has it."""
        return definition.actions.get(self.claim.handler)

    @abstractmethod
    def consume(self, invocation: Invocation) -> bool:
        """Consume the claim if it is still ours; tell whether it was."""

    @abstractmethod
    def arguments(self) -> list[Any]:
        """Return the handler's wire arguments."""

    @abstractmethod
    def finish(self, invocation: Invocation, result: Any) -> None:
        """Record the outcome, in the same transaction."""

    @property
    @abstractmethod
    def what(self) -> str:
        """Describe the work for log lines."""

    @abstractmethod
    def record_error(self, exc: BaseException) -> bool:
        """Record a failed attempt; tell whether the work failed for good.

        In a transaction of its own, fenced by the claim token: a lost claim
        records nothing (and is no failure for good). For good means no
        retry left, or :func:`retryable` says none would help.
        """

    def forget(self) -> bool:
        """Delete work whose handler is gone; tell whether it did.

        By default it does not: the missing handler is a failure.
        """
        return False

    def prepare(self, definition: type[Actor]) -> None:
        """Find the handler; a removed one raises :class:`HandlerGone`."""
        self.definition = definition
        self.spec = self.find_handler(definition)
        if self.spec is None:
            raise HandlerGone(
                f"Actor {definition.name!r} no longer handles {self.label!r}"
            )

    def run(self, invocation: Invocation) -> Any:
        """Consume the claim, run the handler, record the outcome."""
        self.consumed = self.consume(invocation)
        if not self.consumed:
            return None
        assert self.spec is not None
        args = self.spec.arguments(self.arguments())
        result = invocation.run_handler(self.spec, args)
        self.finish(invocation, result)
        return result

    def fire(self) -> Fired:
        """Run this firing through the invocation path; record failures.

        Every failed attempt logs a WARNING with its traceback; a failure
        for good also logs an ERROR and sends ``work_failed``.
        """
        actor_id = self.claim.actor_id
        try:
            invoke(ActorRef.by_id(actor_id), self, self.origin)
        except HandlerGone as exc:
            if not self.forget():
                return self._failed(exc)
            logger.warning(
                "deleted %s: its handler no longer exists actor_id=%s",
                self.what,
                actor_id,
            )
            return Fired.DELETED
        except ClaimLost:
            return Fired.LOST
        except Exception as exc:
            return self._failed(exc)
        if not self.consumed:
            return Fired.LOST
        logger.info(
            "fired %s actor_id=%s attempt=%s late_ms=%.0f",
            self.what,
            actor_id,
            self.claim.attempt,
            _lateness_ms(self.origin),
        )
        return Fired.OK

    def _failed(self, exc: BaseException) -> Fired:
        """Log a failed attempt, record it, and report a failure for good."""
        claim = self.claim
        logger.warning(
            "%s attempt failed actor_id=%s attempt=%s error=%s",
            self.what,
            claim.actor_id,
            claim.attempt,
            describe(exc),
            exc_info=exc,
        )
        if not self.record_error(exc):
            return Fired.RETRYING
        logger.error(
            "%s failed for good actor_id=%s attempts=%s error=%s",
            self.what,
            claim.actor_id,
            claim.attempt,
            describe(exc),
        )
        observability.work_failed(claim.work)
        responses = work_failed.send_robust(
            sender=self.definition,
            kind=claim.work,
            actor_id=claim.actor_id,
            action=claim.handler,
            id=claim.work_id,
            error=exc,
        )
        for receiver, response in responses:
            if isinstance(response, Exception):
                logger.error(
                    "work_failed receiver %r raised", receiver, exc_info=response
                )
        return Fired.ERROR


def release_failed(
    claim: Claim,
    exc: BaseException,
    retry: Mapping[str, Any] | None,
    **fields: Any,
) -> bool:
    """Release a schedule or message whose attempt raised ``exc``.

    It is ``pending`` again with the fields of ``retry`` (when it is due
    again), or without them ``failed`` for good; either way it keeps
    ``fields`` and the traceback. Tell whether ``claim`` still held it (a
    lost claim records nothing: whoever took it over decides).
    """
    fields.update(
        traceback=retries.traceback_text(exc), claim_token=None, claimed_at=None
    )
    # The status values ScheduleStatus and QueueMessageStatus share.
    if retry is None:
        fields.update(status="failed", finished_at=clock.now_datetime())
    else:
        fields.update(status="pending", **retry)
    return bool(claim.still_held().update(**fields))


def stored_args(data: bytes) -> list[Any]:
    """Decode the arguments stored with a schedule or a cron job."""
    return cbor_loads(data) if data else []


def _lateness_ms(origin: Origin) -> float:
    """Return how late a firing ran after it was due, in milliseconds."""
    info = origin.fire_info or {}
    scheduled, fired = info.get("scheduled_at"), info.get("fired_at")
    if not isinstance(scheduled, datetime) or not isinstance(fired, datetime):
        return 0.0
    return max(0.0, (fired - scheduled).total_seconds() * 1000)
