"""``DjangoDriver``: the workflow engine's driver on database tables.

One driver serves one workflow (the engine's rule): its KV methods address
the ``WorkflowKV`` rows of that workflow, its message methods the workflow's
``WorkflowMessage`` inbox. The module is one piece: one class implementing
the engine's whole driver protocol on one connection and one lease.

Threads and transactions. The runtime runs each workflow on an event loop of
its own in the worker's thread (the Celery task's, the in-process worker's)
and builds its driver with ``private_loop=True``: database calls and
synchronous step functions then run right there, blocking only that private
loop. The whole run uses the worker thread's connection, a
``transaction=True`` step's ORM code shares the transaction of its history
entry, and no step pays for a hand-off between threads (which costs
scheduler latency on a busy machine, several times per step). With
``private_loop=False`` (the default, for a driver used from a shared event
loop) the same calls go through ``sync_to_async(thread_sensitive=True)``.

Fencing. A driver built for a run holds the run's lease token; every write
transaction checks it under a lock: it renews the lease with ``UPDATE ...
WHERE lease_token = <ours>`` (the first statement, so on SQLite it takes the
write lock and on PostgreSQL it locks the row) at most every third of the
lease time, and in between checks the token in the statement of its first
insert of rows (see ``_fenced``). If the lease moved on -- it expired and another
worker claimed the workflow, or a cancel was requested -- the check matches
nothing and the write fails with :class:`LeaseLost`, with nothing written.
So a worker that lost its lease can never write history over its
successor's.

Batching. ``atomic_batch`` follows ``RIVET["KV_ATOMIC_FLUSH"]``: False (the
default) lets the engine split flushes into chunks of at most 128 writes,
each its own transaction, its deletions after them; True makes each flush,
writes and deletions together, one ``atomic_flush`` transaction, and a flush
over :data:`ATOMIC_FLUSH_MAX_WRITES` writes or :data:`ATOMIC_FLUSH_MAX_BYTES`
bytes is rejected whole (``StorageLimitError``: the engine fails the step
whose writes it carried). Alarms are only recorded here: the lease holder
applies them to the ``Workflow`` row when it releases the lease.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import inspect
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import Error as DatabaseError
from django.db import IntegrityError

from .. import clock
from ..conf import rivet_settings
from ..engine import (
    ChildOutcome,
    ChildStart,
    KVDeletions,
    Message,
    StorageError,
    StorageLimitError,
    encode_message_body,
    schema,
)
from ..models import Workflow, WorkflowKV, WorkflowMessage, db
from . import children

if TYPE_CHECKING:
    from ..engine import EngineDriver

__all__ = [
    "ATOMIC_FLUSH_MAX_BYTES",
    "ATOMIC_FLUSH_MAX_WRITES",
    "DjangoDriver",
    "LeaseLost",
    "prefix_end",
]

KVWrite = tuple[bytes, bytes]

_first = operator.itemgetter(0)

# The largest flush an atomic driver takes in one transaction. Far above what
# one flush holds in practice (a step writes two or three keys); the bound
# keeps a runaway flush from holding the database write lock for long.
ATOMIC_FLUSH_MAX_WRITES = 10_000
ATOMIC_FLUSH_MAX_BYTES = 10 * 1024 * 1024


# Backends whose SQL the hot path writes by hand (others use the ORM).
_RAW_SQL_VENDORS = ("sqlite", "postgresql")
# Rows per INSERT statement: 3 parameters each, far below SQLite's limit.
_UPSERT_ROWS = 256
# Keys per DELETE ... IN (...) statement, below every backend's parameter cap.
_DELETE_KEYS = 500


def _held_by_us(stop_on_cancel: bool) -> str:
    """The WHERE clause matching the workflow row while this run holds it.

    Its parameters: the workflow id, the lease token.
    """
    quote = db.connection().ops.quote_name
    sql = f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s"
    if stop_on_cancel:
        sql += f" AND NOT {quote('cancel_requested')}"
    return sql


@functools.cache
def _renew_sql(vendor: str, stop_on_cancel: bool) -> str:
    quote = db.connection().ops.quote_name
    return (
        f"UPDATE {quote(Workflow._meta.db_table)} "
        f"SET {quote('lease_expires_at')} = %s {_held_by_us(stop_on_cancel)}"
    )


@functools.cache
def _check_sql(vendor: str, stop_on_cancel: bool) -> str:
    quote = db.connection().ops.quote_name
    sql = (
        f"SELECT 1 FROM {quote(Workflow._meta.db_table)} {_held_by_us(stop_on_cancel)}"
    )
    if vendor == "postgresql":
        # Lock the row as the renewal's UPDATE would, without a new version
        # of it: a claim or a cancel waits for this transaction.
        sql += " FOR NO KEY UPDATE"
    return sql


def _insert_parts(rows: int, upsert: bool) -> tuple[str, str, str]:
    """Return ``INSERT INTO <kv> (<columns>)``, ``rows`` value tuples, ``ON CONFLICT``.

    The pieces of every write of rows: plain or lease-checked, an upsert or
    (``upsert`` False) a plain insert, whose conflict clause is empty.
    """
    quote = db.connection().ops.quote_name
    value = quote("value")
    conflict = ""
    if upsert:
        conflict = (
            f"ON CONFLICT ({quote('workflow_id')}, {quote('key')}) "
            f"DO UPDATE SET {value} = excluded.{value}"
        )
    return (
        f"INSERT INTO {quote(WorkflowKV._meta.db_table)} "
        f"({quote('workflow_id')}, {quote('key')}, {value})",
        ", ".join(["(%s, %s, %s)"] * rows),
        conflict,
    )


@functools.cache
def _checked_insert_sql(
    vendor: str, stop_on_cancel: bool, rows: int, upsert: bool
) -> str:
    """The lease check and the rows' insert as one statement (``_fenced``).

    The rows are written only if the lease row is found. On PostgreSQL a CTE
    locks that row (``FOR NO KEY UPDATE``) and the statement answers how
    many it found, 0 or 1 (its parameters: the check's, then the rows'); on
    SQLite the statement holds the write lock from its start, and a lost
    lease writes no row (``rowcount`` 0; the rows' parameters come first).
    """
    insert, values, conflict = _insert_parts(rows, upsert)
    check = _check_sql(vendor, stop_on_cancel)
    if vendor == "postgresql":
        return (
            f"WITH lease AS ({check}), written AS ({insert} "
            f"SELECT * FROM (VALUES {values}) AS v "
            f"WHERE EXISTS (SELECT 1 FROM lease) {conflict}) "
            "SELECT count(*) FROM lease"
        )
    # SQLite names a VALUES subquery's columns column1, column2...; the
    # WHERE clause also keeps ON CONFLICT from parsing as a join's ON.
    return (
        f"{insert} SELECT column1, column2, column3 FROM (VALUES {values}) "
        f"WHERE EXISTS ({check}) {conflict}"
    )


@functools.cache
def _insert_sql(vendor: str, rows: int, upsert: bool) -> str:
    insert, values, conflict = _insert_parts(rows, upsert)
    return f"{insert} VALUES {values} {conflict}"


class LeaseLost(StorageError):
    """The run no longer holds the workflow's lease; nothing was written."""

    code = "lease_lost"
    default_message = "The workflow's lease was lost"


def prefix_end(prefix: bytes) -> bytes | None:
    """Return the smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _storage_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Report database failures as the engine's ``StorageError`` (retry later)."""

    def wrapper(*args: Any) -> Any:
        try:
            return fn(*args)
        except StorageError:
            raise
        except DatabaseError as exc:
            raise StorageError(f"Workflow storage failed: {exc}") from exc

    return wrapper


@contextlib.contextmanager
def _off_the_loop() -> Iterator[None]:
    """Run blocking code on a private loop's thread, outside the loop's run.

    Django refuses synchronous database access from a thread whose event loop
    is running, to protect shared loops. A run's loop is private to its
    worker thread, so blocking it is harmless: clear the running-loop marker
    for the duration of the call, exactly as if the loop had stopped.
    """
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(loop)


async def _identity(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class DjangoDriver:
    """The engine driver of one workflow, on ``WorkflowKV``/``WorkflowMessage``.

    ``lease_token`` (the run's claim) fences every write; without one the
    driver writes unconditionally (tests, tools). ``stop_on_cancel`` makes a
    requested cancel fence the run out too.
    """

    def __init__(
        self,
        workflow_id: str,
        *,
        lease_token: str | None = None,
        stop_on_cancel: bool = True,
        atomic_batch: bool | None = None,
        private_loop: bool = False,
    ) -> None:
        self.workflow_id = workflow_id
        self.private_loop = private_loop
        self.lease_token = lease_token
        self.stop_on_cancel = stop_on_cancel
        if atomic_batch is None:
            atomic_batch = rivet_settings.KV_ATOMIC_FLUSH
        self.atomic_batch: bool = atomic_batch
        self.worker_poll_interval: float = rivet_settings.WORKFLOW_POLL_INTERVAL
        self.lease_seconds = rivet_settings.WORKFLOW_LEASE_SECONDS
        # What the engine asked of the alarm during this run: the epoch
        # seconds to wake at, None for "no alarm"; ``alarm_set`` tells whether
        # it asked at all.
        self.alarm: float | None = None
        self.alarm_set = False
        # The inbox's message ids as this driver knows them: read once at the
        # first completion, then every message received is added. A
        # completion of an id not in it is a no-op (see complete_message).
        self._inbox: set[int] | None = None
        # When this driver last renewed the lease in a committed write
        # (clock seconds), or None: see _fenced.
        self._renewed_at: float | None = None
        # Set while a write transaction still owes its lease check.
        self._check_pending = False
        # Keys this driver saw stored (listed or written): a write of none
        # of them tries a plain INSERT first (see _upsert).
        self._stored: set[bytes] = set()

    def __repr__(self) -> str:
        return f"<DjangoDriver workflow={self.workflow_id}>"

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run synchronous code where this driver's database work runs."""
        if self.private_loop:
            with _off_the_loop():
                return fn(*args)
        return await sync_to_async(fn, thread_sensitive=True)(*args)

    async def _db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run database code, reporting database failures as storage errors."""
        return await self._blocking(_storage_errors(fn), *args)

    # Fencing -------------------------------------------------------------------

    def renew_lease(self) -> None:
        """Extend the lease, or raise :class:`LeaseLost` (call in a transaction)."""
        connection = db.connection()
        if self.lease_token is None:
            return
        expires = clock.to_datetime(clock.now() + self.lease_seconds)
        if connection.vendor in _RAW_SQL_VENDORS:
            sql, params = (
                _renew_sql(connection.vendor, self.stop_on_cancel),
                [
                    connection.ops.adapt_datetimefield_value(expires),
                    self.workflow_id,
                    self.lease_token,
                ],
            )
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                held = cursor.rowcount
        else:
            rows = Workflow.objects.filter(
                pk=self.workflow_id, lease_token=self.lease_token
            )
            if self.stop_on_cancel:
                rows = rows.filter(cancel_requested=False)
            held = rows.update(lease_expires_at=expires)
        if not held:
            raise self._lost()

    def _rows(self) -> Any:
        return WorkflowKV.objects.filter(workflow_id=self.workflow_id)

    def _under(self, prefix: bytes) -> Any:
        rows = self._rows()
        if prefix:
            rows = rows.filter(key__gte=prefix)
            upper = prefix_end(prefix)
            if upper is not None:
                rows = rows.filter(key__lt=upper)
        return rows

    def _upsert(self, writes: Iterable[KVWrite]) -> None:
        connection = db.connection()
        # Last write wins within one batch (PostgreSQL refuses to update one
        # row twice in a single INSERT ... ON CONFLICT). The engine's keys
        # and values are bytes already: dict() takes them as they are.
        try:
            pairs = dict(writes)
        except TypeError:  # an unhashable key (a bytearray)
            pairs = {bytes(key): bytes(value) for key, value in writes}
        if not pairs:
            return
        if connection.vendor not in _RAW_SQL_VENDORS:
            WorkflowKV.objects.bulk_create(
                [
                    WorkflowKV(workflow_id=self.workflow_id, key=key, value=value)
                    for key, value in pairs.items()
                ],
                update_conflicts=True,
                unique_fields=["workflow", "key"],
                update_fields=["value"],
            )
            return
        # The hot path (one statement per step): prepared SQL, no model
        # instances. Both backends speak INSERT ... ON CONFLICT DO UPDATE;
        # rows this driver has not seen stored go in with a plain INSERT,
        # as most writes are new entries: the conflict check (PostgreSQL's
        # speculative insertion) took a long history's write from 1.19x to
        # 1.27x of raw inserts (P4). Only as a statement of its own
        # (autocommit): if a key was there after all, the statement fails
        # whole and the upsert follows.
        items = list(pairs.items())
        workflow_id = self.workflow_id
        insert_first = (
            not connection.in_atomic_block
            and connection.get_autocommit()
            and self._stored.isdisjoint(pairs)
        )
        with connection.cursor() as cursor:
            for start in range(0, len(items), _UPSERT_ROWS):
                chunk = items[start : start + _UPSERT_ROWS]
                params: builtins.list[Any] = [
                    item for key, value in chunk for item in (workflow_id, key, value)
                ]
                if insert_first:
                    try:
                        self._write_rows(cursor, len(chunk), params, upsert=False)
                        continue
                    except IntegrityError:
                        pass  # a key was stored already: upsert them
                self._write_rows(cursor, len(chunk), params, upsert=True)
        self._stored.update(pairs)

    def _write_rows(
        self, cursor: Any, rows: int, params: builtins.list[Any], upsert: bool
    ) -> None:
        """Execute one INSERT of ``rows`` rows, checking the lease if it is due."""
        vendor = cursor.db.vendor
        if not self._check_pending:
            cursor.execute(_insert_sql(vendor, rows, upsert), params)
            return
        sql = _checked_insert_sql(vendor, self.stop_on_cancel, rows, upsert)
        lease: builtins.list[Any] = [self.workflow_id, self.lease_token]
        if vendor == "postgresql":
            cursor.execute(sql, lease + params)
            held = cursor.fetchone()[0]
        else:
            cursor.execute(sql, params + lease)
            held = cursor.rowcount
        if not held:
            raise self._lost()
        self._check_pending = False

    def _fenced(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run the writes ``fn(*args)`` in a transaction fenced by the lease.

        Renewing the lease rewrites the workflow row and its lease index in
        every write transaction (a new version of a hot row on PostgreSQL;
        on SQLite two more pages in each commit). So a write within a third
        of the lease time of this driver's last renewal (the heartbeat's
        interval; the heartbeat keeps the lease alive meanwhile) only checks
        the lease row, in the statement of the first insert of rows
        (:func:`_checked_insert_sql`) or, for other writes, after them: on
        PostgreSQL locking the row (``FOR NO KEY UPDATE``: a claim or a
        cancel waits for this transaction, as it waited for the renewal's
        UPDATE); on SQLite under the write lock that the statement (or the
        writes before the check) took, so no one can change the row before
        the commit. A lost lease raises :class:`LeaseLost` and nothing lands.
        A write that is one upsert statement (a step's two or three rows),
        outside any transaction, runs in autocommit: the statement is its
        own transaction, without BEGIN and COMMIT.
        """
        if self._renewed_at is not None and self.lease_token is not None:
            connection = db.connection()
            if (
                connection.vendor in _RAW_SQL_VENDORS
                and clock.now() - self._renewed_at < self.lease_seconds / 3
            ):
                if (
                    not connection.in_atomic_block
                    and connection.get_autocommit()  # AUTOCOMMIT can be off
                    and fn == self._upsert
                    and len(args[0]) <= _UPSERT_ROWS
                ):
                    # One statement: the check and the rows commit as one.
                    self._check_pending = True
                    try:
                        return fn(*args)
                    finally:
                        self._check_pending = False
                with db.atomic():
                    # The first upsert checks it (_upsert); else the end.
                    self._check_pending = True
                    try:
                        output = fn(*args)
                        if self._check_pending:
                            self._check_lease(connection)
                    finally:
                        self._check_pending = False
                return output
        renewing = clock.now()
        with db.atomic():
            self.renew_lease()
            output = fn(*args)
        self._renewed_at = renewing  # only once it committed
        return output

    def _check_lease(self, connection: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                _check_sql(connection.vendor, self.stop_on_cancel),
                [self.workflow_id, self.lease_token],
            )
            held = cursor.fetchone()
        if held is None:
            raise self._lost()

    def _lost(self) -> LeaseLost:
        return LeaseLost(
            f"Workflow {self.workflow_id!r} is no longer leased to this run"
        )

    # KV --------------------------------------------------------------------------

    async def get(self, key: bytes) -> bytes | None:
        """Return the value at ``key`` or None."""

        def read() -> bytes | None:
            value = self._rows().filter(key=key).values_list("value", flat=True)
            found = value.first()
            return None if found is None else bytes(found)

        return await self._db(read)  # type: ignore[no-any-return]

    async def set(self, key: bytes, value: bytes) -> None:
        """Write one key."""
        await self._db(self._fenced, self._upsert, [(key, value)])

    async def delete(self, key: bytes) -> None:
        """Delete one key (no error when absent)."""
        await self.batch_delete([key])

    async def delete_prefix(self, prefix: bytes) -> None:
        """Delete every key starting with ``prefix``."""
        await self._db(self._fenced, lambda: self._under(prefix).delete())

    async def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key in ``[start, end)``."""

        def delete() -> None:
            self._rows().filter(key__gte=start, key__lt=end).delete()

        await self._db(self._fenced, delete)

    async def list(self, prefix: bytes) -> builtins.list[KVWrite]:
        """Return every ``(key, value)`` under ``prefix``, sorted by key bytes."""

        def read() -> builtins.list[KVWrite]:
            # Raw SQL: a run loads its whole history with this read, and the
            # ORM's per-row work cost as much as the query (P6).
            connection = db.connection()
            ops = connection.ops
            workflow = WorkflowKV._meta.get_field("workflow")
            sql = (
                f"SELECT {ops.quote_name('key')}, {ops.quote_name('value')} "
                f"FROM {ops.quote_name(WorkflowKV._meta.db_table)} "
                f"WHERE {ops.quote_name(workflow.column)} = %s"
            )
            params: builtins.list[Any] = [self.workflow_id]
            if prefix:
                sql += f" AND {ops.quote_name('key')} >= %s"
                params.append(prefix)
                upper = prefix_end(prefix)
                if upper is not None:
                    sql += f" AND {ops.quote_name('key')} < %s"
                    params.append(upper)
            sql += f" ORDER BY {ops.quote_name('key')}"
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall()
            if rows and not (type(rows[0][0]) is bytes and type(rows[0][1]) is bytes):
                # SQLite and psycopg 3 give bytes already (a column's values
                # all come through one adapter); other adapters may not.
                rows = [(bytes(key), bytes(value)) for key, value in rows]
            self._stored.update(map(_first, rows))  # see _upsert
            return rows  # type: ignore[no-any-return]

        return await self._db(read)  # type: ignore[no-any-return]

    async def batch(self, writes: builtins.list[KVWrite]) -> None:
        """Write every pair in one transaction."""
        if not writes:
            return
        if self.atomic_batch:
            self._check_atomic_unit(writes)
        await self._db(self._fenced, self._upsert, writes)

    async def batch_delete(self, keys: builtins.list[bytes]) -> None:
        """Delete every key in one transaction."""
        if not keys:
            return

        def delete() -> None:
            self._rows().filter(key__in=[bytes(key) for key in keys]).delete()

        await self._db(self._fenced, delete)

    async def atomic_flush(
        self, writes: builtins.list[KVWrite], deletions: KVDeletions
    ) -> None:
        """Apply ``deletions`` then ``writes`` in one fenced transaction.

        What the engine hands an atomic driver (``KV_ATOMIC_FLUSH=True``):
        a whole flush, its range deletes (loop pruning), prefix deletes (a
        race's losers) and key deletes included, commits or fails as one.
        """
        self._check_atomic_unit(writes)

        def apply() -> None:
            for prefix in deletions.prefixes:
                self._under(prefix).delete()
            for start, end in deletions.ranges:
                self._rows().filter(key__gte=start, key__lt=end).delete()
            for offset in range(0, len(deletions.keys), _DELETE_KEYS):
                chunk = deletions.keys[offset : offset + _DELETE_KEYS]
                self._rows().filter(key__in=[bytes(key) for key in chunk]).delete()
            self._upsert(writes)

        await self._db(self._fenced, apply)

    def _check_atomic_unit(self, writes: builtins.list[KVWrite]) -> None:
        size = sum(len(key) + len(value) for key, value in writes)
        if len(writes) > ATOMIC_FLUSH_MAX_WRITES or size > ATOMIC_FLUSH_MAX_BYTES:
            raise StorageLimitError(
                f"An atomic flush of {len(writes)} writes ({size} bytes) is over "
                f"the limit of {ATOMIC_FLUSH_MAX_WRITES} writes and "
                f"{ATOMIC_FLUSH_MAX_BYTES} bytes; it is never split"
            )

    async def run_transactional(
        self,
        fn: Callable[[], Any],
        make_writes: Callable[[Any], builtins.list[KVWrite]],
    ) -> Any:
        """Run ``fn`` and write ``make_writes(output)`` in one transaction.

        Both run inside one ``db.atomic()`` where the driver's
        database work runs; an async ``fn`` runs to completion on a loop of
        asgiref's with its ORM calls coming back into that transaction, and
        ``make_writes`` (which touches the engine's in-memory storage) runs
        while the engine's loop waits. Errors of ``fn`` are the step's
        failure; errors of the lease check and the writes are storage errors.
        Either way everything rolls back.
        """

        def work(make_writes_on_loop: bool) -> Any:
            with db.atomic():
                _storage_errors(self.renew_lease)()
                output = _call_sync_or_async(fn)
                if make_writes_on_loop:
                    writes = async_to_sync(_identity)(make_writes, output)
                else:
                    writes = make_writes(output)
                if self.atomic_batch:
                    self._check_atomic_unit(writes)
                _storage_errors(self._upsert)(writes)
            return output

        if self.private_loop:
            # The engine's loop is blocked on this very call: nothing races
            # make_writes.
            with _off_the_loop():
                return work(False)
        # In the database thread, while the loop runs: make_writes goes back
        # to the loop.
        return await sync_to_async(work, thread_sensitive=True)(True)

    async def call_sync(self, fn: Callable[[], Any]) -> Any:
        """Run a synchronous step function where the database work runs."""
        return await self._blocking(fn)

    # Alarms ------------------------------------------------------------------------

    async def set_alarm(self, workflow_id: str, wake_at: float) -> None:
        """Record when the workflow wants to run again (applied on release)."""
        self.alarm, self.alarm_set = float(wake_at), True

    async def clear_alarm(self, workflow_id: str) -> None:
        """Record that the workflow needs no alarm (applied on release)."""
        self.alarm, self.alarm_set = None, True

    # Messages ------------------------------------------------------------------------

    async def add_message(self, name: str, data: Any) -> str:
        """Append a message to the inbox and return its id."""
        body = encode_body(data)

        def add() -> str:
            row = WorkflowMessage.objects.create(
                workflow_id=self.workflow_id, name=name, body=body
            )
            return str(row.pk)

        return await self._db(add)  # type: ignore[no-any-return]

    async def receive_messages(
        self, names: builtins.list[str] | None, count: int, completable: bool
    ) -> builtins.list[Message]:
        """Return up to ``count`` of the oldest matching messages.

        Non-completable messages are removed in the same transaction.
        """

        def receive() -> builtins.list[Message]:
            rows = WorkflowMessage.objects.filter(workflow_id=self.workflow_id)
            if names is not None:
                rows = rows.filter(name__in=list(names))
            with db.atomic():
                if not completable:
                    self.renew_lease()
                found = list(
                    rows.order_by("id").values_list("id", "name", "body", "created_at")[
                        : max(count, 0)
                    ]
                )
                if found and not completable:
                    WorkflowMessage.objects.filter(
                        pk__in=[row[0] for row in found]
                    ).delete()
            if completable and self._inbox is not None:
                self._inbox.update(row[0] for row in found)
            return [
                Message(
                    str(pk), name, schema.loads(bytes(body)), clock.to_timestamp(at)
                )
                for pk, name, body, at in found
            ]

        return await self._db(receive)  # type: ignore[no-any-return]

    async def complete_message(self, id: str, response: Any = None) -> None:
        """Remove a received message (unknown ids are a no-op).

        The engine recorded the message in history first, so removing it
        needs no fence: a late duplicate removal changes nothing.

        A replay completes every message its history received again (one
        recorded just before a crash may still be in the inbox), so the
        first completion reads the inbox's ids, once: an id that was not
        there and has not been received since is gone for good (the engine
        completes only messages it received, after the run that received
        them committed them), and its completion costs nothing. Without
        this, each wake-up of a workflow paid one transaction for every
        message it ever received.
        """
        try:
            pk = int(id)
        except (TypeError, ValueError):
            return
        if self._inbox is not None and pk not in self._inbox:
            return

        def complete() -> None:
            rows = WorkflowMessage.objects.filter(workflow_id=self.workflow_id)
            if self._inbox is None:
                self._inbox = set(rows.values_list("pk", flat=True))
            if pk in self._inbox:
                rows.filter(pk=pk).delete()
                self._inbox.discard(pk)

        await self._db(complete)

    # Children --------------------------------------------------------------------

    async def start_child(self, start: ChildStart) -> None:
        """Create the child's row (idempotent per id) in a fenced transaction.

        Its first run is enqueued when that transaction commits. An id held
        by another workflow (``ValueError``) or an unknown name
        (``workflow/not_found``) is the parent's failure, not storage trouble.
        """
        await self._db(self._fenced, children.create_child, start)

    async def child_outcome(self, child_id: str) -> ChildOutcome | None:
        """Return how the child ended, or None while it is active."""
        return await self._db(children.outcome, child_id)  # type: ignore[no-any-return]


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _call_sync_or_async(fn: Callable[[], Any]) -> Any:
    """Call ``fn`` from synchronous code, running it to completion if async.

    An async function runs on a loop of asgiref's; its thread-sensitive ORM
    calls come back to this thread, into the caller's transaction.
    """
    if inspect.iscoroutinefunction(fn):
        return async_to_sync(fn)()
    output = fn()
    if inspect.isawaitable(output):
        output = async_to_sync(_await)(output)
    return output


def encode_body(data: Any) -> bytes:
    """Encode a message body for the inbox.

    Raises ``TypeError`` if it cannot be stored and ``StorageLimitError``
    (``workflow/storage_limit``) if it is larger than a workflow can record.
    """
    return encode_message_body(data)


if TYPE_CHECKING:  # DjangoDriver must satisfy the engine's protocol.
    _driver: EngineDriver = DjangoDriver("typing")
