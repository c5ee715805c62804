"""What every database's dialect answers, and the SQL the databases share.

A :class:`Dialect` holds each statement and decision of django-rivet that
depends on the database, as Django's ``DatabaseOperations`` does per
backend: the layers above ask it for a statement or a capability instead of
testing ``connection.vendor``. The hand-written statements are the hot
paths' (an invocation's lock and write, a workflow step's KV write, an
admission pass): the ORM's query compilation cost more than running them.

Statements are built once per dialect and shape, then cached (quoting and
formatting them cost more than running them on SQLite). Tables are looked
up in the app registry when a statement is first built, not imported: the
model modules ask their dialect for SQL too (``waiting_for__has_name``).
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Q

from .actors import (
    ACTOR_COLUMNS,
    ACTOR_COLUMNS_BY_KEY,
    CONN_COLUMNS,
    ActorStatements,
    Statement,
)
from .admission import AdmissionSQL, admission_statements
from .messages import MessageSQL
from .names import MARK_CLAIMED, MARK_RELEASED, quote, table

__all__ = [
    "ACTOR_COLUMNS",
    "ACTOR_COLUMNS_BY_KEY",
    "CONN_COLUMNS",
    "AdmissionSQL",
    "Dialect",
    "Statement",
    "quote",
    "table",
]


class Dialect(MessageSQL, ActorStatements):
    """The SQL and the decisions of one database (one instance per vendor)."""

    vendor: ClassVar[str]
    # Claims pick their batches with SELECT ... FOR UPDATE SKIP LOCKED.
    skip_locked: ClassVar[bool] = False
    # A transaction can bound its lock waits (lock_timeout).
    bounds_lock_waits: ClassVar[bool] = False
    # The statement locking an actor row also reads the caller's connection.
    reads_conn_with_lock: ClassVar[bool] = False
    # A transaction that reads, then writes, must write first: its read
    # would not take the write lock, and a writer committing in between
    # fails it.
    locks_by_writing_first: ClassVar[bool] = False

    # -- the database ------------------------------------------------------------------
    def too_old(self) -> tuple[int, ...] | None:
        """Return the database library's version if django-rivet cannot use it."""
        return None

    # -- transactions ------------------------------------------------------------------
    @abstractmethod
    def defer_commit_flush(self, connection: BaseDatabaseWrapper) -> None:
        """Let the open transaction commit without waiting for the disk.

        For transactions whose loss in a crash is harmless (a claim, an
        admission pass); a database that cannot does nothing.
        """

    @abstractmethod
    def bound_lock_wait(
        self, connection: BaseDatabaseWrapper, milliseconds: int
    ) -> None:
        """Bound the open transaction's lock waits (see ``bounds_lock_waits``)."""

    def now_param(self, connection: BaseDatabaseWrapper, now: Any) -> Any:
        """Return the datetime ``now`` as a ``DateTimeField`` parameter."""
        return connection.ops.adapt_datetimefield_value(now)

    # -- the workflow lease ------------------------------------------------------------
    # The lease token as the statements that find a row by its id compare it
    # (see the PostgreSQL dialect's).
    _lease_token: ClassVar[str] = quote("lease_token")

    def _held_by_us(self, stop_on_cancel: bool) -> str:
        """The WHERE clause matching the workflow row while a run holds it.

        Its parameters: the workflow id, the lease token.
        """
        sql = f"WHERE {quote('id')} = %s AND {self._lease_token} = %s"
        if stop_on_cancel:
            sql += f" AND NOT {quote('cancel_requested')}"
        return sql

    def lease_renew_sql(self, stop_on_cancel: bool) -> str:
        """Return the lease's renewal (expiry, workflow id, token); rowcount 0: lost."""
        return self._cached(  # type: ignore[no-any-return]
            ("renew", stop_on_cancel),
            lambda: (
                f"UPDATE {table('Workflow')} SET {quote('lease_expires_at')} = %s "
                f"{self._held_by_us(stop_on_cancel)}"
            ),
        )

    def lease_check_sql(self, stop_on_cancel: bool) -> str:
        """Return the lease's check (workflow id, token); no row: lost."""
        return self._cached(  # type: ignore[no-any-return]
            ("check", stop_on_cancel),
            lambda: (
                f"SELECT 1 FROM {table('Workflow')} {self._held_by_us(stop_on_cancel)}"
                + self._lease_check_lock
            ),
        )

    def lease_held_sql(self) -> str:
        """Return a plain read of "the run holds the lease and no cancel is pending".

        Its parameters: the workflow id, the lease token; no row: stop. It
        locks nothing: what a run reads before it starts a step, to see a
        cancel that committed.
        """
        return self._cached(  # type: ignore[no-any-return]
            ("held",),
            lambda: f"SELECT 1 FROM {table('Workflow')} {self._held_by_us(True)}",
        )

    def lease_release_sql(self, columns: Sequence[str]) -> str:
        """Return a release of a lease nothing arrived during (one statement).

        Parameters: a value per column of ``columns``, then the workflow id,
        the lease token, the ``wake_signal`` and ``cancel_requested`` the
        claim read. Returns the row's ``awaited_by`` (the workflows waiting
        for it) when it released, no row when something arrived (or the
        lease is gone): the caller then takes the slower path.
        """

        def build() -> str:
            sets = ", ".join(
                f"{quote(c)} = {MARK_RELEASED if c == 'history_mark' else '%s'}"
                for c in columns
            )
            return (
                f"UPDATE {table('Workflow')} SET {sets} "
                f"WHERE {quote('id')} = %s AND {self._lease_token} = %s "
                f"AND {quote('wake_signal')} = %s "
                f"AND {quote('cancel_requested')} = %s "
                f"RETURNING {quote('awaited_by')}"
            )

        return self._cached(("release", *columns), build)  # type: ignore[no-any-return]

    # What the lease check appends to lock the row it found.
    _lease_check_lock: ClassVar[str] = ""

    def lease_claim_sql(
        self,
        run: bool,
        active: Sequence[str],
        returning: Sequence[str],
        versioned: bool = False,
        deferred: bool = False,
    ) -> str:
        """Return a claim of a workflow's lease in one statement.

        Parameters: token, owner, expiry, (a run: updated_at), the id, (a
        run: now, now, and when ``versioned`` the worker's version). A run
        claim takes an unsettled workflow (``active``, or cancelled with its
        cancel still to carry out) that is due or whose lease expired, and
        marks an active one running; ``versioned``, only one of that
        application version or of none. An operation claim takes any one
        nobody holds. Returns the ``returning`` columns of the row it
        claimed, none when it claimed nothing. PostgreSQL skips a row
        another transaction holds (``SKIP LOCKED``) instead of waiting.
        ``deferred`` (a statement that is its own transaction): its commit
        does not wait for the disk where the database can say so in the
        statement (one more column after ``returning``; see
        :meth:`defer_commit_flush`).
        """

        def build() -> str:
            workflows = table("Workflow")
            token, expires = quote("lease_token"), quote("lease_expires_at")
            sets = [f"{token} = %s", f"{quote('lease_owner')} = %s", f"{expires} = %s"]
            sets.append(MARK_CLAIMED)
            where = f"{token} = ''"
            if run:
                count = quote("run_count")
                status, cancelling = quote("status"), quote("cancel_requested")
                sets += [
                    # One whose cancel is still to be carried out stays
                    # cancelled (the run carries it out).
                    f"{status} = CASE WHEN {cancelling} THEN {status} "
                    "ELSE 'running' END",
                    f"{count} = {count} + 1",
                    f"{quote('updated_at')} = %s",
                ]
                statuses = ", ".join(f"'{name}'" for name in active)
                # Unsettled (models.workflows.UNSETTLED): active, or a cancel
                # still to carry out.
                where = (
                    f"({status} IN ({statuses}) OR {cancelling}) AND "
                    f"(({token} = '' AND {quote('wake_at')} <= %s) OR "
                    f"(NOT ({token} = '') AND {expires} < %s))"
                )
                if versioned:
                    where += f" AND {quote('version')} IN ('', %s)"
            columns = [quote(column) for column in returning]
            if deferred and self._deferred_commit_column:
                columns.append(self._deferred_commit_column)
            return (
                f"UPDATE {workflows} SET {', '.join(sets)} WHERE "
                f"{self._claim_row('%s')} AND {where} RETURNING {', '.join(columns)}"
            )

        key = ("claim", run, versioned, deferred, *active, "|", *returning)
        return self._cached(key, build)  # type: ignore[no-any-return]

    # A column whose evaluation makes the statement's own transaction commit
    # without waiting for the disk (lease_claim_sql's ``deferred``).
    _deferred_commit_column: ClassVar[str] = ""

    def _claim_row(self, placeholder: str) -> str:
        """Return the claim's condition on the row's id (one parameter)."""
        return f"{quote('id')} = {placeholder}"

    # -- workflow KV rows --------------------------------------------------------------
    def _kv_insert_parts(self, rows: int, upsert: bool) -> tuple[str, str, str]:
        """Return ``INSERT INTO <kv> (<columns>)``, ``rows`` tuples, ``ON CONFLICT``.

        The pieces of every write of rows: plain or lease-checked, an upsert
        or (``upsert`` False) a plain insert, whose conflict clause is empty.
        """
        value = quote("value")
        conflict = ""
        if upsert:
            conflict = (
                f"ON CONFLICT ({quote('workflow_id')}, {quote('key')}) "
                f"DO UPDATE SET {value} = excluded.{value}"
            )
        return (
            f"INSERT INTO {table('WorkflowKV')} "
            f"({quote('workflow_id')}, {quote('key')}, {value})",
            ", ".join(["(%s, %s, %s)"] * rows),
            conflict,
        )

    def kv_insert_sql(self, rows: int, upsert: bool) -> str:
        """Return the insert (or upsert) of ``rows`` KV rows (id, key, value each)."""

        def build() -> str:
            insert, values, conflict = self._kv_insert_parts(rows, upsert)
            return f"{insert} VALUES {values} {conflict}"

        return self._cached(("insert", rows, upsert), build)  # type: ignore[no-any-return]

    # Whether insert_kv_checked can also delete received messages (``removing``).
    kv_insert_removes_messages: ClassVar[bool] = False

    @abstractmethod
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
        """Insert ``rows`` KV rows in the statement checking the lease; tell if held.

        ``params``: the rows' (id, key, value each), all of the lease's
        workflow; ``lease``: the check's (workflow id, token). The rows are
        written only if the lease row is found (and no cancel is pending,
        ``stop_on_cancel``), and the check locks it as the renewal would.
        One statement: in autocommit, its own transaction. ``removing``
        (only where :attr:`kv_insert_removes_messages`): ids of the
        workflow's messages the same statement deletes, on the same check.
        """

    def kv_list_sql(self, lower: bool, upper: bool) -> str:
        """Return the read of a workflow's KV rows by key (id, then the bounds)."""

        def build() -> str:
            key = quote("key")
            sql = (
                f"SELECT {key}, {quote('value')} FROM {table('WorkflowKV')} "
                f"WHERE {quote('workflow_id')} = %s"
            )
            if lower:
                sql += f" AND {key} >= %s"
            if upper:
                sql += f" AND {key} < %s"
            return sql + f" ORDER BY {key}"

        return self._cached(("list", lower, upper), build)  # type: ignore[no-any-return]

    def kv_load_checked_sql(self) -> str:
        """Return a run's history load that carries its first cancel check.

        Parameters: the workflow id, then the workflow id and the lease
        token. The history's rows, sorted by key, only while the run holds
        the lease and no cancel is pending (the ``EXISTS`` is uncorrelated:
        both databases evaluate it once, and keep the key index's order). No
        row: not held, cancelled, or no history -- load it plainly.
        """

        def build() -> str:
            held = f"SELECT 1 FROM {table('Workflow')} {self._held_by_us(True)}"
            return (
                f"SELECT {quote('key')}, {quote('value')} FROM {table('WorkflowKV')} "
                f"WHERE {quote('workflow_id')} = %s AND EXISTS ({held}) "
                f"ORDER BY {quote('key')}"
            )

        return self._cached(("load-checked",), build)  # type: ignore[no-any-return]

    # -- workflow queues ---------------------------------------------------------------
    def admission_sql(self, admitted: Sequence[str]) -> AdmissionSQL:
        """Return an admission pass's statements.

        ``admitted``: the statuses of a workflow that holds a slot of its
        queue (admitted and not finished). Both databases take the same SQL:
        PostgreSQL, and SQLite >= 3.35 (RETURNING; rivet.E402).
        """

        build = functools.partial(admission_statements, admitted)
        return self._cached(("admission", *admitted), build)  # type: ignore[no-any-return]

    # -- text --------------------------------------------------------------------------
    def starts_with(self, field: str, prefix: str) -> Q:
        """Return the condition "``field`` starts with ``prefix``", exactly.

        Case-sensitive, and served by an index on ``field``: a range of the
        binary order (SQLite's default collation). PostgreSQL's collations
        may order text otherwise; it uses ``LIKE`` there.
        """
        return Q(**{f"{field}__gte": prefix, f"{field}__lt": prefix + "\U0010ffff"})

    # -- starting a workflow ----------------------------------------------------------
    def start_sql(self, columns: Sequence[str]) -> list[str]:
        """Return the statements inserting a workflow row and its input.

        Parameters: the row's ``columns``, then the input's key and value,
        in that order over the statements. Several statements run in one
        transaction; one runs as it is (its own, in autocommit).
        """

        def build() -> list[str]:
            names = ", ".join(quote(column) for column in columns)
            values = ", ".join(["%s"] * len(columns))
            kv = f"{quote('workflow_id')}, {quote('key')}, {quote('value')}"
            return [
                f"INSERT INTO {table('Workflow')} ({names}) VALUES ({values})",
                f"INSERT INTO {table('WorkflowKV')} ({kv}) VALUES (%s, %s, %s)",
            ]

        return self._cached(("start", *columns), build)  # type: ignore[no-any-return]

    # -- JSON --------------------------------------------------------------------------
    @abstractmethod
    def json_list_contains(
        self, lhs: str, lhs_params: Sequence[Any], item: Any
    ) -> tuple[str, tuple[Any, ...]]:
        """Return the condition "the JSON list ``lhs`` holds ``item``"."""
