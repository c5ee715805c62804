"""The actor statements every dialect shares (:class:`~.base.Dialect`'s base).

An invocation's lock and write of an actor row, and the plain read of one
for a read-only action: the hot paths of actors, built once per dialect
and shape (:class:`StatementCache`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .names import quote, table

__all__ = [
    "ACTOR_COLUMNS",
    "ACTOR_COLUMNS_BY_KEY",
    "CONN_COLUMNS",
    "ActorStatements",
    "Statement",
    "StatementCache",
]

# One statement and its parameters.
Statement = tuple[str, list[Any]]

# The columns the actor statements read, in this order.
ACTOR_COLUMNS = (
    "id",
    "name",
    "key_parts",
    "state",
    "version",
    "event_seq",
    "state_version",
)
# By name and key, the row's name and key are the ones asked for: not read.
ACTOR_COLUMNS_BY_KEY = ("id", "state", "version", "event_seq", "state_version")
CONN_COLUMNS = ("id", "channel_name", "params", "state", "subscriptions")


class StatementCache:
    """Statements built once per dialect and shape, then cached."""

    def __init__(self) -> None:
        self._sql: dict[tuple[Any, ...], Any] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def _cached(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        found = self._sql.get(key)
        if found is None:
            found = self._sql[key] = build()
        return found


class ActorStatements(StatementCache, ABC):
    """The statements of the actor row and its connections."""

    # -- the actor row -----------------------------------------------------------------
    def actor_lock_sql(self, by_id: bool, bounded: bool, with_conn: bool) -> str:
        """Return the one statement that locks and reads an actor row.

        Its parameters: the connection id (``with_conn``), the actor's id
        (``by_id``) or its name and key, the lock bound (``bounded``).
        """
        return self._cached(  # type: ignore[no-any-return]
            ("lock", by_id, bounded, with_conn),
            lambda: self._actor_lock_sql(by_id, bounded, with_conn),
        )

    @abstractmethod
    def _actor_lock_sql(self, by_id: bool, bounded: bool, with_conn: bool) -> str: ...

    # -- reading an actor row without its lock (read-only actions) -------------------
    #: A first column that makes the open transaction read-only (PostgreSQL).
    _read_only_column: ClassVar[str] = ""
    #: How many columns that adds before the row's (0 or 1).
    read_marker_columns: ClassVar[int] = 0

    def actor_read_sql(self, by_id: bool, with_conn: bool) -> str:
        """Return the plain read of an actor row for a read-only action.

        Columns: :data:`ACTOR_COLUMNS` (the state ``NULL`` when the row is
        the id and version given first: the caller holds that state), then
        the connection's :data:`CONN_COLUMNS` (``with_conn``). Parameters:
        that id and version, the connection id (``with_conn``), the actor's
        id (``by_id``) or its name and key. On PostgreSQL the same statement
        makes the open transaction read-only (:meth:`begin_read_only`).
        """

        def build() -> str:
            state = "CASE WHEN a.id = %s AND a.version = %s THEN NULL ELSE a.state END"
            columns = ", ".join(
                state if c == "state" else f"a.{quote(c)}" for c in ACTOR_COLUMNS
            )
            joined = ""
            if with_conn:
                columns += ", " + ", ".join(f"c.{quote(c)}" for c in CONN_COLUMNS)
                joined = (
                    f" LEFT JOIN {table('Connection')} c "
                    "ON c.id = %s AND c.actor_id = a.id"
                )
            where = "a.id = %s" if by_id else "a.name = %s AND a.key = %s"
            return (
                f"SELECT {self._read_only_column}{columns} FROM {table('Actor')} a"
                f"{joined} WHERE {where}"
            )

        return self._cached(("read", by_id, with_conn), build)  # type: ignore[no-any-return]

    @abstractmethod
    def begin_read_only(self, connection: BaseDatabaseWrapper) -> None:
        """Refuse writes on ``connection`` until :meth:`end_read_only`.

        Called inside the read's transaction (a savepoint when nested).
        """

    @abstractmethod
    def end_read_only(self, connection: BaseDatabaseWrapper) -> None:
        """Let ``connection`` write again (see :meth:`begin_read_only`)."""

    def conn_sql(self) -> str:
        """Return the read of one connection row of an actor (id, actor id)."""

        def build() -> str:
            columns = ", ".join(quote(c) for c in CONN_COLUMNS)
            return (
                f"SELECT {columns} FROM {table('Connection')} WHERE {quote('id')} = %s "
                f"AND {quote('actor_id')} = %s"
            )

        return self._cached(("conn",), build)  # type: ignore[no-any-return]

    def actor_update_sql(self, with_state: bool, with_event_seq: bool) -> str:
        """Return the write of an actor row's state and/or event seq.

        Its parameters: the state and its ``state_version``, the event seq,
        ``updated_at``, the id.
        """

        def build() -> str:
            assignments: list[str] = []
            if with_state:
                assignments.append(
                    "{state} = %s, {state_version} = %s, {version} = {version} + 1"
                )
            if with_event_seq:
                assignments.append("{event_seq} = %s")
            assignments.append("{updated_at} = %s")
            names = {
                name: quote(name)
                for name in (
                    "state",
                    "state_version",
                    "version",
                    "event_seq",
                    "updated_at",
                    "id",
                )
            }
            sql = "UPDATE {table} SET " + ", ".join(assignments) + " WHERE {id} = %s"
            return sql.format(table=table("Actor"), **names)

        return self._cached(  # type: ignore[no-any-return]
            ("update", with_state, with_event_seq), build
        )

    def execute_after(
        self,
        cursor: CursorWrapper,
        before: Sequence[Statement],
        sql: str,
        params: list[Any],
    ) -> None:
        """Run ``before`` (none reads another's writes), then ``sql``."""
        for statement, statement_params in before:
            cursor.execute(statement, statement_params)
        cursor.execute(sql, params)
