"""The lease fence: how a run's writes prove it still holds its workflow.

A driver built for a run holds the run's lease token; every write
transaction checks it under a lock, or nothing is written. If the lease
moved on -- it expired and another worker claimed the workflow, or a cancel
was requested -- the check matches nothing and the write fails with
:class:`LeaseLost`. So a worker that lost its lease can never write history
over its successor's.

Renewing the lease (``UPDATE ... WHERE lease_token = <ours>``, the first
statement, so on SQLite it takes the write lock and on PostgreSQL it locks
the row) rewrites the workflow row and its lease index: a new version of a
hot row on PostgreSQL, two more pages in each commit on SQLite. So a write
renews it only a third of the lease time after the last renewal (the
heartbeat's interval; the heartbeat keeps the lease alive meanwhile), and in
between only checks it. A write takes one of three paths
(:meth:`LeaseFence.write`):

- :attr:`WritePath.RENEWING`: a transaction whose first statement renews
  the lease (also every write of a driver without a lease: unfenced).
- :attr:`WritePath.AUTOCOMMIT_CHECKED`: a write that is one INSERT of KV
  rows (a step's two or three), outside any transaction: the lease check
  rides in that statement, which commits as its own transaction, without
  BEGIN and COMMIT.
- :attr:`WritePath.CHECKED_IN_TRANSACTION`: any other write, in a
  transaction whose first INSERT of KV rows carries the check or, for
  other writes, which checks the lease after them.

The check locks the lease row as the renewal would: ``FOR NO KEY UPDATE``
on PostgreSQL (a claim or a cancel waits for this transaction); on SQLite
the write lock that the statement (or the writes before the check) took,
so no one can change the row before the commit. The statements are the
database's (:mod:`django_rivet.models.sql`).
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .. import clock
from ..engine import StorageError
from ..models import db, sql

__all__ = [
    "CANCEL_CHECK_FRESH",
    "UPSERT_ROWS",
    "LeaseFence",
    "LeaseLost",
    "WritePath",
]

T = TypeVar("T")

# Rows per INSERT statement: 3 parameters each, far below SQLite's limit.
UPSERT_ROWS = 256

# How long a call that found "held, no cancel pending" (a fenced write, the
# history load, the inbox read of a receive) stands in for the cancel check
# of the step that follows it (take_check). Any read leaves a window before
# the step (its own: the hop back to the loop, ~0.1 ms); from a task's load
# to its step 0.15-0.2 ms (p50; p99 0.3-1.4 ms under load): past 1 ms, read.
CANCEL_CHECK_FRESH = 0.001


class LeaseLost(StorageError):
    """The run no longer holds the workflow's lease; nothing was written."""

    code = "lease_lost"
    default_message = "The workflow's lease was lost"


class WritePath(enum.Enum):
    """How one fenced write reaches the database (see the module docstring)."""

    RENEWING = "renewing"
    AUTOCOMMIT_CHECKED = "autocommit_checked"
    CHECKED_IN_TRANSACTION = "checked_in_transaction"


