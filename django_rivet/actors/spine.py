"""The one invocation path: every entry point runs actor code through invoke().

``invoke(ref, operation, origin)``:

1. resolves the definition and lets the operation check its arguments
   (``request/invalid_args``, ``actor/action_not_found``) before any I/O; a
   ``server_only`` class is unknown to external callers;
2. opens a transaction on django-rivet's database (:mod:`..models.db`),
   bounds its lock waits on PostgreSQL (``LOCK_TIMEOUT``, ``actor/busy``)
   and locks the actor row -- ``SELECT ... FOR UPDATE`` on PostgreSQL; on
   SQLite the first statement is a write, which takes the database write
   lock, so two processes never read the same version. A reference by name
   *and* id must name the row's class (``actor/not_found`` otherwise),
   checked here once for every transport;
3. runs ``on_auth`` for external callers (HTTP, WebSocket) when the operation
   asks for it (:attr:`Operation.auth`) -- before saying whether the actor
   exists (``actor/not_found``, ``actor/already_exists``) and before
   ``create_state``, ``on_create`` and ``on_wake``, so a refused caller
   learns nothing and runs no actor code. For an actor that does not exist
   yet it runs on a provisional row (``ctx.state`` is ``None``), which is
   inserted only if the call goes on to create the actor;
4. loads the state (reusing this process's decoded copy when the row version
   matches), runs the creation and wake hooks, then the operation;
5. persists state (only if its CBOR encoding changed, and within
   ``MAX_STATE_BYTES``), connection states and the event log, in the same
   transaction as the handler's KV and ORM writes;
6. commits, then delivers broadcasts and sends (``on_commit``).

Any exception rolls everything back and propagates unchanged, except the
database's own failures: an outage becomes ``actor/unavailable`` and a lock
wait that ran out ``actor/busy`` (:func:`~.errors.database_error`). A
connection found dead before any actor code ran (a stale connection after a
database restart) is closed and the call tried once more. Transports map
exceptions to the wire with :func:`~django_rivet.actors.errors.public_error`.

Async handlers run with ``async_to_sync`` inside the invoking thread; their
ORM calls (the async ORM, thread-sensitive ``sync_to_async``) hop back into
that thread, so they share its connection and transaction. Async callers run
``invoke`` in a worker thread of :data:`executor`, never in the single
thread-sensitive thread, so one actor awaiting I/O does not stall the rest
(:func:`~django_rivet.actors.lanes.ainvoke`, above this module: it queues
one actor's async calls and serves them through :func:`invoke_since`).
Each job there starts and ends with Django's ``close_old_connections()``, as
a request does (``CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS``:
:class:`~django_rivet.models.db.WorkerThreads`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import Error as DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import clock
from ..conf import rivet_settings
from ..encoding import cbor_loads
from ..exceptions import (
    ActionTimeout,
    ActorAlreadyExists,
    ActorNotFound,
    ActorReadOnly,
    Forbidden,
    InvalidArgs,
    ReentrantCall,
    RivetError,
    UserError,
)
from ..models import db, sql
from . import cache, interceptors, reads, resolution, rows, states
from .calls import INTERNAL, Origin
from .definition import Actor
from .errors import (
    database_error,
    is_connection_failure,
    is_missing_table,
    log_missing_table,
)
from .interceptors import Call
from .invocation import (
    Invocation,
    Operation,
    action_timeout,
    active_ids,
    current,
    current_invocation,
)
from .operations import Load, RunHook
from .rows import ActorRef

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "bound_lock_wait",
    "evict_idle",
    "executor",
    "invoke",
    "invoke_since",
]

INVOKE_THREADS = 16

# Threads for invocations started from async code (see module docstring).
executor = db.WorkerThreads(INVOKE_THREADS, "rivet-invoke")

# Times a call starts over after another process created its actor first.
MAX_CREATE_RACES = 3

# Seconds between two looks for idle actors, done after an invocation.
IDLE_CHECK_INTERVAL = 1.0
_last_idle_check = 0.0


class _Raced(Exception):
    """Another process created the actor between our look and our insert."""


@dataclass(slots=True)
class _Progress:
    """How far an attempt got: past this point a failure is never retried."""

    user_code: bool = False


def invoke(ref: ActorRef, operation: Operation, origin: Origin = INTERNAL) -> Any:
    """Run ``operation`` on the actor ``ref`` atomically, one at a time.

    A database that cannot be reached raises ``actor/unavailable``, a lock
    wait past ``LOCK_TIMEOUT`` ``actor/busy`` (nothing changed in either
    case). A connection found dead before any actor code ran (a stale one,
    after a database restart) is replaced and the call tried once more.
    Actions, connects and fired work are traced, counted and logged
    (:mod:`django_rivet.observability`).
    """
    # The time limit counts from here, including the wait for the lock.
    return invoke_since(ref, operation, origin, time.monotonic())


def invoke_since(
    ref: ActorRef, operation: Operation, origin: Origin, started: float
) -> Any:
    """:func:`invoke`, its time limit counting from ``started`` (monotonic).

    Every entry point ends here (directly, or through the lanes of
    :func:`~django_rivet.actors.lanes.ainvoke`), so this is the one place
    that runs the interceptors (:mod:`.interceptors`; the built-in
    observability is the first of them).
    """

    def attempts(call: Call) -> Any:
        return _attempts(call.ref, call.operation, call.origin, started)

    return interceptors.chain(Call(ref, operation, origin), attempts)


def _attempts(
    ref: ActorRef, operation: Operation, origin: Origin, started: float
) -> Any:
    connection = db.connection()
    outermost = not connection.in_atomic_block
    retried = False
    races = 0
    while True:
        progress = _Progress()
        try:
            return _invoke(
                ref, operation, origin, started, outermost, progress, connection
            )
        except _Raced:
            # The other process's row is committed now: use it. (Losing
            # again means it was destroyed meanwhile; a few rounds at most.)
            races += 1
            if races > MAX_CREATE_RACES:
                raise ActorNotFound("The actor was destroyed while created") from None
            continue
        except DatabaseError as exc:
            if (
                outermost
                and not retried
                and not progress.user_code
                and is_connection_failure(exc)
            ):
                retried = True
                logger.info("database connection lost, retrying once: %s", exc)
                connection.close()
                continue
            coded = database_error(exc)
            if coded is not None:
                if is_missing_table(exc):
                    log_missing_table(exc)
                raise coded from exc
            raise


def _invoke(
    ref: ActorRef,
    operation: Operation,
    origin: Origin,
    started: float,
    outermost: bool,
    progress: _Progress,
    connection: BaseDatabaseWrapper,
) -> Any:
    definition = resolution.resolve_definition(ref, origin)
    deferred = resolution.prepare(operation, definition, ref, origin)
    if reads.refuses(operation):
        raise ActorReadOnly.refusing("call another actor's writing action")
    if deferred is None and getattr(operation, "readonly", False):
        return _read(
            ref, operation, origin, started, definition, outermost, progress, connection
        )
    active = active_ids.get()
    checked_out: tuple[uuid.UUID, cache.CachedActor, bool] | None = None
    try:
        # One cursor for the invocation's own statements (lock, write).
        with db.atomic(), connection.cursor() as cursor:
            bound = (
                _lock_wait_ms(definition, started, connection) if outermost else None
            )
            row = rows.fetch_locked(ref, bound, connection, origin.conn_id, cursor)
            exists = row is not None
            if row is None:
                if bound is not None:
                    bound_lock_wait(bound)  # for the creation path's waits
                if ref.actor_id is not None:
                    # By id: the caller holds the (unguessable) id already.
                    raise resolution.not_found(ref)
                # Absent: on_auth still runs (on a provisional row), so a
                # refused caller cannot tell absent from existing.
                row = rows.provisional_row(ref)
            else:
                if row.id in active:
                    raise ReentrantCall()
                definition = resolution.definition_for(ref, row, definition)
            entry, fresh, state, state_bytes, measure = cache.checkout(row, definition)
            checked_out = (row.id, entry, fresh)
            # Read from the row: migrated and typed before any hook runs.
            decoded = state_bytes is None and exists
            if decoded:
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
                not exists,
                ref.input,
                connection,
                cursor,
            )
            invocation.measure = measure
            progress.user_code = True
            active_token = active_ids.set(active | {row.id})
            current_token = current.set(invocation)
            invoking_token = db.invoking.set(True)
            try:
                result = _run(invocation, operation, fresh, ref, decoded, deferred)
            finally:
                db.invoking.reset(invoking_token)
                current.reset(current_token)
                active_ids.reset(active_token)
    except BaseException:
        # The checked-out state stays out of the cache (it may hold mutations
        # of the rolled-back transaction); a fresh instance is dropped so the
        # next load runs on_wake again.
        if checked_out is not None and checked_out[2]:
            cache.drop(checked_out[0], checked_out[1])
        raise
    _after(invocation, outermost)
    if fresh and not getattr(operation, "wakes", True):
        # Not woken (a state migration): the next call here wakes it.
        cache.drop(invocation.actor_id, invocation.cached)
    return result


def _read(
    ref: ActorRef,
    operation: Operation,
    origin: Origin,
    started: float,
    definition: type[Actor],
    outermost: bool,
    progress: _Progress,
    connection: BaseDatabaseWrapper,
) -> Any:
    """Run a read-only action without the lock (:mod:`.reads`).

    An actor absent or not loaded in this process is loaded under its lock
    first (``on_auth`` about the read, creation, ``on_wake``), then read.
    """
    found = reads.read(
        ref, operation, origin, started, definition, connection, progress, False
    )
    if found is not reads.COLD:
        return found
    running = current_invocation()
    if running is not None and running.readonly:
        # Loading writes (creation, on_wake), which a read cannot do.
        raise ActorReadOnly.refusing(
            "call an actor this process has not loaded (loading runs on_wake)"
        )
    _invoke(ref, Load(operation), origin, started, outermost, progress, connection)
    found = reads.read(
        ref, operation, origin, started, definition, connection, progress, True
    )
    if found is reads.COLD:
        # Destroyed (or evicted) between the load and the read.
        raise resolution.not_found(ref)
    return found


def _lock_wait_ms(
    definition: type[Actor], started: float, connection: BaseDatabaseWrapper
) -> int | None:
    """Return this transaction's lock wait bound (PostgreSQL ``lock_timeout``).

    ``LOCK_TIMEOUT``, but never past the invocation's own time limit; set
    with ``SET LOCAL`` semantics, so it ends with the transaction. Only the
    outermost invocation sets it: a nested one must not change the bound of
    a transaction it does not own. ``None`` where the database cannot.
    """
    if not sql.dialect(connection).bounds_lock_waits:
        return None
    limit = rivet_settings.LOCK_TIMEOUT
    seconds = action_timeout(definition) - (time.monotonic() - started)
    if limit is not None:
        seconds = min(limit, seconds)
    # 0 would mean "no limit" to PostgreSQL.
    return max(int(seconds * 1000), 1)


def bound_lock_wait(milliseconds: int) -> None:
    """Set ``lock_timeout`` for the rest of the transaction on its own.

    Usually the locking statement sets it in the same round trip
    (:func:`.rows.fetch_locked`); this is for when no row matched.
    """
    connection = db.connection()
    sql.dialect(connection).bound_lock_wait(connection, milliseconds)


def _run(
    invocation: Invocation,
    operation: Operation,
    fresh: bool,
    ref: ActorRef,
    decoded: bool,
    deferred: RivetError | None = None,
) -> Any:
    if decoded:
        invocation.state = states.load(invocation, invocation.state)
    auth = operation.auth
    if auth is not None:
        try:
            invocation.authorize(auth)
        except (Forbidden, UserError) as refused:
            if resolution.by_id_from_outside(ref, invocation.origin):
                # By id, a refused caller cannot tell this actor from an
                # absent one (an absent id has no on_auth to ask).
                raise resolution.not_found(ref) from refused
            raise
    if deferred is not None:
        raise deferred
    # Only an authorized caller learns whether the actor exists.
    if invocation.created:
        if ref.mode == "get":
            raise resolution.not_found(ref)
        if invocation.origin.external and not invocation.definition.create_from_clients:
            raise Forbidden(
                f"Actors of {invocation.definition.name!r} are created by server "
                "code only",
                metadata={"name": invocation.definition.name},
            )
        if not rows.insert_row(invocation.row):
            raise _Raced()
        definition = invocation.definition
        shape = states.input_shape(definition)
        if shape is not None:
            invocation.input = shape.load(invocation.input, "input", InvalidArgs)
        invocation.state = states.typed(
            definition,
            invocation.call(
                invocation.instance.create_state, invocation.ctx, invocation.input
            ),
        )
        invocation.call_hook("on_create", invocation.input)
        if definition.overrides("on_state_change"):
            invocation.created_bytes, invocation.state = states.encode(
                definition, invocation.state
            )
    elif ref.mode == "create":
        raise ActorAlreadyExists(
            f"Actor {ref.name!r} with key {list(ref.key)!r} already exists",
            metadata={"actor_id": str(invocation.actor_id)},
        )
    if fresh and getattr(operation, "wakes", True):
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


def _after(invocation: Invocation, outermost: bool) -> None:
    """Update the process cache once the transaction is over."""
    entry = invocation.cached
    if invocation.destroy_requested or invocation.sleep_requested:
        cache.drop(invocation.actor_id, entry)
        return
    if not outermost:
        # Nested in the caller's transaction: it may still roll back, so
        # the state is not known to be committed; don't cache it.
        return
    cache.store(
        invocation.actor_id,
        entry,
        invocation.state,
        invocation.state_bytes,
        invocation.row.version,
        invocation.measure,
    )
    _maybe_evict_idle()


def _maybe_evict_idle() -> None:
    global _last_idle_check
    now = clock.now()
    if now - _last_idle_check < IDLE_CHECK_INTERVAL:
        return
    _last_idle_check = now
    if current_invocation() is None and not db.in_atomic_block():
        evict_idle()


def evict_idle(max_idle: float | None = None) -> int:
    """Evict actors idle longer than ``SLEEP_TIMEOUT``; run their ``on_sleep``.

    Returns how many were evicted. Best effort: a failing ``on_sleep`` is
    logged and the actor is evicted anyway.
    """
    limit = rivet_settings.SLEEP_TIMEOUT if max_idle is None else max_idle
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
