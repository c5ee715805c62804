"""SQLite (development and tests): one writer at a time, the write lock first."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.backends.utils import CursorWrapper

from .base import ACTOR_COLUMNS, ACTOR_COLUMNS_BY_KEY, Dialect, quote, table

# A checked insert of up to this many rows names its parameters: sqlite3
# binds a name slower than a position (a 128-row insert's 386: 347 us
# against 130 us), a step's one row's five make no difference.
NAMED_ROWS = 4


def named(statement: str) -> tuple[str, tuple[str, ...]]:
    """Return ``statement`` with named placeholders, and their names in order."""
    names: list[str] = []

    def name(match: re.Match[str]) -> str:
        names.append(f"p{len(names)}")
        return f"%({names[-1]})s"

    # Django's own pattern: its cursor reads "%s" (not "%%s") with it.
    return FORMAT_QMARK_REGEX.sub(name, statement), tuple(names)


__all__ = ["MIN_VERSION", "SQLiteDialect"]

# UPDATE ... RETURNING (rivet.E402).
MIN_VERSION = (3, 35)


class SQLiteDialect(Dialect):
    """SQLite: a transaction's first statement writes, to take the write lock."""

    vendor = "sqlite"
    locks_by_writing_first = True
    # SQLite names a VALUES subquery's columns column1, column2... (a message has 4)
    _message_rows = "SELECT column1, column2, column3, column4 FROM (VALUES {values})"

    def defer_commit_flush(self, connection: BaseDatabaseWrapper) -> None:
        """Do nothing: SQLite's durability is the connection's, not a transaction's."""

    def bound_lock_wait(
        self, connection: BaseDatabaseWrapper, milliseconds: int
    ) -> None:
        """Do nothing: SQLite bounds lock waits with the busy timeout."""

    def too_old(self) -> tuple[int, ...] | None:
        """Return the SQLite library's version if it is older than 3.35."""
        # The library Django's backend uses (it imports sqlite3 too).
        version = tuple(sqlite3.sqlite_version_info)
        return version if version < MIN_VERSION else None

    def now_param(self, connection: BaseDatabaseWrapper, now: Any) -> Any:
        """Build the text Django would, directly, on a UTC connection.

        With ``USE_TZ`` and a UTC connection (the usual case) that is the
        naive UTC time's ``str()``: every invocation's write needs it, and
        Django's conversion (``make_naive``, settings reads) costs half as
        much again.
        """
        if (
            connection.timezone is not None  # None: USE_TZ is off
            and connection.timezone_name == "UTC"
        ):
            return str(now.replace(tzinfo=None))
        return connection.ops.adapt_datetimefield_value(now)

    def _actor_lock_sql(self, by_id: bool, bounded: bool, with_conn: bool) -> str:
        # The first statement is a write, which takes the write lock (with
        # its busy timeout) before anything is read -- also when no row
        # matches, so creating an actor is serialized too.
        columns = ", ".join(
            quote(c) for c in (ACTOR_COLUMNS if by_id else ACTOR_COLUMNS_BY_KEY)
        )
        where = "id = %s" if by_id else "name = %s AND key = %s"
        version = quote("version")
        return (
            f"UPDATE {table('Actor')} SET {version} = {version} WHERE {where} "
            f"RETURNING {columns}"
        )

    def begin_read_only(self, connection: BaseDatabaseWrapper) -> None:
        """Refuse writes on the connection (``PRAGMA query_only``)."""
        connection.ensure_connection()
        connection.connection.execute("PRAGMA query_only = ON")

    def end_read_only(self, connection: BaseDatabaseWrapper) -> None:
        """Let the connection write again.

        On the driver's connection: Django refuses statements in a
        transaction a failed write broke, and this one must run anyway.
        """
        if connection.connection is not None:
            connection.connection.execute("PRAGMA query_only = OFF")

    def insert_kv_checked(
        self,
        cursor: CursorWrapper,
        stop_on_cancel: bool,
        rows: int,
        upsert: bool,
        params: list[Any],
        lease: list[Any],
        removing: Sequence[int] = (),
    ) -> bool:
        """Insert the rows only if the lease check finds its row (one statement).

        No ``removing``: SQLite has no data-modifying ``WITH``.
        """
        if removing:
            raise ValueError("SQLite's checked insert deletes no messages")
        if rows > NAMED_ROWS:
            statement = self.checked_kv_insert_sql(stop_on_cancel, rows, upsert)
            cursor.execute(statement, params + lease)
            return bool(cursor.rowcount)
        key = ("checked-named", stop_on_cancel, rows, upsert)
        found = self._sql.get(key)  # (a step's every write: no closure to build)
        if found is None:
            found = self._sql[key] = named(
                self.checked_kv_insert_sql(stop_on_cancel, rows, upsert)
            )
        statement, names = found
        # Named parameters: Django's SQLite cursor turns "%s" into "?" with a
        # regular expression on every call (8 us of a step's 130 us of
        # Python, bench P5); "%(name)s" costs it a string format.
        cursor.execute(statement, dict(zip(names, params + lease, strict=True)))
        return bool(cursor.rowcount)  # a lost lease writes no row

    def checked_kv_insert_sql(
        self, stop_on_cancel: bool, rows: int, upsert: bool
    ) -> str:
        """Return the lease check and the insert of ``rows`` KV rows, one statement.

        Parameters: the rows' (id, key, value each), then the workflow id
        and the token. The statement holds the write lock from its start, so
        nobody changes the lease row before it commits. SQLite names a
        VALUES subquery's columns column1, column2...; the WHERE clause also
        keeps ON CONFLICT from parsing as a join's ON.
        """
        key = ("checked", stop_on_cancel, rows, upsert)
        found = self._sql.get(key)  # (a step's every write: no closure to build)
        if found is not None:
            return found  # type: ignore[no-any-return]

        def build() -> str:
            insert, values, conflict = self._kv_insert_parts(rows, upsert)
            check = self.lease_check_sql(stop_on_cancel)
            return (
                f"{insert} SELECT column1, column2, column3 FROM (VALUES {values}) "
                f"WHERE EXISTS ({check}) {conflict}"
            )

        return self._cached(key, build)  # type: ignore[no-any-return]

    def json_list_contains(
        self, lhs: str, lhs_params: Sequence[Any], item: Any
    ) -> tuple[str, tuple[Any, ...]]:
        """Look through the list's items (``json_each``)."""
        sql = f"EXISTS (SELECT 1 FROM json_each({lhs}) WHERE json_each.value = %s)"
        return sql, (*lhs_params, str(item))
