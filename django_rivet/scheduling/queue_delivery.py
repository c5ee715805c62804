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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from django.db.models import F, QuerySet

from .. import clock, dispatch
from ..actors.definition import Actor, HandlerSpec
from ..actors.errors import database_error
from ..conf import expose_errors
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import InternalError, RivetError
from ..models import QueueMessage, QueueMessageStatus, db
from .claims import (
    Claim,
    Fired,
    Firing,
    claim_transaction,
    describe,
    next_attempt_at,
    release_failed,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageClaim(Claim):
    """A queue message this process may deliver (its queue is handler and name)."""

    model = QueueMessage
    held: ClassVar[Mapping[str, Any]] = {"status": QueueMessageStatus.RUNNING}
    transport = "queue"
    work = "message"

    body: bytes


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
        id=msg_id,
        actor_id=uuid.UUID(str(actor_id)),
        token=token,
        handler=queue,
        name=queue,
        scheduled_at=created_at,
        attempt=attempt,
        body=bytes(body),
    )


class DeliverMessage(Firing[MessageClaim]):
    """Operation: consume a message claim, run its handler, store the reply."""

    @property
    def what(self) -> str:
        """Name the message and its queue."""
        return f"queue message={self.claim.id} queue={self.claim.handler}"

    def find_handler(self, definition: type[Actor]) -> HandlerSpec | None:
        """Return the handler of the message's queue."""
        return definition.queue_handlers.get(self.claim.handler)

    def consume(self, invocation: Invocation) -> bool:
        """Mark the message done if our claim still holds it."""
        return bool(self.claim.still_held().update(status=QueueMessageStatus.DONE))

    def arguments(self) -> list[Any]:
        """The handler receives the message body."""
        return [cbor_loads(self.claim.body)]

    def finish(self, invocation: Invocation, result: Any) -> None:
        """Store the reply for a waiting sender."""
        types = self.spec.types if self.spec is not None else None
        if types is not None and types.result is not None:
            result = types.result.dump(result, "response")
        QueueMessage.objects.filter(pk=self.claim.id).update(
            response=cbor_dumps(result, "response"), finished_at=clock.now_datetime()
        )

    def record_error(self, exc: BaseException) -> bool:
        """Keep the message at the head for its retry, or fail it for good."""
        claim, spec = self.claim, self.spec
        retry_at = next_attempt_at(
            exc, claim.attempt, spec.max_retries if spec else None
        )
        error = _wire_error(exc).to_dict()
        error["detail"] = describe(exc)
        retry = None if retry_at is None else {"retry_at": clock.to_datetime(retry_at)}
        with db.atomic():
            recorded = release_failed(claim, exc, retry, error=error)
            if recorded:
                # The next message (now) or this one's retry (later).
                eta = retry_at
                db.on_commit(lambda: wake_queue(claim.actor_id, eta), robust=True)
        return retry_at is None and recorded


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
    return DeliverMessage(claim, clock.now_datetime()).fire()


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
