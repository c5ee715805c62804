"""Actor identity and the actor row.

Keys are normalized here, and the two statements every invocation runs on
the ``Actor`` table run here: the one that locks and reads the row, and the
one that writes what changed. Both are raw SQL on purpose, written by the
database's dialect (:mod:`django_rivet.models.sql`): they run on every
invocation, and the ORM's query compilation cost more than the statements.
They run on django-rivet's database (:mod:`django_rivet.models.db`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.db import IntegrityError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .. import clock
from ..exceptions import ActorNotFound, InvalidKey
from ..models import Actor as ActorRow
from ..models import db, sql

__all__ = [
    "ActorRef",
    "ConnRow",
    "LockedRow",
    "canonical_key",
    "fetch_committed",
    "fetch_conn",
    "fetch_locked",
    "insert_row",
    "normalize_key",
    "provisional_row",
    "update_row",
]

KEY_PART_MAX_BYTES = 128
KEY_MAX_BYTES = 1024
NAME_MAX_LENGTH = 64

Mode = Literal["get", "get_or_create", "create"]


# -- identity -------------------------------------------------------------------
def normalize_key(key: Any) -> tuple[str, ...]:
    """Return the canonical tuple form of a key (``"a"`` == ``["a"]``)."""
    if key is None:
        parts: tuple[Any, ...] = ()
    elif isinstance(key, str):
        parts = (key,)
    elif isinstance(key, list | tuple):
        parts = tuple(key)
    else:
        raise InvalidKey("An actor key is a string or a list of strings")
    # An empty part counts one byte: 200,000 empty parts (600 KB stored)
    # counted 0 against the limit. Parts of at least one byte count their
    # UTF-8 length, as the actors page says (eight 128-byte parts fit).
    total = 0
    for part in parts:
        if not isinstance(part, str):
            raise InvalidKey("An actor key is a string or a list of strings")
        if "\x00" in part:  # PostgreSQL text cannot hold NUL
            raise InvalidKey("Key parts cannot contain NUL characters")
        try:
            size = len(part.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidKey("Key parts must be valid Unicode") from None
        if size > KEY_PART_MAX_BYTES:
            raise InvalidKey(
                f"A key part is {size} bytes; the limit is {KEY_PART_MAX_BYTES}",
                metadata={"size": size, "limit": KEY_PART_MAX_BYTES},
            )
        total += max(size, 1)
    if total > KEY_MAX_BYTES:
        raise InvalidKey(
            f"The key is {total} bytes; the limit is {KEY_MAX_BYTES}",
            metadata={"size": total, "limit": KEY_MAX_BYTES},
        )
    return parts


@functools.lru_cache(maxsize=4096)
def canonical_key(parts: tuple[str, ...]) -> str:
    """Return the stored, unique form of a normalized key."""
    # Cached: every invocation by key needs it, and hot actors repeat.
    return json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ActorRef:
    """Which actor to invoke: by ``(name, key)`` or by ``actor_id``."""

    name: str | None = None
    key: tuple[str, ...] = ()
    actor_id: uuid.UUID | None = None
    mode: Mode = "get"
    input: Any = None

    @classmethod
    def of(
        cls, name: str, key: Any = None, *, mode: Mode = "get", input: Any = None
    ) -> ActorRef:
        """Build a reference by name and key, validating both."""
        if not isinstance(name, str) or not name or len(name) > NAME_MAX_LENGTH:
            raise InvalidKey(f"Actor names are 1 to {NAME_MAX_LENGTH} characters")
        return cls(name=name, key=normalize_key(key), mode=mode, input=input)

    @classmethod
    def by_id(cls, actor_id: uuid.UUID | str) -> ActorRef:
        """Build a reference by actor id."""
        try:
            value = (
                actor_id
                if isinstance(actor_id, uuid.UUID)
                else uuid.UUID(str(actor_id))
            )
        except ValueError:
            raise ActorNotFound(f"Invalid actor id {actor_id!r}") from None
        return cls(actor_id=value)


# -- locking and writing the row ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConnRow:
    """The columns of a connection row that ``ctx.conn`` is built from."""

    id: uuid.UUID
    channel_name: str
    params: bytes
    state: bytes
    subscriptions: list[str]


@dataclass(slots=True)
class LockedRow:
    """The columns of a locked actor row that an invocation needs.

    ``conn_fetched`` says whether the locking statement also read the
    calling connection's row (``conn``, ``None`` when it is gone).
    """

    id: uuid.UUID
    name: str
    key_parts: list[str]
    state: bytes
    version: int
    event_seq: int
    # The version of the stored state's shape (Actor.state_version).
    state_version: int = 1
    conn: ConnRow | None = None
    conn_fetched: bool = False


def fetch_locked(
    ref: ActorRef,
    lock_timeout_ms: int | None = None,
    connection: BaseDatabaseWrapper | None = None,
    conn_id: uuid.UUID | None = None,
    cursor: CursorWrapper | None = None,
) -> LockedRow | None:
    """Lock and read the actor row of ``ref``; ``None`` if there is none.

    Runs inside the invocation's transaction (on ``connection``, django-rivet's
    database's by default); reveals nothing to the caller by itself, so the
    spine can authorize before saying whether it exists. On PostgreSQL,
    ``lock_timeout_ms`` bounds the lock waits of the rest of the transaction,
    this one included -- set only if the row exists -- and the row of the
    calling connection ``conn_id`` is read in the same statement.
    ``cursor``: one of ``connection``'s, to run it on (a new one by default).
    """
    if connection is None:
        connection = db.connection()
    dialect = sql.dialect(connection)
    by_id = ref.actor_id is not None
    with_conn = conn_id is not None and dialect.reads_conn_with_lock
    pk = ActorRow._meta.pk
    assert pk is not None
    params: list[Any] = []
    if with_conn:
        params.append(pk.get_db_prep_value(conn_id, connection))
    if by_id:
        params.append(pk.get_db_prep_value(ref.actor_id, connection))
    else:
        params += [ref.name, canonical_key(ref.key)]
    bounded = lock_timeout_ms is not None and dialect.bounds_lock_waits
    if bounded:
        params.append(f"{lock_timeout_ms}ms")
    statement = dialect.actor_lock_sql(by_id, bounded, with_conn)
    with _cursor(connection, cursor) as cursor:
        cursor.execute(statement, params)
        found = cursor.fetchone()
    if found is None:
        return None
    width = len(sql.ACTOR_COLUMNS if by_id else sql.ACTOR_COLUMNS_BY_KEY)
    if by_id:
        actor_id, name, key_parts, state, version, event_seq, state_version = found[
            :width
        ]
        if isinstance(key_parts, str):
            key_parts = json.loads(key_parts)
    else:
        actor_id, state, version, event_seq, state_version = found[:width]
        assert ref.name is not None
        name, key_parts = ref.name, list(ref.key)
    row = LockedRow(
        id=actor_id if isinstance(actor_id, uuid.UUID) else _uuid(actor_id),
        name=name,
        key_parts=key_parts,
        state=bytes(state),
        version=version,
        event_seq=event_seq,
        state_version=state_version,
    )
    if with_conn:
        row.conn_fetched = True
        if found[width] is not None:
            row.conn = _conn_row(*found[width:])
    return row


def fetch_committed(
    ref: ActorRef,
    held: tuple[uuid.UUID | None, int],
    connection: BaseDatabaseWrapper,
    cursor: CursorWrapper,
    conn_id: uuid.UUID | None = None,
) -> tuple[LockedRow, bool] | None:
    """Read the actor row of ``ref`` without locking it; ``None`` if there is none.

    For a read-only action: the latest committed version (the row lock a
    write holds does not wait it). ``held`` is the ``(actor id, version)``
    of a state the caller holds already: when the row is still that one,
    its state is not read, and the second value returned is ``True`` (the
    row's ``state`` is then empty). The calling connection's row
    (``conn_id``) is read in the same statement. On PostgreSQL the
    statement also makes the open transaction read-only.
    """
    dialect = sql.dialect(connection)
    pk = ActorRow._meta.pk
    assert pk is not None
    held_id = None if held[0] is None else pk.get_db_prep_value(held[0], connection)
    params: list[Any] = [held_id, held[1]]
    if conn_id is not None:
        params.append(pk.get_db_prep_value(conn_id, connection))
    by_id = ref.actor_id is not None
    if by_id:
        params.append(pk.get_db_prep_value(ref.actor_id, connection))
    else:
        params += [ref.name, canonical_key(ref.key)]
    cursor.execute(dialect.actor_read_sql(by_id, conn_id is not None), params)
    found = cursor.fetchone()
    if found is None:
        return None
    found = found[dialect.read_marker_columns :]
    actor_id, name, key_parts, state, version, event_seq, state_version = found[:7]
    if isinstance(key_parts, str):
        key_parts = json.loads(key_parts)
    row = LockedRow(
        id=actor_id if isinstance(actor_id, uuid.UUID) else _uuid(actor_id),
        name=name,
        key_parts=list(key_parts),
        state=b"" if state is None else bytes(state),
        version=version,
        event_seq=event_seq,
        state_version=state_version,
    )
    if conn_id is not None:
        row.conn_fetched = True
        if found[7] is not None:
            row.conn = _conn_row(*found[7:])
    return row, state is None


@functools.lru_cache(maxsize=4096)
def _uuid(hex_id: str) -> uuid.UUID:
    # SQLite returns ids as text; hot actors repeat, so parse each once.
    return uuid.UUID(hex_id)


def fetch_conn(
    conn_id: uuid.UUID, actor_id: uuid.UUID, connection: BaseDatabaseWrapper
) -> ConnRow | None:
    """Read one connection row of an actor (``None`` if gone), as raw SQL.

    Every WebSocket call needs it; the ORM's query compilation cost more
    than the query (on SQLite; PostgreSQL reads it with the lock instead).
    """
    pk = ActorRow._meta.pk
    assert pk is not None
    params = [
        pk.get_db_prep_value(conn_id, connection),
        pk.get_db_prep_value(actor_id, connection),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql.dialect(connection).conn_sql(), params)
        found = cursor.fetchone()
    if found is None:
        return None
    return _conn_row(*found)


def _conn_row(
    found_id: Any, channel_name: str, params: Any, state: Any, subscriptions: Any
) -> ConnRow:
    if isinstance(subscriptions, str):
        subscriptions = json.loads(subscriptions)
    return ConnRow(
        id=found_id if isinstance(found_id, uuid.UUID) else _uuid(found_id),
        channel_name=channel_name,
        params=bytes(params),
        state=bytes(state),
        subscriptions=list(subscriptions),
    )


def provisional_row(ref: ActorRef) -> LockedRow:
    """Describe the row an absent actor would get (nothing is written yet)."""
    assert ref.name is not None
    return LockedRow(uuid.uuid4(), ref.name, list(ref.key), b"", 0, 0)


def insert_row(row: LockedRow) -> bool:
    """Insert a provisional row; ``False`` if another process created it first.

    The insert runs in a savepoint, so a lost race (PostgreSQL: the unique
    ``(name, key)`` constraint) leaves the invocation's transaction usable
    for the caller to start over on the other row.
    """
    now = clock.now_datetime()
    new = ActorRow(
        id=row.id,
        name=row.name,
        key=canonical_key(tuple(row.key_parts)),
        key_parts=list(row.key_parts),
        created_at=now,
        updated_at=now,
    )
    try:
        with db.atomic():
            new.save(force_insert=True, using=db.alias())
    except IntegrityError:
        return False
    return True


def update_row(
    actor_id: uuid.UUID,
    state: bytes | None,
    event_seq: int | None,
    before: Sequence[tuple[str, list[Any]]] = (),
    connection: BaseDatabaseWrapper | None = None,
    cursor: CursorWrapper | None = None,
    state_version: int = 1,
) -> None:
    """Write a new state (bumping the version) and/or event seq of a row.

    A state is written with the ``state_version`` of its shape.

    ``before``: statements (SQL, params) to run first, none reading what
    another writes (the event log's insert and trim). On PostgreSQL they
    ride in the same statement, as data-modifying ``WITH`` clauses: one
    round trip for all of an invocation's writes to the actor and its log.
    ``connection``: the invocation's (django-rivet's database's by default);
    ``cursor``: one of its cursors to run on (a new one by default).
    """
    if connection is None:
        connection = db.connection()
    dialect = sql.dialect(connection)
    params: list[Any] = []
    if state is not None:
        params += [state, state_version]
    if event_seq is not None:
        params.append(event_seq)
    params.append(dialect.now_param(connection, clock.now_datetime()))
    pk = ActorRow._meta.pk
    assert pk is not None
    params.append(pk.get_db_prep_value(actor_id, connection))
    statement = dialect.actor_update_sql(state is not None, event_seq is not None)
    with _cursor(connection, cursor) as cursor:
        dialect.execute_after(cursor, before, statement, params)


def _cursor(
    connection: BaseDatabaseWrapper, cursor: CursorWrapper | None
) -> contextlib.AbstractContextManager[CursorWrapper]:
    # An invocation runs both of its statements on one cursor (making one
    # costs about as much as running a statement on SQLite); it closes it.
    if cursor is None:
        return connection.cursor()
    return contextlib.nullcontext(cursor)


def now_param(connection: BaseDatabaseWrapper) -> Any:
    """Return the current time as a ``DateTimeField`` parameter of ``connection``.

    ``connection.ops.adapt_datetimefield_value(clock.now_datetime())``, or
    the same value built faster (:meth:`.sql.Dialect.now_param`).
    """
    return sql.dialect(connection).now_param(connection, clock.now_datetime())
