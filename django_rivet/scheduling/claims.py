"""Claim, invoke, record: how schedules, cron runs and queue messages fire.

Every firing has two steps:

1. **Claim** (a short transaction of its own, :func:`claim_transaction`): a
   conditional update moves the row from ``pending`` to ``running`` with a
   fresh claim token -- on PostgreSQL a batch is picked with ``SELECT ...
   FOR UPDATE SKIP LOCKED`` so concurrent sweepers split the work; on SQLite
   the update is the first statement, which takes the write lock. Whoever
   loses the race updates nothing and stops.
2. **Fire** (:func:`fire`) through :func:`~django_rivet.actors.spine.invoke`,
   the one invocation path: in the actor's transaction the
   :class:`Firing` operation consumes the claim only if the token still
   matches, runs the handler and records the outcome. The claim, the
   handler's writes and the bookkeeping commit or roll back together.

So a duplicated Celery delivery, two sweepers, or a sweeper racing a task
fire once. If the handler raises, everything rolls back and the error is
recorded (fenced by the same token) without a retry. If the firer dies
between the two steps, the claim goes stale and the sweeper returns the row
to ``pending`` after :func:`claim_lease` seconds; a late firer holding the old
token then finds nothing to consume. Dispatch (Celery ETA tasks, the worker
loop) only makes firing prompt: the database decides.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import observability
from ..actors.definition import Actor, HandlerSpec
from ..actors.invocation import Origin, longest_action_timeout
from ..actors.rows import ActorRef
from ..actors.spine import invoke
from ..exceptions import ActionNotFound, RivetError
from ..models import db

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

logger = logging.getLogger("django_rivet.scheduler")

__all__ = [
    "CLAIM_BATCH",
    "ClaimLost",
    "Fired",
    "Firing",
    "HandlerGone",
    "claim_lease",
    "claim_transaction",
    "describe",
    "fire",
    "fired_by",
    "skip_locked",
]

CLAIM_BATCH = 20


class Fired(enum.Enum):
    """What one firing attempt did."""

    OK = "ok"  # the handler ran and committed
    ERROR = "error"  # the handler raised; recorded, not retried
    SKIPPED = "skipped"  # a cron run overlapped a running one
    DELETED = "deleted"  # the handler no longer exists; the row was deleted
    NOT_CLAIMED = "not_claimed"  # not due, gone, or someone else has it
    LOST = "lost"  # our claim went stale and was taken over

    @property
    def ran(self) -> bool:
        """Tell whether this attempt handled due work."""
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
    connection = db.connection()
    return bool(connection.features.has_select_for_update_skip_locked)


@contextlib.contextmanager
def claim_transaction() -> Iterator[None]:
    """Open the short transaction of a claim.

    On PostgreSQL its commit need not wait for the disk: a claim lost in a
    crash leaves the row pending, which is safe, and the later durable commit
    of the handler flushes the WAL past it anyway. That saves one fsync per
    firing. Only for a transaction of its own, never inside a caller's.
    """
    connection = db.connection()
    outermost = not connection.in_atomic_block
    with db.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def fired_by(
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


def describe(exc: BaseException) -> str:
    """Describe an error for a history record or a log line."""
    if isinstance(exc, RivetError):
        return f"{exc.qualified_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


class Firing(ABC):
    """The operation of a firing: consume the claim, run the handler, record.

    Subclasses say which handler runs (:meth:`find_handler`), how the claim
    is consumed (:meth:`consume`), the handler's arguments and what is
    recorded after it returned (:meth:`finish`); all of it runs in the
    actor's transaction.
    """

    # Fired by the actor's own schedule or queue: on_auth guards callers
    # from outside, and this work was accepted when it was created.
    auth = None

    def __init__(self, label: str) -> None:
        self.label: str | None = label
        self.spec: HandlerSpec | None = None
        self.consumed = False

    @abstractmethod
    def find_handler(self, definition: type[Actor]) -> HandlerSpec | None:
        """Return the handler to run, or ``None`` if the code no longer has it."""

    @abstractmethod
    def consume(self, invocation: Invocation) -> bool:
        """Consume the claim if it is still ours; tell whether it was."""

    @abstractmethod
    def arguments(self) -> list[Any]:
        """Return the handler's wire arguments."""

    @abstractmethod
    def finish(self, invocation: Invocation, result: Any) -> None:
        """Record the outcome, in the same transaction."""

    def prepare(self, definition: type[Actor]) -> None:
        """Find the handler; a removed one raises :class:`HandlerGone`."""
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
        args = self.arguments()
        self.spec.check_args(args)
        result = invocation.run_handler(self.spec, args)
        self.finish(invocation, result)
        return result


def fire(
    actor_id: uuid.UUID,
    operation: Firing,
    origin: Origin,
    *,
    what: str,
    on_error: Callable[[BaseException], None],
    on_gone: Callable[[], None] | None = None,
) -> Fired:
    """Run a claimed firing through the invocation path; record failures.

    ``on_error`` records a raising handler (in a transaction of its own,
    fenced by the claim token); ``on_gone`` deletes work whose handler was
    removed from the code (without it, that is recorded as an error).
    """
    try:
        invoke(ActorRef.by_id(actor_id), operation, origin)
    except HandlerGone as exc:
        if on_gone is None:
            observability.work_failed(origin.transport)
            on_error(exc)
            return Fired.ERROR
        logger.warning(
            "deleted %s: its handler no longer exists actor_id=%s", what, actor_id
        )
        on_gone()
        return Fired.DELETED
    except ClaimLost:
        return Fired.LOST
    except Exception as exc:
        logger.warning(
            "%s failed actor_id=%s error=%s",
            what,
            actor_id,
            describe(exc),
            exc_info=not isinstance(exc, RivetError),
        )
        observability.work_failed(origin.transport)
        on_error(exc)
        return Fired.ERROR
    if not operation.consumed:
        return Fired.LOST
    logger.info(
        "fired %s actor_id=%s late_ms=%.0f", what, actor_id, _lateness_ms(origin)
    )
    return Fired.OK


def _lateness_ms(origin: Origin) -> float:
    """Return how late a firing ran after it was due, in milliseconds."""
    info = origin.fire_info or {}
    scheduled, fired = info.get("scheduled_at"), info.get("fired_at")
    if not isinstance(scheduled, datetime) or not isinstance(fired, datetime):
        return 0.0
    return max(0.0, (fired - scheduled).total_seconds() * 1000)
