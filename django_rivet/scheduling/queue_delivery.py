"""How queue messages are delivered, fail, are retried and run again.

Delivery runs each handler once, in order, through the invocation path
(:func:`deliver_queue`), following :mod:`.claims`: only the head of an
actor's queue is ever claimed. A handler that raises is retried
(:mod:`.retries`, ``@queue_handler(..., max_retries=...)``): the message
stays at the head, ``pending`` until its ``retry_at``, so nothing overtakes
it; once its retries are spent (or at once for a ``UserError``) it is
``failed`` and the queue moves on to the next message. :func:`retry_messages`
(the admin's "Retry now", ``rivet_retry``) makes a failed one pending again.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import F, QuerySet

from .. import clock, dispatch
from ..actors.definition import Actor, HandlerSpec
from ..actors.errors import database_error
from ..conf import expose_errors
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import InternalError, RivetError
from ..models import QueueMessage, QueueMessageStatus, db
from . import retries
from .claims import (
    Fired,
    Firing,
    claim_transaction,
    describe,
    fire,
    fired_by,
    next_attempt_at,
)

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "DeliverMessage",
    "MessageClaim",
    "claim_next_message",
    "deliver_claimed_message",
    "deliver_due_queues",
    "deliver_queue",
    "retry_messages",
    "wake_queue",
]


def wake_queue(actor_id: uuid.UUID | str, eta: float | None = None) -> None:
    """Make an actor's pending queue messages get delivered (now, or at ``eta``)."""
    dispatch.wake("deliver_queue", [str(actor_id)], eta=eta)


@dataclass(frozen=True, slots=True)
class MessageClaim:
    """A queue message this process may deliver."""

    id: int
    actor_id: uuid.UUID
    queue: str
    body: bytes
    created_at: datetime
    token: uuid.UUID
    attempt: int = 1  # this claim's attempt (1 = the first delivery)


def claim_next_message(actor_id: uuid.UUID | str) -> MessageClaim | None:
    """Claim the actor's oldest unprocessed message, unless one is claimed.

    Only the head of the actor's queue can be claimed, so messages are
    handled one by one in FIFO order even with several deliverers; a head
    waiting for a retry holds the queue until its ``retry_at``.
    """
    token = uuid.uuid4()
    now = clock.now_datetime()
    head = (
        QueueMessage.objects.active()
        .filter(actor_id=actor_id)
        .order_by("id")
        .values("id")[:1]
    )
    with claim_transaction():
        claimed = (
            QueueMessage.objects.deliverable(now)
            .filter(id__in=head)
            .update(
                status=QueueMessageStatus.RUNNING,
                claim_token=token,
                claimed_at=now,
                attempts=F("attempts") + 1,
            )
        )
        if not claimed:
            return None
        row = (
            QueueMessage.objects.active()
            .filter(actor_id=actor_id, claim_token=token)
            .values_list("id", "queue", "body", "created_at", "attempts")
            .first()
        )
    if row is None:  # pragma: no cover - the update just wrote it
        return None
    msg_id, queue, body, created_at, attempt = row
    return MessageClaim(
        msg_id,
        uuid.UUID(str(actor_id)),
        queue,
        bytes(body),
        created_at,
        token,
        attempt,
    )


class DeliverMessage(Firing):
    """Operation: consume a message claim, run its handler, store the reply."""

    def __init__(self, claim: MessageClaim, fired_at: datetime) -> None:
        super().__init__(
            f"queue {claim.queue}",
            kind="message",
            work_id=claim.id,
            action=claim.queue,
            attempt=claim.attempt,
        )
        self.claim = claim
        self.fired_at = fired_at

    def find_handler(self, definition: type[Actor]) -> HandlerSpec | None:
        """Return the handler of the message's queue."""
        return definition.queue_handlers.get(self.claim.queue)

    def consume(self, invocation: Invocation) -> bool:
        """Mark the message done if our claim still holds it."""
        claim = self.claim
        return bool(
            QueueMessage.objects.filter(
                pk=claim.id, claim_token=claim.token, status=QueueMessageStatus.RUNNING
            ).update(status=QueueMessageStatus.DONE)
        )

    def arguments(self) -> list[Any]:
        """The handler receives the message body."""
        return [cbor_loads(self.claim.body)]

    def finish(self, invocation: Invocation, result: Any) -> None:
        """Store the reply for a waiting sender."""
        QueueMessage.objects.filter(pk=self.claim.id).update(
            response=cbor_dumps(result, "response"), finished_at=clock.now_datetime()
        )