class LeaseFence:
    """One run's lease on its workflow, as the run's writes renew and check it.

    ``token`` None: no lease, the writes are not fenced (tests, tools).
    ``stop_on_cancel`` makes a requested cancel fence the run out too.
    """

    def __init__(
        self,
        workflow_id: str,
        token: str | None,
        stop_on_cancel: bool,
        lease_seconds: float,
    ) -> None:
        self.workflow_id = workflow_id
        self.token = token
        self.stop_on_cancel = stop_on_cancel
        self.lease_seconds = lease_seconds
        # When a write last renewed the lease and committed (clock seconds).
        self.renewed_at: float | None = None
        # True while a checked write's transaction still owes its check: the
        # next INSERT of KV rows carries it (insert()).
        self.check_owed = False
        # When a call last found "held, no cancel pending" (time.monotonic;
        # note_checked); None once the driver made any other call since.
        self.checked_at: float | None = None

    # -- choosing the path -------------------------------------------------------------
    def path(
        self, rows: int | None = None, connection: BaseDatabaseWrapper | None = None
    ) -> WritePath:
        """Return the path of a write; ``rows``: it is one INSERT of that many rows.

        ``connection``: this thread's connection, if the caller holds it.
        """
        if (
            self.token is None
            or self.renewed_at is None
            or clock.now() - self.renewed_at >= self.lease_seconds / 3
        ):
            return WritePath.RENEWING
        if rows is not None and rows <= UPSERT_ROWS:
            if connection is None:
                connection = db.connection()
            if not connection.in_atomic_block and db.autocommit(connection):
                return WritePath.AUTOCOMMIT_CHECKED  # (AUTOCOMMIT can be off)
        return WritePath.CHECKED_IN_TRANSACTION

    def write(
        self,
        write: Callable[[], T],
        rows: int | None = None,
        connection: BaseDatabaseWrapper | None = None,
    ) -> T:
        """Run ``write()`` on the path the lease allows; return its result.

        ``rows``: the write is one INSERT of that many KV rows (through
        :meth:`insert`). A lost lease raises :class:`LeaseLost` and nothing
        lands. ``connection``: this thread's connection, if the caller holds it.
        """
        path = self.path(rows, connection)
        if path is WritePath.AUTOCOMMIT_CHECKED:
            return self._write_autocommit_checked(write)
        if path is WritePath.RENEWING:
            output = self._write_in_renewal(write)
        else:
            output = self._write_checked_in_transaction(write)
        self.note_checked()  # both checked "no cancel" up to their commit
        return output

    def note_checked(self, at: float | None = None) -> None:
        """Note that a call found the lease held and no cancel pending.

        ``at``: when (``time.monotonic()``; None: just now). Only with
        ``stop_on_cancel``: the checks then include the cancel.
        """
        if self.token is not None and self.stop_on_cancel:
            self.checked_at = time.monotonic() if at is None else at

    def take_check(self) -> bool:
        """Tell whether the last call's check still stands in for a read (once).

        True when it was under :data:`CANCEL_CHECK_FRESH` seconds ago and no
        other call of the driver came since (the driver clears
        ``checked_at``): the step about to start takes it for its cancel
        check, as fresh as a read of its own.
        """
        checked_at, self.checked_at = self.checked_at, None
        return (
            checked_at is not None
            and time.monotonic() - checked_at < CANCEL_CHECK_FRESH
        )

    # -- the three paths ---------------------------------------------------------------
    def _write_in_renewal(self, write: Callable[[], T]) -> T:
        renewing = clock.now()
        with db.atomic():
            self.renew()
            output = write()
        self.renewed_at = renewing  # only once it committed
        return output

    def _write_autocommit_checked(self, write: Callable[[], T]) -> T:
        # One statement: the check and the rows commit as one. (_owing_check
        # spelled out: a step's every write comes this way.)
        self.check_owed = True
        try:
            output = write()
            if not self.check_owed:  # (an INSERT carried it: not for no rows)
                self.note_checked()
            return output
        finally:
            self.check_owed = False

    def _write_checked_in_transaction(self, write: Callable[[], T]) -> T:
        with db.atomic(), self._owing_check():
            output = write()
            if self.check_owed:  # no INSERT of rows carried it
                self.check()
        return output

    def write_in_transaction(self, write: Callable[[], T]) -> T:
        """Run ``write()`` in the caller's transaction, checking the lease.

        Its first INSERT of KV rows carries the check, else a check follows;
        a lost lease raises :class:`LeaseLost` (the caller rolls back). For
        writes that ride in a transaction the host opened anyway (a run's
        last batch, in the one releasing the workflow).
        """
        with self._owing_check():
            output = write()
            if self.check_owed:
                self.check()
        return output

    @contextlib.contextmanager
    def _owing_check(self) -> Iterator[None]:
        self.check_owed = True
        try:
            yield
        finally:
            self.check_owed = False

    # -- the statements ----------------------------------------------------------------
    def renew(self) -> None:
        """Extend the lease, or raise :class:`LeaseLost` (call in a transaction)."""
        if self.token is None:
            return
        connection = db.connection()
        expires = clock.to_datetime(clock.now() + self.lease_seconds)
        with connection.cursor() as cursor:
            cursor.execute(
                sql.dialect(connection).lease_renew_sql(self.stop_on_cancel),
                [
                    connection.ops.adapt_datetimefield_value(expires),
                    self.workflow_id,
                    self.token,
                ],
            )
            held = cursor.rowcount
        if not held:
            raise self.lost()

    def check(self) -> None:
        """Check and lock the lease row, or raise :class:`LeaseLost`."""
        connection = db.connection()
        with connection.cursor() as cursor:
            cursor.execute(
                sql.dialect(connection).lease_check_sql(self.stop_on_cancel),
                [self.workflow_id, self.token],
            )
            held = cursor.fetchone()
        if held is None:
            raise self.lost()

    def check_not_cancelled(self) -> None:
        """Raise :class:`LeaseLost` if a cancel is pending or the lease is gone.

        One plain read, outside any transaction: what a run does before each
        step it starts, so that once ``cancel()`` returned no further step
        function runs. Nothing to check without a lease or when cancels do
        not stop this driver.

        A step whose previous call found the same under a millisecond ago
        (the previous step's write, the history load, the inbox read) takes
        that answer instead (:meth:`take_check`): workflow code runs between
        two steps for as long as it likes, so an older answer is read again.
        """
        if self.token is None or not self.stop_on_cancel:
            return
        connection = db.connection()
        with connection.cursor() as cursor:
            cursor.execute(
                sql.dialect(connection).lease_held_sql(),
                [self.workflow_id, self.token],
            )
            held = cursor.fetchone()
        if held is None:
            raise self.lost()

    def insert(
        self,
        cursor: CursorWrapper,
        rows: int,
        params: list[Any],
        upsert: bool,
        removing: Sequence[int] = (),
    ) -> bool:
        """Execute one INSERT of ``rows`` KV rows, carrying the check if owed.

        ``removing``: received messages the statement carrying the check
        also deletes, where the database can
        (:attr:`~..models.sql.Dialect.kv_insert_removes_messages`). Return
        whether it did; if not, the caller deletes them in the same
        transaction.
        """
        dialect = sql.dialect(cursor.db)
        if not self.check_owed:
            cursor.execute(dialect.kv_insert_sql(rows, upsert), params)
            return False
        lease = [self.workflow_id, self.token]
        carried = removing if dialect.kv_insert_removes_messages else ()
        if not dialect.insert_kv_checked(
            cursor, self.stop_on_cancel, rows, upsert, params, lease, carried
        ):
            raise self.lost()
        self.check_owed = False
        return bool(carried)

    def lost(self) -> LeaseLost:
        """Return the error of a write that found the lease gone."""
        return LeaseLost(
            f"Workflow {self.workflow_id!r} is no longer leased to this run"
        )
