"""Actor queues: durable FIFO messages for ``@queue_handler``\\ s (docs/scheduling.md).

A message is stored in the sender's transaction (``ctx.queue.send``) or in an
invocation of the receiving actor (``handle.send``), which locks the actor so
the pending-count limit is exact. Delivery runs each handler once, in order,
through the invocation path
(:func:`~.queue_delivery.deliver_queue`), following :mod:`.claims`.

A sender that waits (``wait=True``) has the queue delivered up to its own
message right after the commit, in a worker thread of the invocation
executor, and reads the stored reply, so waiting works with no worker
running. The sender stops waiting at ``timeout`` even while the handler
runs: the delivery goes on without it and the message is handled once. If
another process holds the head of the queue it polls until the reply is
there or ``timeout`` passes. A sender inside a transaction (an actor
handler, an atomic block) delivers in its own thread instead: its message
is not committed, so no other thread can see it; ``timeout`` then only
bounds the polling.

Delivery, retries and failures are :mod:`.queue_delivery`. A waiting
sender is answered ``{"status": "failed", "error": {...}}`` as soon as its
message failed for good.

Limits: at most ``MAX_PENDING_MESSAGES`` unprocessed messages per actor and
``MAX_MESSAGE_BYTES`` per encoded body, unless the actor class sets
``queue_max_pending`` / ``queue_max_message_bytes``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import observability
from ..actors.calls import INTERNAL, AuthRequest, Origin
from ..actors.definition import Actor
from ..actors.invocation import current_invocation
from ..actors.lanes import ainvoke
from ..actors.rows import ActorRef
from ..actors.spine import executor, invoke
from ..conf import rivet_settings
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import (
    ActionNotFound,
    ActorNotFound,
    QueueFull,
    QueueMessageTooLarge,
)
from ..models import QueueMessage, QueueMessageStatus, db
from .queue_delivery import deliver_queue, wake_queue

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

logger = logging.getLogger("django_rivet.scheduling")

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_PENDING_MESSAGES",
    "EnqueueMessage",
    "ActorQueue",
    "asend",
    "send",
]

MAX_PENDING_MESSAGES = 1000
MAX_MESSAGE_BYTES = 64 * 1024
# Seconds between checks while a waiting sender's message is being handled
# elsewhere.
WAIT_POLL_INTERVAL = 0.05


def _check_queue_name(queue: str) -> None:
    if not isinstance(queue, str) or not queue:
        raise TypeError("queue is a non-empty string")


def _encode_body(definition: type[Actor], queue: str, body: Any) -> bytes:
    """Encode ``body`` for the handler of ``queue`` (which must exist).

    A handler that annotates its message (docs/types.md) gets a body given
    in this process as the wire carries it, checked now: a body that does
    not fit is ``request/invalid_args`` naming its path (``body.items[0]``),
    and nothing is stored.
    """
    types = definition.queue_handlers[queue].types
    if types is not None and not types.plain:
        body = types.dump_body(body)
        types.load_body(body)
    return cbor_dumps(body, "body")


def _check_size(definition: type[Actor], data: bytes) -> None:
    limit = definition.queue_max_message_bytes or MAX_MESSAGE_BYTES
    if len(data) > limit:
        raise QueueMessageTooLarge(
            f"The message is {len(data)} bytes; the limit is {limit}",
            metadata={"size": len(data), "limit": limit},
        )


def _check_queue(definition: type[Actor], queue: str) -> None:
    if queue not in definition.queue_handlers:
        raise ActionNotFound(
            f"The actor has no handler for queue {queue!r}",
            metadata={"queue": queue},
        )


def _store(invocation: Invocation, queue: str, data: bytes) -> int:
    """Insert a message under the actor's lock; wake a deliverer after commit."""
    actor_id = invocation.actor_id
    limit = invocation.definition.queue_max_pending or MAX_PENDING_MESSAGES
    pending = QueueMessage.objects.active().filter(actor_id=actor_id).count()
    if pending >= limit:
        raise QueueFull(
            f"The actor has {pending} pending messages; the limit is {limit}",
            metadata={"limit": limit},
        )
    message = QueueMessage.objects.create(
        actor_id=actor_id,
        queue=queue,
        body=data,
        traceparent=observability.traceparent(),
    )
    invocation.after_commit(wake_queue, actor_id)
    return message.id


