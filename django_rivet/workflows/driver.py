"""``DjangoDriver``: the workflow engine's driver on database tables.

One driver serves one workflow (the engine's rule): its KV methods address
the ``WorkflowKV`` rows of that workflow, its message methods the workflow's
``WorkflowMessage`` inbox. One class implements the engine's whole driver
protocol on one connection and one lease; its database work runs where
:mod:`.blocking` says (inline on a run's private loop).

Fencing. A driver built for a run holds the run's lease token; every write
goes through the run's :class:`~.fencing.LeaseFence`, which renews or
checks the lease in the write's transaction (or in its one statement), so
a worker that lost its lease (:class:`LeaseLost`) writes nothing.

KV rows. The hot path writes prepared SQL (the database's dialect,
:mod:`django_rivet.models.sql`), no model instances: one statement per
step.

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

import builtins
import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import IntegrityError

from ..conf import rivet_settings
from ..engine import KVDeletions, StorageLimitError
from ..models import WorkflowKV, db, sql
from ..models.base import prefix_end
from . import blocking
from .children import ChildMethods
from .fencing import UPSERT_ROWS, LeaseFence, LeaseLost
from .history_cache import HistoryCopy
from .inbox import InboxMethods
from .streams import StreamMethods

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from ..engine import EngineDriver

__all__ = [
    "ATOMIC_FLUSH_MAX_BYTES",
    "ATOMIC_FLUSH_MAX_WRITES",
    "DjangoDriver",
    "LeaseLost",
    "prefix_end",
]

KVWrite = tuple[bytes, bytes]
KVWrites = list[KVWrite]

_first = operator.itemgetter(0)

# The largest flush an atomic driver takes in one transaction. Far above what
# one flush holds in practice (a step writes two or three keys); the bound
# keeps a runaway flush from holding the database write lock for long.
ATOMIC_FLUSH_MAX_WRITES = 10_000
ATOMIC_FLUSH_MAX_BYTES = 10 * 1024 * 1024

# Keys per DELETE ... IN (...) statement, below every backend's parameter cap.
_DELETE_KEYS = 500


class DjangoDriver(InboxMethods, ChildMethods, StreamMethods):
    """The engine driver of one workflow, on ``WorkflowKV``/``WorkflowMessage``.

    ``lease_token`` (the run's claim) fences every write; without one the
    driver writes unconditionally (tests, tools). ``stop_on_cancel`` makes a
    requested cancel fence the run out too. ``history_mark``: the claim's
    (``Lease.history_mark``), for a run that may use and fill the history
    cache (:mod:`.history_cache`).
    """

    # Whether a run reads its row for a pending cancel before each step it
    # starts (check_cancel). Always on; False only to measure what the read
    # costs (bench P5).
    checks_cancel = True

    def __init__(
        self,
        workflow_id: str,
        *,
        lease_token: str | None = None,
        stop_on_cancel: bool = True,
        atomic_batch: bool | None = None,
        private_loop: bool = False,
        history_mark: str | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.history = HistoryCopy(workflow_id, lease_token, history_mark)
        self.private_loop = private_loop
        self._fence = LeaseFence(
            workflow_id,
            lease_token,
            stop_on_cancel,
            rivet_settings.WORKFLOW_LEASE_SECONDS,
        )
        if atomic_batch is None:
            atomic_batch = rivet_settings.KV_ATOMIC_FLUSH
        self.atomic_batch: bool = atomic_batch
        self.worker_poll_interval: float = rivet_settings.WORKFLOW_POLL_INTERVAL
        # What the engine asked of the alarm during this run: the epoch
        # seconds to wake at, None for "no alarm"; ``alarm_set`` tells whether
        # it asked at all.
        self.alarm: float | None = None
        self.alarm_set = False
        self._inbox: set[int] | None = None  # see InboxMethods
        # Keys this driver saw stored (listed or written): a write of none
        # of them tries a plain INSERT first (see _upsert).
        self._stored: set[bytes] = set()
        # The run's last batch, written with the release (write_held).
        self._defer_next = False
        self._held: builtins.list[KVWrite] = []
        # Whether this run wrote to a stream (its end is announced to readers).
        self.streamed = False

    def __repr__(self) -> str:
        return f"<DjangoDriver workflow={self.workflow_id}>"

    @property
    def lease_token(self) -> str | None:
        """The run's claim on the workflow (None: the writes are not fenced)."""
        return self._fence.token

    async def _db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run database code, reporting database failures as storage errors."""
        self._defer_next = False
        self._fence.checked_at = None  # (check_cancel)
        with self.history.applying():
            if self._held:
                held, self._held = self._held, []
                await blocking.run_storage(self.private_loop, self._write_rows, held)
            return await blocking.run_storage(self.private_loop, fn, *args)

    def defer_next_batch(self) -> None:
        """Hold the run's last batch for its release (a leased run's only).

        One commit for both (:func:`~.execution.release`); any other
        database call of the run writes it first.
        """
        if (
            self.private_loop
            and self._fence.token is not None
            and not self.atomic_batch
            and not db.in_atomic_block()
        ):
            self._defer_next = True

    def write_held(self, checked: bool = True) -> None:
        """Write the held batch in the releasing transaction (``LeaseLost``).

        ``checked=False``: the transaction holds the lease row locked by a
        write that matched the token already (a quiet release), so the rows
        go in with plain INSERTs.
        """
        held, self._held = self._held, []
        if not held:
            return
        with self.history.applying():
            if checked:
                self._fence.write_in_transaction(lambda: self._upsert(held))
            else:
                self._upsert(held)

    # Fenced writes ---------------------------------------------------------------

    def renew_lease(self) -> None:
        """Extend the lease, or raise :class:`LeaseLost` (call in a transaction)."""
        self._fence.renew()

    def _write_rows(self, writes: KVWrites, removing: Sequence[int] = ()) -> None:
        """Write KV rows on the lease's path: their INSERT may carry its check.

        ``removing``: received messages deleted in the same commit (in the
        INSERT where the database can, else beside it in a transaction).
        """
        connection = db.connection()
        rows: int | None = len(writes)
        if removing and not sql.dialect(connection).kv_insert_removes_messages:
            rows = None  # two statements: never autocommit
        with db.write_turn(connection):  # (SQLite: in turn with senders)
            self._fence.write(
                lambda: self._upsert(writes, removing, connection), rows, connection
            )

    def _write(self, write: Callable[[], Any]) -> Any:
        """Run other writes (deletions, a child's row) on the lease's path."""
        with db.write_turn():
            return self._fence.write(write)

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

    def _delete_under(self, prefix: bytes) -> None:
        self.history.delete_prefix(prefix)
        self._under(prefix).delete()

    def _delete_range(self, start: bytes, end: bytes) -> None:
        self.history.delete_range(start, end)
        self._rows().filter(key__gte=start, key__lt=end).delete()

    def _delete_keys(self, keys: builtins.list[bytes]) -> None:
        self.history.delete_keys(keys)
        self._rows().filter(key__in=[bytes(key) for key in keys]).delete()

    def _upsert(
        self,
        writes: Iterable[KVWrite],
        removing: Sequence[int] = (),
        connection: BaseDatabaseWrapper | None = None,
    ) -> None:
        """Write ``writes`` (the last value of a key wins) in INSERT statements.

        Rows this driver has not seen stored go in with a plain INSERT, as
        most writes are new entries: the conflict check (PostgreSQL's
        speculative insertion) took a long history's write from 1.19x to
        1.27x of raw inserts (P4). Only as a statement of its own
        (autocommit): if a key was there after all, the statement fails
        whole and the upsert (``ON CONFLICT DO UPDATE``) follows.
        ``removing``: received messages to delete with the rows
        (:meth:`~.fencing.LeaseFence.insert`). ``connection``: the caller's
        (a lookup is 2-5 us, a few per cent of a step's Python on SQLite).
        """
        # Last write wins within one batch (PostgreSQL refuses to update one
        # row twice in a single INSERT ... ON CONFLICT). The engine's keys
        # and values are bytes already: dict() takes them as they are.
        try:
            pairs = dict(writes)
        except TypeError:  # an unhashable key (a bytearray)
            pairs = {bytes(key): bytes(value) for key, value in writes}
        if not pairs:
            self._remove_received(list(removing))
            return
        self.history.upsert(pairs)
        connection = connection or db.connection()
        items = list(pairs.items())
        workflow_id = self.workflow_id
        insert_first = (
            not connection.in_atomic_block
            and db.autocommit(connection)
            and self._stored.isdisjoint(pairs)
        )
        removed = not removing
        fence = self._fence
        cursor = db.kv_cursor(connection)
        for start in range(0, len(items), UPSERT_ROWS):
            chunk = items[start : start + UPSERT_ROWS]
            params: builtins.list[Any] = [
                item for key, value in chunk for item in (workflow_id, key, value)
            ]
            rows, carry = len(chunk), () if removed else removing
            if insert_first:
                try:
                    removed |= fence.insert(cursor, rows, params, False, carry)
                    continue
                except IntegrityError:
                    pass  # a key was stored already: upsert them
            removed |= fence.insert(cursor, rows, params, True, carry)
        if removed:
            self._removed(removing)
        else:
            self._remove_received(list(removing))
        self._stored.update(pairs)

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
        await self._db(self._write_rows, [(key, value)])

    async def delete(self, key: bytes) -> None:
        """Delete one key (no error when absent)."""
        await self.batch_delete([key])

    async def delete_prefix(self, prefix: bytes) -> None:
        """Delete every key starting with ``prefix``."""
        await self._db(self._write, functools.partial(self._delete_under, prefix))

    async def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key in ``[start, end)``."""
        await self._db(self._write, functools.partial(self._delete_range, start, end))

    async def list(self, prefix: bytes) -> builtins.list[KVWrite]:
        """Return every ``(key, value)`` under ``prefix``, sorted by key bytes."""
        if not prefix and not self._held:
            cached = self.history.cached()  # the history cache's, if current
            if cached is not None:
                self._stored.update(map(_first, cached))  # see _upsert
                return cached

        def read() -> builtins.list[KVWrite]:
            # Raw SQL: a run loads its whole history with this read, and the
            # ORM's per-row work cost as much as the query (P6).
            connection = db.connection()
            params: builtins.list[Any] = [self.workflow_id]
            upper = prefix_end(prefix) if prefix else None
            if prefix:
                params.append(prefix)
            if upper is not None:
                params.append(upper)
            dialect = sql.dialect(connection)
            statement = dialect.kv_list_sql(bool(prefix), upper is not None)
            with connection.cursor() as cursor:
                rows = []
                if not prefix and self._reads_cancel():
                    checked = [self.workflow_id, self._fence.token]
                    cursor.execute(dialect.kv_load_checked_sql(), params + checked)
                    rows = cursor.fetchall()
                    if rows:  # held, no cancel pending (check_cancel)
                        self._fence.note_checked()
                if not rows:
                    cursor.execute(statement, params)
                    rows = cursor.fetchall()
            rows = db.bytes_pairs(rows)
            self._stored.update(map(_first, rows))  # see _upsert
            return rows

        rows: builtins.list[KVWrite] = await self._db(read)
        if not prefix:
            self.history.loaded(rows)
        return rows

    async def batch(self, writes: builtins.list[KVWrite]) -> None:
        """Write every pair in one transaction."""
        if not writes:
            return
        if self.atomic_batch:
            self._check_atomic_unit(writes)
        if self._defer_next:
            self._defer_next = False
            self._held.extend(writes)
            return
        await self._db(self._write_rows, writes)

    async def batch_completing(
        self, writes: builtins.list[KVWrite], message_ids: builtins.list[str]
    ) -> None:
        """Write ``writes`` and remove the received ``message_ids``, one transaction.

        A receive's record and the message's removal commit together: one
        commit less per message received (bench P6L), and a removal never
        lands without the record (both are fenced by the lease).
        """
        if self.atomic_batch:
            self._check_atomic_unit(writes)
        removing = self._received_pks(message_ids)
        if writes:
            await self._db(self._write_rows, writes, removing)
        elif removing:
            await self._db(self._write, lambda: self._remove_received(removing))

    async def batch_delete(self, keys: builtins.list[bytes]) -> None:
        """Delete every key in one transaction."""
        if not keys:
            return
        await self._db(self._write, functools.partial(self._delete_keys, keys))

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
                self._delete_under(prefix)
            for start, end in deletions.ranges:
                self._delete_range(start, end)
            for offset in range(0, len(deletions.keys), _DELETE_KEYS):
                self._delete_keys(deletions.keys[offset : offset + _DELETE_KEYS])
            self._upsert(writes)

        await self._db(self._write, apply)

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
                blocking.storage_errors(self.renew_lease)()
                output = blocking.call_sync_or_async(fn)
                if make_writes_on_loop:
                    writes = async_to_sync(blocking.call)(make_writes, output)
                else:
                    writes = make_writes(output)
                if self.atomic_batch:
                    self._check_atomic_unit(writes)
                blocking.storage_errors(self._upsert)(writes)
            return output

        self._fence.checked_at = None  # its transaction checks by itself
        with self.history.applying():
            if self.private_loop:
                # The engine's loop is blocked on this very call: nothing
                # races make_writes.
                with blocking.off_the_loop():
                    return work(False)
            # In the database thread, while the loop runs: make_writes goes
            # back to the loop.
            return await sync_to_async(work, thread_sensitive=True)(True)

    def _reads_cancel(self) -> bool:
        """Tell whether this run checks for a cancel before each step."""
        fence = self._fence
        return self.checks_cancel and fence.token is not None and fence.stop_on_cancel

    async def check_cancel(self) -> None:
        """Raise :class:`LeaseLost` if the workflow was cancelled (before a step).

        A step right after a call that found the lease held and no cancel
        pending (nothing else in between, within
        :data:`~.fencing.CANCEL_CHECK_FRESH` seconds: 1 ms) takes that
        call's answer: the history load
        (:meth:`~..models.sql.Dialect.kv_load_checked_sql`), the inbox read
        of a receive, the previous step's fenced write. As fresh as a read
        of its own; one round trip fewer per step of a workflow whose code
        between two steps is quick.
        """
        if self._fence.take_check():
            return
        if self.checks_cancel:
            await self._db(self._fence.check_not_cancelled)

    async def call_sync(self, fn: Callable[[], Any]) -> Any:
        """Run a synchronous step function where the database work runs."""
        return await blocking.run(self.private_loop, fn)

    # Alarms ------------------------------------------------------------------------

    async def set_alarm(self, workflow_id: str, wake_at: float) -> None:
        """Record when the workflow wants to run again (applied on release)."""
        self.alarm, self.alarm_set = float(wake_at), True

    async def clear_alarm(self, workflow_id: str) -> None:
        """Record that the workflow needs no alarm (applied on release)."""
        self.alarm, self.alarm_set = None, True


if TYPE_CHECKING:  # DjangoDriver must satisfy the engine's protocol.
    _driver: EngineDriver = DjangoDriver("typing")
