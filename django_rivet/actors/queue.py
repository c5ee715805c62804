"""Actor queues (SPEC 3.7): durable FIFO messages for ``@queue_handler``\\ s.

A message is stored in the sender's transaction (``ctx.queue.send``) or in an
invocation of the receiving actor (``handle.send``), which locks the actor so
the pending-count limit is exact. Delivery runs each handler once, in order,
through the invocation path (:func:`django_rivet.scheduler.deliver_queue`).

A sender that waits (``wait=True``) delivers the queue itself up to its own
message right after the commit, then reads the stored reply, so waiting
works with no worker running; if another process holds the head of the queue
it polls until the reply is there or ``timeout`` passes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import scheduler
from ..conf import rivet_settings
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import (
    ActionNotFound,
    ActorNotFound,
    QueueFull,
    QueueMessageTooLarge,
    error_from_dict,
)
from ..models import QueueMessage, QueueMessageStatus
from .definition import Actor

if TYPE_CHECKING:
    from .runtime import ActorRef, Invocation

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_PENDING_MESSAGES",
    "EnqueueMessage",
    "QueueAPI",
    "asend",
    "send",
]

MAX_PENDING_MESSAGES = 1000
MAX_MESSAGE_BYTES = 64 * 1024
# Seconds between checks while a waiting sender's message is being handled
# elsewhere.
WAIT_POLL_INTERVAL = 0.05


def _encode_body(queue: str, body: Any) -> bytes:
    if not isinstance(queue, str) or not queue:
        raise TypeError("queue is a non-empty string")
    data = cbor_dumps(body)
    if len(data) > MAX_MESSAGE_BYTES:
        raise QueueMessageTooLarge(
            f"The message is {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES}",
            metadata={"size": len(data), "limit": MAX_MESSAGE_BYTES},
        )
    return data


def _check_queue(definition: type[Actor], queue: str) -> None:
    if queue not in definition.queue_handlers:
        raise ActionNotFound(
            f"Actor {definition.name!r} has no handler for queue {queue!r}",
            metadata={"queue": queue},
        )


def _store(invocation: Invocation, queue: str, data: bytes) -> int:
    """Insert a message under the actor's lock; wake a deliverer after commit."""
    actor_id = invocation.actor_id
    pending = QueueMessage.objects.active().filter(actor_id=actor_id).count()
    if pending >= MAX_PENDING_MESSAGES:
        raise QueueFull(
            f"The actor has {pending} pending messages; the limit is "
            f"{MAX_PENDING_MESSAGES}",
            metadata={"limit": MAX_PENDING_MESSAGES},
        )
    message = QueueMessage.objects.create(actor_id=actor_id, queue=queue, body=data)
    invocation.after_commit(scheduler.wake_queue, actor_id)
    return message.id


@dataclass(slots=True)
class EnqueueMessage:
    """Operation: store a message for one of the actor's queue handlers."""

    queue: str
    data: bytes
    label: str | None = None

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse queues the actor has no handler for."""
        _check_queue(definition, self.queue)
        self.label = f"send {self.queue}"

    def run(self, invocation: Invocation) -> tuple[uuid.UUID, int]:
        """Store the message; return ``(actor_id, message_id)``."""
        return invocation.actor_id, _store(invocation, self.queue, self.data)


class QueueAPI:
    """``ctx.queue``: send to this actor's own queues."""

    def __init__(self, invocation: Invocation) -> None:
        self._invocation = invocation

    def send(self, queue: str, body: Any) -> dict[str, Any]:
        """Enqueue ``body`` for this actor's handler of ``queue``.

        The message is stored with this invocation and handled after it
        commits, in a later invocation.
        """
        data = _encode_body(queue, body)
        _check_queue(self._invocation.definition, queue)
        _store(self._invocation, queue, data)
        return {"status": "queued"}

    async def asend(self, queue: str, body: Any) -> dict[str, Any]:
        """Async :meth:`send`."""
        return await sync_to_async(self.send)(queue, body)


def _outcome(actor_id: uuid.UUID, message_id: int) -> dict[str, Any] | None:
    """Return the reply of a processed message, ``None`` while it is not."""
    row = (
        QueueMessage.objects.filter(pk=message_id)
        .values_list("status", "response", "error")
        .first()
    )
    if row is None:
        raise ActorNotFound(
            "The actor was destroyed before handling the message",
            metadata={"actor_id": str(actor_id)},
        )
    status, response, error = row
    if status == QueueMessageStatus.DONE:
        data = bytes(response) if response is not None else b""
        return {"status": "completed", "response": cbor_loads(data) if data else None}
    if status == QueueMessageStatus.FAILED:
        raise error_from_dict(error or {})
    return None


def _deliver_and_check(actor_id: uuid.UUID, message_id: int) -> dict[str, Any] | None:
    """Deliver the queue up to ``message_id`` if possible; return its reply."""
    outcome = _outcome(actor_id, message_id)
    if outcome is None and scheduler.deliver_queue(actor_id, until=message_id):
        outcome = _outcome(actor_id, message_id)
    return outcome


def _wait_limit(timeout: float | None) -> float:
    limit = float(rivet_settings.ACTION_TIMEOUT) if timeout is None else timeout
    return time.monotonic() + max(float(limit), 0.0)


def send(
    ref: ActorRef,
    queue: str,
    body: Any,
    *,
    wait: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Store a message for the actor ``ref``; optionally wait for the reply.

    Returns ``{"status": "queued"}``, or with ``wait=True``
    ``{"status": "completed", "response": ...}`` or ``{"status": "timed_out"}``
    (``timeout`` seconds; default ``ACTION_TIMEOUT``). A handler that raised
    is re-raised as its :class:`~django_rivet.RivetError` (internal errors as
    ``rivet/internal_error``).
    """
    from .runtime import invoke

    data = _encode_body(queue, body)
    deadline = _wait_limit(timeout)
    actor_id, message_id = invoke(ref, EnqueueMessage(queue, data))
    if not wait:
        return {"status": "queued"}
    while True:
        outcome = _deliver_and_check(actor_id, message_id)
        if outcome is not None:
            return outcome
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"status": "timed_out"}
        time.sleep(min(WAIT_POLL_INTERVAL, remaining))


async def asend(
    ref: ActorRef,
    queue: str,
    body: Any,
    *,
    wait: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Async :func:`send`; waiting does not hold a thread between checks."""
    from .runtime import ainvoke, current_invocation, executor

    data = _encode_body(queue, body)
    deadline = _wait_limit(timeout)
    actor_id, message_id = await ainvoke(ref, EnqueueMessage(queue, data))
    if not wait:
        return {"status": "queued"}
    if current_invocation() is not None:
        # Inside an invocation: join its thread and transaction.
        check = sync_to_async(_deliver_and_check, thread_sensitive=True)
    else:
        check = sync_to_async(
            _deliver_and_check, thread_sensitive=False, executor=executor
        )
    while True:
        outcome = await check(actor_id, message_id)
        if outcome is not None:
            return outcome
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"status": "timed_out"}
        await asyncio.sleep(min(WAIT_POLL_INTERVAL, remaining))