@dataclass(slots=True)
class EnqueueMessage:
    """Operation: store a message for one of the actor's queue handlers."""

    queue: str
    body: Any
    label: str | None = None
    # The body encoded for its handler (prepare).
    data: bytes = b""

    @property
    def auth(self) -> AuthRequest:
        """Ask ``on_auth`` about sending to this queue."""
        return AuthRequest("queue", queue=self.queue)

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse queues the actor has no handler for, and oversized bodies."""
        _check_queue(definition, self.queue)
        self.data = _encode_body(definition, self.queue, self.body)
        _check_size(definition, self.data)
        self.label = f"send {self.queue}"

    def run(self, invocation: Invocation) -> tuple[uuid.UUID, int]:
        """Store the message; return ``(actor_id, message_id)``."""
        return invocation.actor_id, _store(invocation, self.queue, self.data)


class ActorQueue:
    """``ctx.queue`` (:class:`~django_rivet.actors.services.QueueAPI`).

    Send to this actor's own queues.
    """

    def __init__(self, invocation: Invocation) -> None:
        self._invocation = invocation

    def send(self, queue: str, body: Any) -> dict[str, Any]:
        """Enqueue ``body`` for this actor's handler of ``queue``.

        The message is stored with this invocation and handled after it
        commits, in a later invocation.
        """
        _check_queue_name(queue)
        _check_queue(self._invocation.definition, queue)
        data = _encode_body(self._invocation.definition, queue, body)
        _check_size(self._invocation.definition, data)
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
        error = error or {}
        # The wire form only: "detail" (the exception text) stays server-side.
        return {
            "status": "failed",
            "error": {
                "group": error.get("group", "rivet"),
                "code": error.get("code", "internal_error"),
                "message": error.get("message", ""),
                "metadata": error.get("metadata"),
            },
        }
    return None


def _deliver_and_check(actor_id: uuid.UUID, message_id: int) -> dict[str, Any] | None:
    """Deliver the queue up to ``message_id`` if possible; return its reply."""
    outcome = _outcome(actor_id, message_id)
    if outcome is None and deliver_queue(actor_id, until=message_id):
        outcome = _outcome(actor_id, message_id)
    return outcome


def _wait_limit(timeout: float | None) -> float:
    limit = rivet_settings.ACTION_TIMEOUT if timeout is None else timeout
    return time.monotonic() + max(float(limit), 0.0)


def _log_late_failure(delivery: Future[Any]) -> None:
    """Log a delivery that failed after its sender stopped waiting."""
    if not delivery.cancelled() and delivery.exception() is not None:
        # A handler's own error is recorded on the message; this is the
        # delivery machinery itself failing (the database, typically).
        logger.error("queue delivery failed", exc_info=delivery.exception())


def _wait_for_reply(
    actor_id: uuid.UUID, message_id: int, deadline: float
) -> dict[str, Any]:
    """Deliver in a worker thread; stop waiting for it at ``deadline``."""

    def deliver() -> dict[str, Any] | None:
        delivery = executor.submit(_deliver_and_check, actor_id, message_id)
        try:
            return delivery.result(timeout=max(deadline - time.monotonic(), 0.0))
        except FutureTimeout:
            # The handler is still running: it finishes without us.
            delivery.add_done_callback(_log_late_failure)
            return {"status": "timed_out"}

    return _poll(deliver, deadline)


def _wait_inline(
    actor_id: uuid.UUID, message_id: int, deadline: float
) -> dict[str, Any]:
    """Deliver in this thread and transaction (the message is not committed)."""
    return _poll(lambda: _deliver_and_check(actor_id, message_id), deadline)


def _poll(
    deliver: Callable[[], dict[str, Any] | None], deadline: float
) -> dict[str, Any]:
    """Call ``deliver`` until it answers, or ``deadline`` passes."""
    while True:
        outcome = deliver()
        if outcome is not None:
            return outcome
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"status": "timed_out"}
        time.sleep(min(WAIT_POLL_INTERVAL, remaining))


def send(
    ref: ActorRef,
    queue: str,
    body: Any,
    *,
    wait: bool = False,
    timeout: float | None = None,
    origin: Origin | None = None,
) -> dict[str, Any]:
    """Store a message for the actor ``ref``; optionally wait for the reply.

    Returns ``{"status": "queued"}``, or with ``wait=True``
    ``{"status": "completed", "response": ...}``, ``{"status": "failed",
    "error": {group, code, message, metadata}}`` once the handler failed for
    good (its retries spent, or a ``UserError``; internal errors as
    ``rivet/internal_error``), or ``{"status": "timed_out"}`` (after
    ``timeout`` seconds, default ``ACTION_TIMEOUT``, even if the handler is
    still running or waits for a retry; the message stays queued and is
    handled once).
    """
    _check_queue_name(queue)
    deadline = _wait_limit(timeout)
    operation = EnqueueMessage(queue, body)
    actor_id, message_id = invoke(ref, operation, origin or INTERNAL)
    if not wait:
        return {"status": "queued"}
    if db.in_atomic_block():
        return _wait_inline(actor_id, message_id, deadline)
    return _wait_for_reply(actor_id, message_id, deadline)


async def asend(
    ref: ActorRef,
    queue: str,
    body: Any,
    *,
    wait: bool = False,
    timeout: float | None = None,
    origin: Origin | None = None,
) -> dict[str, Any]:
    """Async :func:`send`; waiting does not hold a thread between checks."""
    _check_queue_name(queue)
    deadline = _wait_limit(timeout)
    operation = EnqueueMessage(queue, body)
    actor_id, message_id = await ainvoke(ref, operation, origin or INTERNAL)
    if not wait:
        return {"status": "queued"}
    if current_invocation() is not None:
        # Inside an invocation: join its thread and transaction.
        inline = sync_to_async(_wait_inline, thread_sensitive=True)
        result: dict[str, Any] = await inline(actor_id, message_id, deadline)
        return result
    while True:
        # A thread-pool future, not a task: it runs to the end even if this
        # sender's event loop is gone by then.
        delivery = executor.submit(_deliver_and_check, actor_id, message_id)
        done, _ = await asyncio.wait(
            {asyncio.wrap_future(delivery)},
            timeout=max(deadline - time.monotonic(), 0.0),
        )
        if not done:
            # The handler is still running: it finishes without us.
            delivery.add_done_callback(_log_late_failure)
            return {"status": "timed_out"}
        outcome = delivery.result()
        if outcome is not None:
            return outcome
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"status": "timed_out"}
        await asyncio.sleep(min(WAIT_POLL_INTERVAL, remaining))
