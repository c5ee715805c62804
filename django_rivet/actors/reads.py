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

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import Error as DatabaseError
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..encoding import cbor_loads
from ..exceptions import ActionTimeout, ActorReadOnly, NotRegistered, ReentrantCall
from ..models import db, sql
from . import cache, registry, rows, states
from .calls import Origin
from .definition import Actor
from .errors import is_read_only_write
from .invocation import Invocation, Operation, active_ids, current, current_invocation
from .rows import ActorRef

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "COLD",
    "NotInRound",
    "Round",
    "is_read_only_call",
    "in_round",
    "is_warm",
    "read",
    "refuses",
    "round",
]

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
    definition = definition_of(ref)
    spec = definition.actions.get(action) if definition is not None else None
    return spec is not None and spec.readonly


def definition_of(ref: ActorRef) -> type[Actor] | None:
    """Return the class ``ref`` names, if known without a query."""
    if ref.name is not None:
        try:
            return registry.lookup(ref.name)
        except NotRegistered:
            return None
    if ref.actor_id is not None:
        return cache.cached_definition(ref.actor_id)
    return None  # pragma: no cover - a reference names one or the other


def is_warm(ref: ActorRef) -> bool:
    """Tell whether this process holds a committed state of the actor ``ref``."""
    return cache.read_hint(ref.name, ref.key, ref.actor_id)[0] is not None


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
    allowed the call already (the spine's load). Inside a :func:`round`,
    the round's row and transaction serve it.
    """
    shared = _round.get()
    if shared is not None:
        return _read_in_round(
            shared, ref, operation, origin, started, definition, progress
        )
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
            state_bytes = held_bytes if same and held_bytes is not None else row.state
            entry = cache.reader(row.id, definition)
            if (
                entry is None
                or row.name != definition.name
                or row.state_version != definition.state_version
            ):
                # Not loaded here, another class, or a state to migrate
                # (a write): the locked path takes it.
                return COLD
            invocation = _invocation(
                row, definition, entry, state_bytes, origin, started, cursor
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


def _invocation(
    row: rows.LockedRow,
    definition: type[Actor],
    entry: cache.CachedActor,
    state_bytes: bytes,
    origin: Origin,
    started: float,
    cursor: Any,
    lazy_conn: bool = False,
) -> Invocation:
    if row.id in active_ids.get():
        raise ReentrantCall()
    cls = _LazyConnInvocation if lazy_conn else Invocation
    return cls(
        row,
        definition,
        entry,
        states.typed(definition, cbor_loads(state_bytes) if state_bytes else None),
        state_bytes,
        origin,
        started,
        False,
        None,
        cursor.db,
        cursor,
        readonly=True,
    )


def _run(invocation: Invocation, operation: Operation, authorized: bool) -> Any:
    active_token = active_ids.set(active_ids.get() | {invocation.actor_id})
    current_token = current.set(invocation)
    invoking_token = db.invoking.set(True)
    try:
        origin = invocation.origin
        if origin.conn_id is not None and not isinstance(
            invocation, _LazyConnInvocation
        ):
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
        shared = _round.get()
        if shared is not None:
            shared.broken = True  # PostgreSQL refuses the rest of the round
        if is_read_only_write(exc):
            raise ActorReadOnly.refusing("write to the database") from exc
        raise
    finally:
        db.invoking.reset(invoking_token)
        current.reset(current_token)
        active_ids.reset(active_token)


# -- rounds: the reads of one actor that waited, in one transaction -------------------
class NotInRound(Exception):
    """A read its round cannot serve (:meth:`Round.serves` said so)."""


@dataclass(slots=True)
class Round:
    """One read-only transaction serving several reads of one actor."""

    connection: BaseDatabaseWrapper
    cursor: Any
    found: tuple[rows.LockedRow, bytes] | None = None
    # The loaded instance the reads run on.
    entry: cache.CachedActor | None = None
    # The state read was newer than the process's: keep it after the round.
    remember: bool = False
    broken: bool = False

    def serves(self, ref: ActorRef) -> bool:
        """Read the actor row once; tell whether the round can serve reads.

        Not when the actor is absent or not loaded in this process (its
        reads run on their own, loading it), nor after a database error
        in the round (PostgreSQL refuses the rest of the transaction).
        """
        if self.broken:
            return False
        if self.found is None:
            definition = definition_of(ref)
            held_id, held_version, held_bytes = cache.read_hint(
                ref.name, ref.key, ref.actor_id
            )
            found = rows.fetch_committed(
                ref, (held_id, held_version), self.connection, self.cursor
            )
            if found is None or definition is None:
                self.broken = True
                return False
            row, same = found
            state_bytes = held_bytes if same and held_bytes is not None else row.state
            entry = cache.reader(row.id, definition)
            if (
                row.name != definition.name
                or entry is None
                or row.state_version != definition.state_version
            ):
                self.broken = True
                return False
            self.found, self.entry, self.remember = (row, state_bytes), entry, not same
        return True


_round: contextvars.ContextVar[Round | None] = contextvars.ContextVar(
    "rivet_read_round", default=None
)


@contextlib.contextmanager
def round(connection: BaseDatabaseWrapper) -> Iterator[Round]:
    """Serve the reads run inside the block from one read of the actor row.

    For the lanes (:func:`~.lanes.ainvoke`): the reads of one actor that
    queued while others ran are answered together, in one read-only
    transaction that is rolled back, from one read of the row (the calling
    connections' rows are read only if a read asks for ``ctx.conn``). A read
    it cannot serve (:meth:`Round.serves` says so first) runs on its own.
    """
    dialect = sql.dialect(connection)
    unusable = False
    with db.atomic(), connection.cursor() as cursor:
        dialect.begin_read_only(connection)
        shared = Round(connection, cursor)
        token = _round.set(shared)
        try:
            yield shared
        finally:
            _round.reset(token)
            unusable = not _end_read_only(dialect, connection)
            transaction.set_rollback(True, using=connection.alias)
    if unusable:
        connection.close()
    if shared.found is not None and shared.entry is not None and shared.remember:
        row, state_bytes = shared.found
        cache.remember(row.id, shared.entry, row.version, state_bytes)


def in_round(shared: Round, function: Any, *args: Any) -> Any:
    """Run ``function(*args)`` with its reads served by ``shared``.

    In the context the caller's call runs in (its own copy of the
    context variables), where the round must be visible.
    """
    token = _round.set(shared)
    try:
        return function(*args)
    finally:
        _round.reset(token)


def _read_in_round(
    shared: Round,
    ref: ActorRef,
    operation: Operation,
    origin: Origin,
    started: float,
    definition: type[Actor],
    progress: Progress,
) -> Any:
    entry = shared.entry
    if shared.broken or shared.found is None or entry is None:
        raise NotInRound()  # pragma: no cover - the lanes ask serves() first
    row, state_bytes = shared.found
    if entry.definition is not definition:
        raise NotInRound()  # pragma: no cover - redefined during the round
    invocation = _invocation(
        row, definition, entry, state_bytes, origin, started, shared.cursor, True
    )
    progress.user_code = True
    return _run(invocation, operation, False)


class _LazyConnInvocation(Invocation):
    """A read's invocation that reads the caller's connection row when asked."""

    _unread: Any = object()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conn: Any = self._unread

    @property
    def conn(self) -> Any:
        """The calling connection, read on first use."""
        if self._conn is self._unread:
            conn_id = self.origin.conn_id
            self._conn = None if conn_id is None else self.load_conn(conn_id)
        return self._conn

    @conn.setter
    def conn(self, value: Any) -> None:
        self._conn = value


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
