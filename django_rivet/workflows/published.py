"""Reading what workflows publish: events (``get_event``) and replies (``request``).

The engine writes both into the workflow's own namespace (``WorkflowKV``
keys of the published-values family, see ``docs/storage-format.md``) in the
flush that records the ``event`` or ``reply`` entry; here they are read
with one indexed query.

A waiting ``request`` helps, as a waiting queue sender does: when the
workflow is due and no worker holds it, the caller runs it right here until
the reply is recorded (the run then stops and the workflow is due again, for
a worker to carry on). So a request works with no worker running, in tests
under ``freeze_time``, and from inside a transaction (an actor action),
where the message is not committed and no worker could see it. Otherwise
it polls, like ``handle.result()`` -- except inside an actor invocation:
there nothing can answer while it waits (its message is not committed) and
the wait would hold the invocation's transaction, on SQLite every write of
the process, so a request that the run here did not answer is withdrawn
and refused at once (``workflow/cannot_wait``), as is any other wait for a
workflow (:func:`refuse_wait`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async

from ..conf import rivet_settings
from ..engine import WorkflowNoReply, WorkflowRequestTimeout, keys, schema
from ..exceptions import WorkflowCannotWait
from ..models import WORKFLOW_FINISHED, WorkflowKV, WorkflowMessage, db
from ..models.base import prefix_end
from . import execution, history_cache, operations, sends

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "POLL_FIRST",
    "POLL_MAX",
    "aget_event",
    "arequest",
    "get_event",
    "read_event",
    "read_events",
    "refuse_wait",
    "request",
    "take_reply",
]

POLL_FIRST = 0.02
POLL_MAX = 0.5

_NOT_SET = object()


def _read(workflow_id: str, key: bytes, record_type: str) -> Any:
    found = WorkflowKV.objects.filter(workflow_id=workflow_id, key=key)
    value = found.values_list("value", flat=True).first()
    if value is None:
        return _NOT_SET
    return schema.decode_published(record_type, bytes(value))


def read_event(workflow_id: str, key: str) -> tuple[bool, Any]:
    """Return ``(found, value)`` of the event ``key`` of ``workflow_id``."""
    value = _read(workflow_id, keys.event_key(key), "event")
    return (False, None) if value is _NOT_SET else (True, value)


def read_events(workflow_id: str) -> dict[str, Any]:
    """Return every event ``workflow_id`` published, key to its latest value."""
    operations.status(workflow_id)  # workflow/not_found for an unknown id
    prefix = keys.pack((keys.PUBLISHED, keys.EVENT))
    rows = WorkflowKV.objects.filter(workflow_id=workflow_id, key__gte=prefix)
    upper = prefix_end(prefix)
    if upper is not None:
        rows = rows.filter(key__lt=upper)
    found: dict[str, Any] = {}
    for key, value in rows.order_by("key").values_list("key", "value"):
        name = str(keys.unpack(bytes(key))[2])
        found[name] = schema.decode_published("event", bytes(value))
    return found


def take_reply(workflow_id: str, message_id: str) -> tuple[bool, Any]:
    """Return ``(found, value)`` of the reply to ``message_id``, removing it.

    The reply is the requester's alone: reading it takes it, so replies do
    not pile up in a long-lived workflow's namespace.
    """
    key = keys.reply_key(message_id)
    value = _read(workflow_id, key, "reply")
    if value is _NOT_SET:
        return False, None
    with db.atomic():  # a write without the lease: no cached history holds
        WorkflowKV.objects.filter(workflow_id=workflow_id, key=key).delete()
        history_cache.invalidate(workflow_id)
    return True, value


_INSTEAD = (
    "Send with handle.send() in the action and let the workflow answer the "
    "actor (a step calling it, or its schedule), or wait outside the action "
    "(in the view or task that calls it), or read without waiting "
    "(handle.status, handle.get_event(key) without a timeout)."
)


def refuse_wait(what: str, workflow_id: str) -> WorkflowCannotWait:
    """Return the error for a wait inside an actor invocation, and log it.

    ``what`` names the call (``handle.result()``...). Nothing the wait could
    see changes before the invocation commits, and waiting would hold its
    transaction. The message says what to do instead; the workflow id is
    only logged, not sent to the action's caller.
    """
    logger.warning(
        "wait for a workflow refused inside an actor invocation workflow=%s call=%s",
        workflow_id,
        what,
    )
    return WorkflowCannotWait(
        f"{what} cannot wait for a workflow inside an actor invocation: the "
        "wait would hold the invocation's transaction (on SQLite, every write "
        f"of the process) and nothing it waits for is committed. {_INSTEAD}"
    )


def _limit(timeout: float | None) -> float:
    limit = rivet_settings.ACTION_TIMEOUT if timeout is None else timeout
    if limit <= 0:
        raise ValueError("A request timeout must be positive")
    return float(limit)


# -- get_event -------------------------------------------------------------------------
def _event_step(workflow_id: str, key: str) -> tuple[bool, Any]:
    """One look: ``(True, value)`` once set, ``(True, None)`` once it never can be."""
    found, value = read_event(workflow_id, key)
    if found:
        return True, value
    if operations.status(workflow_id) in WORKFLOW_FINISHED:
        # It may have been set just before the end.
        found, value = read_event(workflow_id, key)
        return True, value if found else None
    return False, None


def _event_pause(
    workflow_id: str, deadline: float | None, delay: float
) -> float | None:
    """Return how long to wait before looking again; None past the deadline.

    Inside an actor invocation a wait is refused (:func:`refuse_wait`).
    """
    remaining = 0.0 if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        return None
    if db.in_invocation():
        raise refuse_wait("handle.get_event(key, timeout=...)", workflow_id)
    return min(delay, remaining)


def get_event(workflow_id: str, key: str, timeout: float | None = None) -> Any:
    """Return the latest value of event ``key``; wait up to ``timeout`` for one.

    None when it was never set: at once without ``timeout``, after
    ``timeout`` seconds otherwise, or as soon as the workflow finished.
    """
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    delay = POLL_FIRST
    while True:
        done, value = _event_step(workflow_id, key)
        if done:
            return value
        pause = _event_pause(workflow_id, deadline, delay)
        if pause is None:
            return None
        time.sleep(pause)
        delay = min(delay * 2, POLL_MAX)


async def aget_event(workflow_id: str, key: str, timeout: float | None = None) -> Any:
    """Async :func:`get_event`; waiting does not hold a thread between looks."""
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    delay = POLL_FIRST
    while True:
        done, value = await sync_to_async(_event_step)(workflow_id, key)
        if done:
            return value
        pause = _event_pause(workflow_id, deadline, delay)
        if pause is None:
            return None
        await asyncio.sleep(pause)
        delay = min(delay * 2, POLL_MAX)


# -- request ---------------------------------------------------------------------------
def _request_step(workflow_id: str, message_id: str) -> tuple[bool, Any]:
    """Look for the reply once, running the workflow here if it is due.

    Returns ``(True, reply)`` once replied; raises ``WorkflowNoReply`` once
    the workflow finished without replying; ``(False, None)`` meanwhile.
    """
    for _ in range(2):
        found, value = take_reply(workflow_id, message_id)
        if found:
            return True, value
        if operations.status(workflow_id) in WORKFLOW_FINISHED:
            # The reply may have been recorded with the end: look again.
            found, value = take_reply(workflow_id, message_id)
            if found:
                return True, value
            raise WorkflowNoReply(
                f"Workflow {workflow_id!r} ended without replying to the request",
                metadata={"workflow_id": workflow_id, "message_id": message_id},
            )
        ran = execution.run(workflow_id, max_passes=1, stop_after_reply=message_id)
        if ran is None:
            break  # not due, or a worker has it: wait
    return False, None


def _withdraw(workflow_id: str, message_id: str) -> bool:
    """Delete the request's message if the workflow has not received it yet."""
    found = WorkflowMessage.objects.filter(pk=int(message_id), workflow_id=workflow_id)
    return bool(found.delete()[0])