def _wire_error(exc: BaseException) -> RivetError:
    """Return what a waiting sender may see of ``exc`` (nothing logged here)."""
    if isinstance(exc, RivetError):
        return exc
    coded = database_error(exc)
    if coded is not None:
        return coded
    if expose_errors():
        return InternalError(f"{type(exc).__name__}: {exc}")
    return InternalError()


def deliver_claimed_message(claim: MessageClaim) -> Fired:
    """Run the queue handler for one claimed message."""
    fired_at = clock.now_datetime()
    operation = DeliverMessage(claim, fired_at)

    def record_error(exc: BaseException) -> bool:
        spec = operation.spec
        retry_at = next_attempt_at(
            exc, claim.attempt, spec.max_retries if spec else None
        )
        final = retry_at is None
        error = _wire_error(exc).to_dict()
        error["detail"] = describe(exc)
        fields: dict[str, Any] = {
            "error": error,
            "traceback": retries.traceback_text(exc),
            "claim_token": None,
            "claimed_at": None,
        }
        if retry_at is None:
            fields.update(
                status=QueueMessageStatus.FAILED, finished_at=clock.now_datetime()
            )
        else:
            fields.update(
                status=QueueMessageStatus.PENDING,
                retry_at=clock.to_datetime(retry_at),
            )
        with db.atomic():
            recorded = QueueMessage.objects.filter(
                pk=claim.id, claim_token=claim.token, status=QueueMessageStatus.RUNNING
            ).update(**fields)
            if recorded:
                # The next message (now) or this one's retry (later).
                eta = retry_at
                db.on_commit(lambda: wake_queue(claim.actor_id, eta), robust=True)
        return final and bool(recorded)

    return fire(
        claim.actor_id,
        operation,
        fired_by(
            "queue", claim.id, claim.queue, claim.created_at, fired_at, claim.attempt
        ),
        what=f"queue message={claim.id} queue={claim.queue}",
        on_error=record_error,
    )


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
        QueueMessage.objects.deliverable(before)
        .filter(created_at__lte=before)
        .order_by()
        .values_list("actor_id", flat=True)
        .distinct()[:limit]
    )
    return sum(deliver_queue(actor_id, limit=limit) for actor_id in actor_ids)


def retry_messages(messages: QuerySet[QueueMessage] | list[int]) -> int:
    """Make the failed messages of ``messages`` pending again; return how many.

    Attempts start over. A retried message is older than the messages sent
    after it, so it goes back to the head of its actor's queue. The
    ``rivet_retry`` command and the admin's "Retry now" use it.
    """
    if not isinstance(messages, QuerySet):
        messages = QueueMessage.objects.filter(pk__in=list(messages))
    with db.atomic():
        rows = list(
            messages.filter(status=QueueMessageStatus.FAILED).values_list(
                "id", "actor_id"
            )
        )
        retried = QueueMessage.objects.filter(
            pk__in=[pk for pk, _ in rows], status=QueueMessageStatus.FAILED
        ).update(
            status=QueueMessageStatus.PENDING,
            attempts=0,
            retry_at=None,
            finished_at=None,
            error=None,
            traceback="",
            response=None,
        )
        for actor_id in {actor_id for _, actor_id in rows}:
            db.on_commit(functools.partial(wake_queue, actor_id), robust=True)
    return retried
