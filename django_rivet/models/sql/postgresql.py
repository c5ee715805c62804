"""PostgreSQL (production): row locks, bounded lock waits, one round trip."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Q

from .base import (
    ACTOR_COLUMNS,
    ACTOR_COLUMNS_BY_KEY,
    CONN_COLUMNS,
    Dialect,
    Statement,
    quote,
    table,
)

__all__ = ["PostgreSQLDialect"]


class PostgreSQLDialect(Dialect):
    """PostgreSQL: ``FOR UPDATE`` locks, ``lock_timeout``, data-modifying ``WITH``."""

    vendor = "postgresql"
    skip_locked = True
    bounds_lock_waits = True
    reads_conn_with_lock = True
    sends_in_one_statement = True
    hands_messages = True
    # Lock the row as the renewal's UPDATE would, without a new version of
    # it: a claim or a cancel waits for this transaction.
    _lease_check_lock = " FOR NO KEY UPDATE"
    # SET LOCAL transaction_read_only in the read's own round trip: ended
    # (or rolled back to the savepoint) with the read's transaction.
    _read_only_column = "set_config('transaction_read_only', 'on', true), "
    read_marker_columns = 1

    # SET LOCAL as a value: read at the commit of the statement's own
    # transaction, which then does not wait for the WAL flush.
    _deferred_commit_column = "set_config('synchronous_commit', 'off', true)"

    def defer_commit_flush(self, connection: BaseDatabaseWrapper) -> None:
        """Commit without waiting for the WAL flush (``synchronous_commit``).

        A later durable commit flushes the WAL past it anyway.
        """
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")

    # A statement finding its row by id and its lease token: "token = 'abc'"
    # implies "token <> ''", the predicate of the partial index of leased
    # workflows, and with statistics saying the table is (nearly) empty the
    # planner scanned that index, every leased row, instead of the primary
    # key (0.5 ms with 900 leased, growing with them). The planner proves
    # nothing from an expression, so the primary key is what is left.
    _lease_token = "COALESCE(\"lease_token\", '')"

    def _claim_row(self, placeholder: str) -> str:
        """Pick the row with ``SKIP LOCKED``: a held one is skipped, not awaited.

        ``id = (scalar subquery)``, not ``id IN (subquery)``: the update then
        finds its row by the primary key whatever the statistics say. With
        ``IN``, a table just filled (its statistics saying no workflow is
        due) got a plan scanning every due workflow for each claim: 1.8 ms
        a claim with 1,000 tasks due, growing with them.
        """
        workflows, id_ = table("Workflow"), quote("id")
        return (
            f"{id_} = (SELECT {id_} FROM {workflows} WHERE {id_} = {placeholder} "
            "FOR UPDATE SKIP LOCKED)"
        )

    def start_sql(self, columns: Sequence[str]) -> list[str]:
        """Insert both rows in one statement (a data-modifying ``WITH``).

        Its own transaction in autocommit: one round trip, where BEGIN,
        two INSERTs and COMMIT take four.
        """

        def build() -> list[str]:
            names = ", ".join(quote(column) for column in columns)
            values = ", ".join(["%s"] * len(columns))
            return [
                f"WITH started AS (INSERT INTO {table('Workflow')} ({names}) "
                f"VALUES ({values}) RETURNING {quote('id')}) "
                f"INSERT INTO {table('WorkflowKV')} "
                f"({quote('workflow_id')}, {quote('key')}, {quote('value')}) "
                f"SELECT {quote('id')}, %s, %s FROM started"
            ]

        return self._cached(("start", *columns), build)  # type: ignore[no-any-return]

    def bound_lock_wait(
        self, connection: BaseDatabaseWrapper, milliseconds: int
    ) -> None:
        """Set ``lock_timeout`` for the rest of the transaction (``SET LOCAL``)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true)", [f"{milliseconds}ms"]
            )

    def begin_read_only(self, connection: BaseDatabaseWrapper) -> None:
        """Do nothing: the read's statement sets ``transaction_read_only``."""

    def end_read_only(self, connection: BaseDatabaseWrapper) -> None:
        """Do nothing: the end of the read's transaction (or savepoint) undoes it."""

    def _actor_lock_sql(self, by_id: bool, bounded: bool, with_conn: bool) -> str:
        names = ACTOR_COLUMNS if by_id else ACTOR_COLUMNS_BY_KEY
        columns = ", ".join(f"a.{quote(c)}" for c in names)
        where = "a.id = %s" if by_id else "a.name = %s AND a.key = %s"
        if bounded:
            # Set lock_timeout for the rest of the transaction (SET LOCAL)
            # in the same round trip: the filter runs on the matching row
            # before FOR UPDATE waits for its lock, so the bound applies to
            # that wait too. set_config() is volatile: evaluated per row,
            # never folded away.
            where += " AND set_config('lock_timeout', %s, true) IS NOT NULL"
        joined = ""
        if with_conn:
            # A WebSocket call's own connection row, read in the same round
            # trip (not locked: only invocations of this actor, which wait
            # for the lock taken here, write or delete it).
            columns += ", " + ", ".join(f"c.{quote(c)}" for c in CONN_COLUMNS)
            joined = (
                f" LEFT JOIN {table('Connection')} c ON c.id = %s AND c.actor_id = a.id"
            )
        return (
            f"SELECT {columns} FROM {table('Actor')} a{joined} WHERE {where} "
            "FOR UPDATE OF a"
        )

    def execute_after(
        self,
        cursor: CursorWrapper,
        before: Sequence[Statement],
        sql: str,
        params: list[Any],
    ) -> None:
        """Run ``before`` and ``sql`` as one statement (data-modifying ``WITH``)."""
        if not before:
            cursor.execute(sql, params)
            return
        clauses = ", ".join(f"w{i} AS ({first})" for i, (first, _) in enumerate(before))
        first_params = [param for _, statement in before for param in statement]
        cursor.execute(f"WITH {clauses} {sql}", first_params + params)

    kv_insert_removes_messages = True

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
        """Check the lease and insert the rows in one statement; tell if held.

        A CTE locks the lease row ``FOR NO KEY UPDATE`` (a claim or a cancel
        waits for this statement's transaction); the rows come as two arrays
        (keys, values) under the lease's workflow id, whatever their number:
        one statement text per shape, far less to parse and plan than a
        ``VALUES`` list of three parameters a row. ``removing``: one more
        CTE deletes those messages on the same check -- a live wake's record
        (the receipt, the step, the message's removal) is then one round
        trip in autocommit, where ``BEGIN``, the insert, the ``DELETE`` and
        ``COMMIT`` took four.
        """
        removes = bool(removing)
        statement = self._cached(
            ("checked-arrays", stop_on_cancel, upsert, removes),
            lambda: self._checked_arrays(stop_on_cancel, upsert, removes),
        )
        args = [*lease, lease[0], params[1::3], params[2::3]]
        if removes:
            args += [lease[0], list(removing)]
        cursor.execute(statement, args)
        return bool(cursor.fetchone()[0])

    def _checked_arrays(self, stop_on_cancel: bool, upsert: bool, removes: bool) -> str:
        insert, _, conflict = self._kv_insert_parts(0, upsert)
        removed = ""
        if removes:
            removed = (
                f", removed AS (DELETE FROM {table('WorkflowMessage')} "
                f"WHERE {quote('workflow_id')} = %s "
                f"AND {quote('id')} = ANY(%s::bigint[]) "
                "AND EXISTS (SELECT 1 FROM lease))"
            )
        return (
            f"WITH lease AS ({self.lease_check_sql(stop_on_cancel)}), "
            f"written AS ({insert} SELECT %s, k, v FROM "
            "unnest(%s::bytea[], %s::bytea[]) AS t (k, v) "
            f"WHERE EXISTS (SELECT 1 FROM lease) {conflict}){removed} "
            "SELECT count(*) FROM lease"
        )

    def starts_with(self, field: str, prefix: str) -> Q:
        """Use ``LIKE 'prefix%'`` (case-sensitive here; pattern operator indexes)."""
        return Q(**{f"{field}__startswith": prefix})

    def json_list_contains(
        self, lhs: str, lhs_params: Sequence[Any], item: Any
    ) -> tuple[str, tuple[Any, ...]]:
        """Use jsonb containment (``@>``)."""
        return f"{lhs} @> %s::jsonb", (*lhs_params, json.dumps([item]))