def _request_here(workflow_id: str, message_id: str) -> Any:
    """Answer a request inside an invocation from a run here, or refuse it.

    The run here (:func:`_request_step`) is the only thing that can answer
    before the invocation commits; if it did not, waiting would only hold
    the transaction. The message is withdrawn, so an action that catches
    the refusal leaves no request behind.
    """
    done, value = _request_step(workflow_id, message_id)
    if done:
        return value
    _withdraw(workflow_id, message_id)
    raise refuse_wait("handle.request()", workflow_id)


def _timed_out(workflow_id: str, name: str, message_id: str, limit: float) -> None:
    # Withdraw the request if the workflow has not received it yet: nobody
    # waits for its answer any more.
    withdrawn = _withdraw(workflow_id, message_id)
    logger.info(
        "workflow request timed out workflow=%s name=%s withdrawn=%s",
        workflow_id,
        name,
        bool(withdrawn),
    )
    raise WorkflowRequestTimeout(
        f"Workflow {workflow_id!r} did not reply to {name!r} within {limit:g} seconds",
        metadata={"workflow_id": workflow_id, "message_id": message_id},
    )


def request(
    workflow_id: str, name: str, body: Any = None, timeout: float | None = None
) -> Any:
    """Send message ``name`` and return the workflow's reply (``ctx.reply``).

    Raises ``WorkflowRequestTimeout`` (``workflow/request_timeout``) after
    ``timeout`` seconds (default ``RIVET["ACTION_TIMEOUT"]``; the request is
    withdrawn if the workflow has not received it yet) and ``WorkflowNoReply``
    (``workflow/no_reply``) as soon as the workflow finishes without
    replying. Inside an actor invocation it never waits: the workflow runs
    here up to its reply, or the request is withdrawn and refused
    (``workflow/cannot_wait``).
    """
    limit = _limit(timeout)
    deadline = time.monotonic() + limit
    message_id = sends.send(workflow_id, name, body)
    if db.in_invocation():
        return _request_here(workflow_id, message_id)
    delay = POLL_FIRST
    while True:
        done, value = _request_step(workflow_id, message_id)
        if done:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _timed_out(workflow_id, name, message_id, limit)
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, POLL_MAX)


async def arequest(
    workflow_id: str, name: str, body: Any = None, timeout: float | None = None
) -> Any:
    """Async :func:`request`; waiting does not hold a thread between looks.

    Inside an actor invocation it runs in the invocation's thread and
    transaction, as the sync one does.
    """
    if db.in_invocation():
        inline = sync_to_async(request, thread_sensitive=True)
        return await inline(workflow_id, name, body, timeout)
    limit = _limit(timeout)
    deadline = time.monotonic() + limit
    message_id = await sync_to_async(sends.send)(workflow_id, name, body)
    # A run of the workflow may take a while: off the thread-sensitive one.
    step = sync_to_async(_request_step, thread_sensitive=False)
    delay = POLL_FIRST
    while True:
        done, value = await step(workflow_id, message_id)
        if done:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            await sync_to_async(_timed_out)(workflow_id, name, message_id, limit)
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, POLL_MAX)
