"""``DjangoDriver``: the workflow engine's driver on database tables.

One driver serves one workflow (the engine's rule): its KV methods address
the ``WorkflowKV`` rows of that workflow, its message methods the workflow's
``WorkflowMessage`` inbox.

Threads and transactions. Every database call runs through
``sync_to_async(thread_sensitive=True)``: when a worker runs the engine with
``async_to_sync`` (the Celery task, the in-process worker), that is the
worker's own thread, so the whole run uses one connection and a
``transaction=True`` step's ORM code shares the transaction of its history
entry. Synchronous step functions run there too (:meth:`call_sync`), never on
the event loop.

Fencing. A driver built for a run holds the run's lease token; every write
transaction first renews the lease with ``UPDATE ... WHERE lease_token =
<ours>`` (the first statement, so on SQLite it takes the write lock and on
PostgreSQL it locks the row). If the lease moved on -- it expired and another
worker claimed the workflow, or a cancel was requested -- the update matches
nothing and the write fails with :class:`LeaseLost` before anything is
written. So a worker that lost its lease can never write history over its
successor's.

Batching. ``atomic_batch`` follows ``RIVET["KV_ATOMIC_FLUSH"]``: False (the
default) lets the engine split flushes into chunks of at most 128 writes,
each its own transaction; True makes each flush one transaction, and a flush
over :data:`ATOMIC_FLUSH_MAX_WRITES` writes or :data:`ATOMIC_FLUSH_MAX_BYTES`
bytes is rejected whole. Alarms are only recorded here: the lease holder
applies them to the ``Workflow`` row when it releases the lease.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import Error as DatabaseError
from django.db import transaction

from .. import clock
from ..conf import rivet_settings
from ..models import Workflow, WorkflowKV, WorkflowMessage
from ..workflow import Message, StorageError, StorageLimitError, schema

if TYPE_CHECKING:
    from ..workflow import EngineDriver

__all__ = [
    "ATOMIC_FLUSH_MAX_BYTES",
    "ATOMIC_FLUSH_MAX_WRITES",
    "DjangoDriver",
    "LeaseLost",
    "prefix_end",
]

KVWrite = tuple[bytes, bytes]

# The largest flush an atomic driver takes in one transaction. Far above what
# one flush holds in practice (a step writes two or three keys); the bound
# keeps a runaway flush from holding the database write lock for long.
ATOMIC_FLUSH_MAX_WRITES = 10_000
ATOMIC_FLUSH_MAX_BYTES = 10 * 1024 * 1024


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


async def _in_db_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await sync_to_async(_storage_errors(fn), thread_sensitive=True)(*args)


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
    ) -> None:
        self.workflow_id = workflow_id
        self.lease_token = lease_token
        self.stop_on_cancel = stop_on_cancel
        if atomic_batch is None:
            atomic_batch = bool(rivet_settings.KV_ATOMIC_FLUSH)
        self.atomic_batch: bool = atomic_batch
        self.worker_poll_interval: float = float(rivet_settings.WORKFLOW_POLL_INTERVAL)
        self.lease_seconds = float(rivet_settings.WORKFLOW_LEASE_SECONDS)
        # What the engine asked of the alarm during this run: the epoch
        # seconds to wake at, None for "no alarm"; ``alarm_set`` tells whether
        # it asked at all.
        self.alarm: float | None = None
        self.alarm_set = False

    def __repr__(self) -> str:
        return f"<DjangoDriver workflow={self.workflow_id}>"

    # Fencing -------------------------------------------------------------------

    def renew_lease(self) -> None:
        """Extend the lease, or raise :class:`LeaseLost` (call in a transaction)."""
        if self.lease_token is None:
            return
        rows = Workflow.objects.filter(
            pk=self.workflow_id, lease_token=self.lease_token
        )
        if self.stop_on_cancel:
            rows = rows.filter(cancel_requested=False)
        expires = clock.to_datetime(clock.now() + self.lease_seconds)
        if not rows.update(lease_expires_at=expires):
            raise LeaseLost(
                f"Workflow {self.workflow_id!r} is no longer leased to this run"
            )

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
        # Last write wins within one batch (PostgreSQL refuses to update one
        # row twice in a single INSERT ... ON CONFLICT).
        pairs = {bytes(key): bytes(value) for key, value in writes}
        if not pairs:
            return
        WorkflowKV.objects.bulk_create(
            [
                WorkflowKV(workflow_id=self.workflow_id, key=key, value=value)
                for key, value in pairs.items()
            ],
            update_conflicts=True,
            unique_fields=["workflow", "key"],
            update_fields=["value"],
        )

    def _fenced(self, fn: Callable[..., Any], *args: Any) -> Any:
        with transaction.atomic():
            self.renew_lease()
            return fn(*args)

    # KV --------------------------------------------------------------------------

    async def get(self, key: bytes) -> bytes | None:
        """Return the value at ``key`` or None."""

        def read() -> bytes | None:
            value = self._rows().filter(key=key).values_list("value", flat=True)
            found = value.first()
            return None if found is None else bytes(found)

        return await _in_db_thread(read)  # type: ignore[no-any-return]

    async def set(self, key: bytes, value: bytes) -> None:
        """Write one key."""
        await _in_db_thread(self._fenced, self._upsert, [(key, value)])

    async def delete(self, key: bytes) -> None:
        """Delete one key (no error when absent)."""
        await self.batch_delete([key])

    async def delete_prefix(self, prefix: bytes) -> None:
        """Delete every key starting with ``prefix``."""
        await _in_db_thread(self._fenced, lambda: self._under(prefix).delete())

    async def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key in ``[start, end)``."""

        def delete() -> None:
            self._rows().filter(key__gte=start, key__lt=end).delete()

        await _in_db_thread(self._fenced, delete)

    async def list(self, prefix: bytes) -> builtins.list[KVWrite]:
        """Return every ``(key, value)`` under ``prefix``, sorted by key bytes."""

        def read() -> builtins.list[KVWrite]:
            rows = self._under(prefix).order_by("key").values_list("key", "value")
            return [(bytes(key), bytes(value)) for key, value in rows]

        return await _in_db_thread(read)  # type: ignore[no-any-return]

    async def batch(self, writes: builtins.list[KVWrite]) -> None:
        """Write every pair in one transaction."""
        if not writes:
            return
        if self.atomic_batch:
            self._check_atomic_unit(writes)
        await _in_db_thread(self._fenced, self._upsert, writes)

    async def batch_delete(self, keys: builtins.list[bytes]) -> None:
        """Delete every key in one transaction."""
        if not keys:
            return

        def delete() -> None:
            self._rows().filter(key__in=[bytes(key) for key in keys]).delete()

        await _in_db_thread(self._fenced, delete)

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

        Both run in the database thread inside one ``transaction.atomic()``;
        an async ``fn`` runs on the engine's event loop with its ORM calls
        hopping back into that thread, and ``make_writes`` (which touches the
        engine's in-memory storage) runs on the event loop too. Errors of
        ``fn`` are the step's failure; errors of the lease check and the
        writes are storage errors. Either way everything rolls back.
        """

        def work() -> Any:
            with transaction.atomic():
                _storage_errors(self.renew_lease)()
                if inspect.iscoroutinefunction(fn):
                    output = async_to_sync(fn)()
                else:
                    output = fn()
                    if inspect.isawaitable(output):
                        output = async_to_sync(_await)(output)
                writes = async_to_sync(_identity)(make_writes, output)
                if self.atomic_batch:
                    self._check_atomic_unit(writes)
                _storage_errors(self._upsert)(writes)
            return output

        return await sync_to_async(work, thread_sensitive=True)()

    async def call_sync(self, fn: Callable[[], Any]) -> Any:
        """Run a synchronous step function in the database thread."""
        return await sync_to_async(fn, thread_sensitive=True)()

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

        return await _in_db_thread(add)  # type: ignore[no-any-return]

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
            with transaction.atomic():
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
            return [
                Message(
                    str(pk), name, schema.loads(bytes(body)), clock.to_timestamp(at)
                )
                for pk, name, body, at in found
            ]

        return await _in_db_thread(receive)  # type: ignore[no-any-return]

    async def complete_message(self, id: str, response: Any = None) -> None:
        """Remove a received message (unknown ids are a no-op).

        The engine recorded the message in history first, so removing it
        needs no fence: a late duplicate removal changes nothing.
        """
        try:
            pk = int(id)
        except (TypeError, ValueError):
            return

        def complete() -> None:
            WorkflowMessage.objects.filter(pk=pk, workflow_id=self.workflow_id).delete()

        await _in_db_thread(complete)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def encode_body(data: Any) -> bytes:
    """Encode a message body; raise ``TypeError`` if it cannot be stored."""
    schema.check_value(data, "Message body")
    return schema.dumps(data)


if TYPE_CHECKING:  # DjangoDriver must satisfy the engine's protocol.
    _driver: EngineDriver = DjangoDriver("typing")
