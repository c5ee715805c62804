"""Read-only actions: no lock, the latest committed state, nothing written.

An action marked ``@action(readonly=True)`` runs here instead of under the
actor's lock (:func:`read`, called by the spine): concurrently with other
reads and with a running write, which it never waits for. It sees the
latest *committed* state -- a write in progress holds its changes in its
own transaction, and its rollback is never seen:

1. one plain read of the actor row (no ``FOR UPDATE``; on SQLite a read,
   which WAL lets run beside the writer) -- the state's bytes only when
   this process does not hold that version already (:func:`.cache.read_hint`);
   the calling connection's row rides along;
2. the action runs on its own decoded copy of that state (a concurrent
   write never sees it, nor it the write's), with ``ctx.conn`` for a
   WebSocket call and ``on_auth`` asked as for any action;
3. nothing is written: the read runs in a transaction (a savepoint when
   nested) that the database itself keeps read-only -- PostgreSQL's
   ``transaction_read_only``, set in the same statement as the read;
   SQLite's ``PRAGMA query_only`` -- and that is rolled back at the end.
   ``ctx`` refuses every write before it reaches the database
   (``actor/readonly``: state, KV, schedules, cron, queues, workflows,
   events, ``after_commit``, destroy), and a state or ``conn.state``
   changed in place is found by encoding it afterwards.

An actor this process has not loaded yet (or that does not exist) has no
instance to run on: :func:`read` answers :data:`COLD`, and the spine loads
it under the lock first -- creating it if the call's mode says so, running
``on_auth``, ``create_state``, ``on_create`` and ``on_wake`` there -- then
reads. From then on its reads take no lock in this process.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from django.db import Error as DatabaseError
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..encoding import cbor_loads
from ..exceptions import ActionTimeout, ActorReadOnly, ReentrantCall
from ..models import db, sql
from . import cache, registry, rows
from .calls import Origin
from .definition import Actor
from .errors import is_read_only_write
from .invocation import Invocation, Operation, active_ids, current, current_invocation
from .rows import ActorRef

logger = logging.getLogger("django_rivet.actors")

__all__ = ["COLD", "is_read_only_call", "read", "refuses"]

#: :func:`read`'s answer when the actor must be loaded under its lock first.
COLD: Any = object()


class Progress(Protocol):
    """Where the spine notes that actor code ran (no retry past that point)."""

    user_code: bool


def is_read_only_call(ref: ActorRef, operation: Operation) -> bool:
    """Tell, before any I/O, whether ``operation`` runs a read-only action.

    For the lanes: such calls do not queue behind the actor's writes. A
    call whose class is not known without a query says no (the spine
    still reads without the lock, inside the lane's transaction).
    """
    action = getattr(operation, "action", None)
    if not isinstance(action, str):
        return False
    if ref.name is not None:
        definition = registry.all_actors().get(ref.name)
    elif ref.actor_id is not None:
        definition = cache.cached_definition(ref.actor_id)
    else:  # pragma: no cover - a reference names one or the other
        return False
    spec = definition.actions.get(action) if definition is not None else None
    return spec is not None and spec.readonly


def refuses(operation: Operation) -> bool:
    """Tell whether a read-only call in progress must refuse ``operation``.

    Inside a read-only action, only other read-only actions may be called
    (a write would commit, or fail on the read-only transaction).
    """
    running = current_invocation()
    return (
        running is not None
        and running.readonly
        and not getattr(operation, "readonly", False)
    )


def read(
    ref: ActorRef,
    operation: Operation,
    origin: Origin,
    started: float,
    definition: type[Actor],
    connection: BaseDatabaseWrapper,
    progress: Progress,
    authorized: bool,
) -> Any:
    """Run the read-only ``operation`` on the latest committed state.

    Returns its result, or :data:`COLD` when the actor is absent or not
    loaded in this process (nothing ran). ``authorized``: ``on_auth``
    allowed the call already (the spine's load).
    """
    held_id, held_version, held_bytes = cache.read_hint(ref.name, ref.key, ref.actor_id)
    dialect = sql.dialect(connection)
    unusable = False
    with db.atomic(), connection.cursor() as cursor:
        dialect.begin_read_only(connection)
        try:
            found = rows.fetch_committed(
                ref, (held_id, held_version), connection, cursor, origin.conn_id
            )
            if found is None:
                return COLD
            row, same = found
            entry = cache.reader(row.id, definition)
            if entry is None or row.name != definition.name:
                return COLD
            if row.id in active_ids.get():
                raise ReentrantCall()
            state_bytes = held_bytes if same and held_bytes is not None else row.state
            invocation = Invocation(
                row,
                definition,
                entry,
                cbor_loads(state_bytes) if state_bytes else None,
                state_bytes,
                origin,
                started,
                False,
                None,
                connection,
                cursor,
                readonly=True,
            )
            progress.user_code = True
            result = _run(invocation, operation, authorized)
        finally:
            unusable = not _end_read_only(dialect, connection)
            # Whatever happened, nothing of the read is kept.
            transaction.set_rollback(True, using=connection.alias)
    if unusable:
        connection.close()
    if not same:
        cache.remember(row.id, entry, row.version, state_bytes)
    return result


def _run(invocation: Invocation, operation: Operation, authorized: bool) -> Any:
    active_token = active_ids.set(active_ids.get() | {invocation.actor_id})
    current_token = current.set(invocation)
    invoking_token = db.invoking.set(True)
    try:
        origin = invocation.origin
        if origin.conn_id is not None:
            invocation.conn = invocation.load_conn(origin.conn_id)
        auth = operation.auth
        if not authorized and auth is not None:
            invocation.authorize(auth)
        result = operation.run(invocation)
        invocation.refuse_changes()
        if invocation.timed_out():
            raise ActionTimeout()
        return result
    except DatabaseError as exc:
        if is_read_only_write(exc):
            raise ActorReadOnly.refusing("write to the database") from exc
        raise
    finally:
        db.invoking.reset(invoking_token)
        current.reset(current_token)
        active_ids.reset(active_token)


def _end_read_only(dialect: sql.Dialect, connection: BaseDatabaseWrapper) -> bool:
    """Let the connection write again; tell whether it could.

    A failure here must not hide the read's own outcome; the connection,
    still read-only, is closed then (the next use opens another).
    """
    try:
        dialect.end_read_only(connection)
    except Exception:
        logger.warning("could not end a read-only transaction", exc_info=True)
        return False
    return True
