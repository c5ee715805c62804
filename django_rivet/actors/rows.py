"""Actor identity and the actor row.

Keys are normalized here, and the two statements every invocation runs on
the ``Actor`` table live here: the one that locks and reads the row, and the
one that writes what changed. Both are raw SQL on purpose: they run on every
invocation, and the ORM's query compilation cost more than the statements.
They run on django-rivet's database (:mod:`django_rivet.models.db`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from django.db import IntegrityError
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import clock
from ..exceptions import ActorNotFound, InvalidKey
from ..models import Actor as ActorRow
from ..models import db

__all__ = [
    "ActorRef",
    "LockedRow",
    "canonical_key",
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


def canonical_key(parts: tuple[str, ...]) -> str:
    """Return the stored, unique form of a normalized key."""
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
@dataclass(slots=True)
class LockedRow:
    """The columns of a locked actor row that an invocation needs."""

    id: uuid.UUID
    name: str
    key_parts: list[str]
    state: bytes
    version: int
    event_seq: int


_COLUMNS = ("id", "name", "key_parts", "state", "version", "event_seq")


def _locking_sql(connection: BaseDatabaseWrapper, by_id: bool, bounded: bool) -> str:
    """Return the one statement that locks and reads an actor row."""
    ops = connection.ops
    table = ops.quote_name(ActorRow._meta.db_table)
    columns = ", ".join(ops.quote_name(c) for c in _COLUMNS)
    where = "id = %s" if by_id else "name = %s AND key = %s"
    if connection.vendor == "postgresql":
        if bounded:
            # Set lock_timeout for the rest of the transaction (SET LOCAL)
            # in the same round trip: the filter runs on the matching row
            # before FOR UPDATE waits for its lock, so the bound applies to
            # that wait too. set_config() is volatile: evaluated per row,
            # never folded away.
            where += " AND set_config('lock_timeout', %s, true) IS NOT NULL"
        return f"SELECT {columns} FROM {table} WHERE {where} FOR UPDATE"
    # Elsewhere (SQLite) the first statement is a write, which takes the
    # write lock (with its busy timeout) before anything is read -- also when
    # no row matches, so creating an actor is serialized too.
    version = ops.quote_name("version")
    return f"UPDATE {table} SET {version} = {version} WHERE {where} RETURNING {columns}"


def fetch_locked(ref: ActorRef, lock_timeout_ms: int | None = None) -> LockedRow | None:
    """Lock and read the actor row of ``ref``; ``None`` if there is none.

    Runs inside the invocation's transaction; reveals nothing to the caller
    by itself, so the spine can authorize before saying whether it exists.
    On PostgreSQL, ``lock_timeout_ms`` bounds the lock waits of the rest of
    the transaction, this one included -- set only if the row exists.
    """
    connection = db.connection()
    pk = ActorRow._meta.pk
    assert pk is not None
    if ref.actor_id is not None:
        params: list[Any] = [pk.get_db_prep_value(ref.actor_id, connection)]
    else:
        params = [ref.name, canonical_key(ref.key)]
    bounded = lock_timeout_ms is not None and connection.vendor == "postgresql"
    if bounded:
        params.append(f"{lock_timeout_ms}ms")
    sql = _locking_sql(connection, ref.actor_id is not None, bounded)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchone()
    if found is None:
        return None
    actor_id, name, key_parts, state, version, event_seq = found
    return LockedRow(
        id=actor_id if isinstance(actor_id, uuid.UUID) else uuid.UUID(actor_id),
        name=name,
        key_parts=json.loads(key_parts) if isinstance(key_parts, str) else key_parts,
        state=bytes(state),
        version=version,
        event_seq=event_seq,
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


def update_row(actor_id: uuid.UUID, state: bytes | None, event_seq: int | None) -> None:
    """Write a new state (bumping the version) and/or event seq of a row."""
    connection = db.connection()
    ops = connection.ops
    assignments: list[str] = []
    params: list[Any] = []
    if state is not None:
        assignments.append("{state} = %s, {version} = {version} + 1")
        params.append(state)
    if event_seq is not None:
        assignments.append("{event_seq} = %s")
        params.append(event_seq)
    assignments.append("{updated_at} = %s")
    params.append(ops.adapt_datetimefield_value(clock.now_datetime()))
    pk = ActorRow._meta.pk
    assert pk is not None
    params.append(pk.get_db_prep_value(actor_id, connection))
    names = {
        name: ops.quote_name(name)
        for name in ("state", "version", "event_seq", "updated_at", "id")
    }
    sql = "UPDATE {table} SET " + ", ".join(assignments) + " WHERE {id} = %s"
    sql = sql.format(table=ops.quote_name(ActorRow._meta.db_table), **names)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
