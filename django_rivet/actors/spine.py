"""The one invocation path: every entry point runs actor code through invoke().

``invoke(ref, operation, origin)``:

1. resolves the definition and lets the operation check its arguments
   (``request/invalid_args``, ``actor/action_not_found``) before any I/O;
2. opens a transaction and locks the actor row -- ``SELECT ... FOR UPDATE`` on
   PostgreSQL; on SQLite the first statement is a write, which takes the
   database write lock, so two processes never read the same version. A
   reference by name *and* id must name the row's class (``actor/not_found``
   otherwise), checked here once for every transport;
3. runs ``on_auth`` for external callers (HTTP, WebSocket) when the operation
   asks for it (:attr:`Operation.auth`) -- before ``create_state``,
   ``on_create`` and ``on_wake``, so a refused caller runs no actor code;
4. loads the state (reusing this process's decoded copy when the row version
   matches), runs the creation and wake hooks, then the operation;
5. persists state (only if its CBOR encoding changed), connection states and
   the event log, in the same transaction as the handler's KV and ORM writes;
6. commits, then delivers broadcasts and sends (``transaction.on_commit``).

Any exception rolls everything back and propagates unchanged; transports map
it to the wire with :func:`~django_rivet.actors.errors.public_error`.

Async handlers run with ``async_to_sync`` inside the invoking thread; their
ORM calls (the async ORM, thread-sensitive ``sync_to_async``) hop back into
that thread, so they share its connection and transaction. Async callers run
``invoke`` in a worker thread of :data:`executor`, never in the single
thread-sensitive thread, so one actor awaiting I/O does not stall the rest.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections, transaction

from .. import clock
from ..conf import rivet_settings
from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import ActionTimeout, ActorNotFound, ReentrantCall
from ..models import Actor as ActorRow
from . import cache, registry, rows
from .definition import Actor
from .invocation import (
    INTERNAL,
    Invocation,
    Operation,
    Origin,
    active_ids,
    current,
    current_invocation,
)
from .operations import RunHook
from .rows import ActorRef

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "ainvoke",
    "close_worker_connections",
    "evict_idle",
    "executor",
    "invoke",
]

INVOKE_THREADS = 16

# Threads for invocations started from async code (see module docstring).
executor = ThreadPoolExecutor(
    max_workers=INVOKE_THREADS, thread_name_prefix="rivet-invoke"
)

# Seconds between two looks for idle actors, done after an invocation.
IDLE_CHECK_INTERVAL = 1.0
_last_idle_check = 0.0


def _resolve_definition(ref: ActorRef) -> type[Actor]:
    if ref.name is not None:
        return registry.get(ref.name)
    assert ref.actor_id is not None
    # An actor loaded in this process needs no lookup; invoke() checks the
    # locked row's name anyway, in case the id now belongs to another class.
    definition = cache.cached_definition(ref.actor_id)
    if definition is not None:
        # The registry, not the cache, says which class serves the name now.
        return registry.get(definition.name)
    name = (
        ActorRow.objects.filter(pk=ref.actor_id).values_list("name", flat=True).first()
    )
    if name is None:
        raise ActorNotFound("Actor not found", metadata={"actor_id": str(ref.actor_id)})
    return registry.get(name)


def _definition_for(
    ref: ActorRef, row: rows.LockedRow, found: type[Actor]
) -> type[Actor]:
    """Return the class serving the locked row; refuse a name/id mismatch."""
    if row.name == found.name:
        return found
    if ref.name is not None:
        # ?actor_id= names an actor of another class than the URL (or key).
        raise ActorNotFound(
            "Actor not found",
            metadata={"name": ref.name, "actor_id": str(row.id)},
        )
    return registry.get(row.name)


def invoke(ref: ActorRef, operation: Operation, origin: Origin = INTERNAL) -> Any:
    """Run ``operation`` on the actor ``ref`` atomically, one at a time."""
    definition = _resolve_definition(ref)
    operation.prepare(definition)
    # The time limit counts from here, including the wait for the lock.
    started = time.monotonic()
    active = active_ids.get()
    checked_out: tuple[uuid.UUID, cache.CachedActor, bool] | None = None
    try:
        with transaction.atomic():
            row, created = rows.lock_row(ref)
            if row.id in active:
                raise ReentrantCall()
            definition = _definition_for(ref, row, definition)
            entry, fresh, state, state_bytes = cache.checkout(row, definition)
            checked_out = (row.id, entry, fresh)
            if state_bytes is None and not created:
                state_bytes = bytes(row.state)
                state = cbor_loads(state_bytes) if state_bytes else None
            invocation = Invocation(
                row,
                definition,
                entry,
                state,
                state_bytes or b"",
                origin,
                started,
                created,
                ref.input,
            )
            active_token = active_ids.set(active | {row.id})
            current_token = current.set(invocation)
            try:
                result = _run(invocation, operation, fresh)
            finally:
                current.reset(current_token)
                active_ids.reset(active_token)
    except BaseException:
        # The checked-out state stays out of the cache (it may hold mutations
        # of the rolled-back transaction); a fresh instance is dropped so the
        # next load runs on_wake again.
        if checked_out is not None and checked_out[2]:
            cache.drop(checked_out[0], checked_out[1])
        raise
    _after(invocation)
    return result


def _run(invocation: Invocation, operation: Operation, fresh: bool) -> Any:
    auth = operation.auth
    if auth is not None:
        invocation.authorize(auth)
    if invocation.created:
        invocation.state = invocation.call(
            invocation.instance.create_state, invocation.ctx, invocation.input
        )
        invocation.call_hook("on_create", invocation.input)
        if invocation.definition.overrides("on_state_change"):
            invocation.created_bytes = cbor_dumps(invocation.state)
    if fresh:
        invocation.call_hook("on_wake")
    if invocation.origin.conn_id is not None and invocation.conn is None:
        invocation.conn = invocation.load_conn(invocation.origin.conn_id)
    result = operation.run(invocation)
    if invocation.destroy_requested:
        invocation.destroy_now()
        return result
    if invocation.sleep_requested:
        invocation.call_hook("on_sleep")
    invocation.persist()
    if invocation.timed_out():
        raise ActionTimeout()
    return result


def _after(invocation: Invocation) -> None:
    """Update the process cache once the transaction is over."""
    entry = invocation.cached
    if invocation.destroy_requested or invocation.sleep_requested:
        cache.drop(invocation.actor_id, entry)
        return
    if transaction.get_connection().in_atomic_block:
        # Nested in the caller's transaction: it may still roll back, so
        # the state is not known to be committed; don't cache it.
        return
    cache.store(
        invocation.actor_id,
        entry,
        invocation.state,
        invocation.state_bytes,
        invocation.row.version,
    )
    _maybe_evict_idle()


def _maybe_evict_idle() -> None:
    global _last_idle_check
    now = clock.now()
    if now - _last_idle_check < IDLE_CHECK_INTERVAL:
        return
    _last_idle_check = now
    if (
        current_invocation() is None
        and not transaction.get_connection().in_atomic_block
    ):
        evict_idle()


def evict_idle(max_idle: float | None = None) -> int:
    """Evict actors idle longer than ``SLEEP_TIMEOUT``; run their ``on_sleep``.

    Returns how many were evicted. Best effort: a failing ``on_sleep`` is
    logged and the actor is evicted anyway.
    """
    limit = float(rivet_settings.SLEEP_TIMEOUT if max_idle is None else max_idle)
    evicted = 0
    for actor_id, entry in cache.idle_entries(limit):
        if entry.definition.overrides("on_sleep"):
            try:
                invoke(ActorRef.by_id(actor_id), RunHook("sleep"))
            except ActorNotFound:
                pass
            except Exception:
                logger.exception("on_sleep failed actor_id=%s", actor_id)
        cache.drop(actor_id, entry)
        evicted += 1
    return evicted


async def ainvoke(
    ref: ActorRef, operation: Operation, origin: Origin = INTERNAL
) -> Any:
    """Async :func:`invoke`: runs in a worker thread of its own.

    Inside an invocation (an async handler calling another actor) it runs in
    the invoking thread instead, so the call joins that transaction.
    """
    if current_invocation() is not None:
        return await sync_to_async(invoke, thread_sensitive=True)(
            ref, operation, origin
        )
    return await sync_to_async(invoke, thread_sensitive=False, executor=executor)(
        ref, operation, origin
    )


def close_worker_connections() -> None:
    """Close the database connections of every invocation worker thread.

    Worker threads keep their connection between invocations (reconnecting
    each time would cost more than the invocation). Call this before
    dropping a database, e.g. at the end of a test session.
    """
    size = INVOKE_THREADS
    # Every job waits for all the others, so each runs in a thread of its own.
    barrier = threading.Barrier(size, timeout=10)

    def close() -> None:
        connections.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()

    for future in [executor.submit(close) for _ in range(size)]:
        future.result()
