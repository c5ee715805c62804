"""The storage and scheduling interface the engine runs on.

Scoping: **one driver instance serves exactly one workflow.** Its KV methods
address that workflow's private namespace (keys carry no workflow id; the
Django driver maps them onto ``WorkflowKV`` rows of one workflow) and its
message methods address that workflow's inbox. Only the alarm methods take a
``workflow_id``, because alarms usually live in a scheduler shared by every
workflow. The engine is the only writer of the namespace while it runs.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import uuid
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django_rivet import clock

from .limits import encode_message_body
from .stream_store import MemoryStreams, StreamWrite
from .values import ChildOutcome, ChildStart, Message, child_wake_name

__all__ = [
    "EngineDriver",
    "InMemoryDriver",
    "KVDeletions",
    "KVWrite",
    "call_maybe_async",
]

KVWrite = tuple[bytes, bytes]


@dataclass(slots=True)
class KVDeletions:
    """The deletions of one flush: key prefixes, single keys, half-open ranges."""

    prefixes: list[bytes] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    ranges: list[tuple[bytes, bytes]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.prefixes or self.keys or self.ranges)


@runtime_checkable
class EngineDriver(Protocol):
    """What the engine needs from its host; every method is ``async``.

    KV: ``list(prefix)`` returns ``(key, value)`` pairs sorted by key bytes;
    ``delete_range(start, end)`` is half-open; ``batch(writes)`` writes a list
    atomically (one transaction). With ``atomic_batch = True`` the engine hands
    every flush, writes and deletions together, to one
    ``atomic_flush(writes, deletions)`` call, which applies every deletion and
    then every write in one transaction; the driver must reject a unit it
    cannot take with ``StorageLimitError``, never split it. With ``False`` the
    engine splits flushes into ``batch`` chunks of at most 128 writes and
    976 KiB and runs the deletions after them (``atomic_flush`` is then never
    called).

    Failures: a driver reports its own failures (the database is down, a
    lease was lost) as ``StorageError``; the engine treats any exception of a
    KV, alarm or message call as one. The exception is ``run_transactional``,
    whose ``fn`` errors are the step's own and must come out unchanged.

    Messages: ``add_message(name, data)`` appends to the inbox and returns the
    message id; ``receive_messages(names, count, completable)`` returns up to
    ``count`` of the oldest messages whose name is in ``names`` (any name when
    ``names`` is None) as :class:`Message` objects; non-completable messages
    are removed on receipt, completable ones stay until
    ``complete_message(id, response)`` (the engine records them in history
    first, so a crash in between cannot lose them). Completing an unknown id
    is a no-op.

    ``run_transactional(fn, make_writes)`` backs ``step(transaction=True)``: it
    calls ``fn()`` (sync or async; await the result if it is awaitable), then
    writes ``make_writes(output)`` (the step's completed entry and everything
    else pending) in the *same* transaction, and returns the output. If
    ``make_writes`` raises, the transaction must roll back. The writes are
    never split.

    Optional extensions the engine uses when present:
    ``async append_streams(writes)`` stores workflow streams
    (``ctx.write_stream``; the rules are in ``engine/stream_store.py``),
    ``async call_sync(fn)`` runs a synchronous step function (default: called
    inline on the event loop), ``async wait_for_messages(names)`` returns
    when a matching message (or ``child:<id>``, a child's end) may have
    arrived -- a hint: it may return for nothing, and the engine looks
    again every ``worker_poll_interval`` seconds anyway -- which is what
    wakes a run waiting in its live window (``live_wait``, see
    ``engine/live.py``) and ``mode="live"``; and ``async
    start_child(start)`` / ``async child_outcome(child_id)`` start child
    workflows and tell how they ended (``ctx.child``; see
    :class:`~django_rivet.engine.children.ChildHost`). A host wakes a
    parent waiting for a child under the name ``child:<child id>``. A host
    that can cancel a workflow while a run holds it offers ``async
    check_cancel()``, called before each step attempt (not before a
    ``transaction=True`` step, whose transaction must check by itself): it
    raises a ``StorageError`` once the workflow was cancelled, so no step
    function starts after the cancel.
    ``async batch_completing(writes, message_ids)`` writes like ``batch``
    and completes the received messages ``message_ids`` in the same
    transaction (a flush recording their receipt in one chunk; without it
    the engine calls ``complete_message`` for each once the flush is written).
    ``defer_next_batch()`` says that the next ``batch`` is the last write
    of the run (it completes, fails or pauses next): the driver may hold it
    and write it with what ends the run on its side, as long as any other
    call it gets first writes it before anything else.
    """

    atomic_batch: bool
    worker_poll_interval: float

    async def get(self, key: bytes) -> bytes | None:
        """Return the value at ``key`` or None."""

    async def set(self, key: bytes, value: bytes) -> None:
        """Write one key."""

    async def delete(self, key: bytes) -> None:
        """Delete one key (no error when absent)."""

    async def delete_prefix(self, prefix: bytes) -> None:
        """Delete every key starting with ``prefix``."""

    async def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key in ``[start, end)``."""

    async def batch(self, writes: builtins.list[KVWrite]) -> None:
        """Write every pair in one transaction."""

    async def batch_delete(self, keys: builtins.list[bytes]) -> None:
        """Delete every key in one transaction."""

    async def atomic_flush(
        self, writes: builtins.list[KVWrite], deletions: KVDeletions
    ) -> None:
        """Apply ``deletions``, then ``writes``, in one transaction."""

    async def set_alarm(self, workflow_id: str, wake_at: float) -> None:
        """Ask to run ``workflow_id`` again at ``wake_at`` (epoch seconds)."""

    async def clear_alarm(self, workflow_id: str) -> None:
        """Drop the pending alarm of ``workflow_id``."""

    async def add_message(self, name: str, data: Any) -> str:
        """Append a message to the inbox and return its id."""

    async def receive_messages(
        self, names: builtins.list[str] | None, count: int, completable: bool
    ) -> builtins.list[Message]:
        """Return up to ``count`` of the oldest matching messages."""

    async def complete_message(self, id: str, response: Any = None) -> None:
        """Remove a received completable message, recording ``response``."""

    async def run_transactional(
        self,
        fn: Callable[[], Any],
        make_writes: Callable[[Any], builtins.list[KVWrite]],
    ) -> Any:
        """Run ``fn`` and write ``make_writes(output)`` in one transaction."""

    async def list(self, prefix: bytes) -> builtins.list[KVWrite]:
        """Return every ``(key, value)`` under ``prefix``, sorted by key."""


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn`` and await its result when it is awaitable."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


class InMemoryDriver:
    """A complete driver in memory, for tests and examples.

    Subclass it to record or fail calls: every engine operation goes through
    one overridable ``async`` method.
    """

    atomic_batch: bool = False
    worker_poll_interval: float = 1.0

    def __init__(self) -> None:
        self.kv: dict[bytes, bytes] = {}
        self._sorted: builtins.list[bytes] = []
        self.alarms: dict[str, float] = {}
        self.messages: builtins.list[Message] = []
        self.responses: dict[str, Any] = {}
        # Children this workflow started (``ctx.child``), and how the ones
        # that ended did (set by the test with :meth:`finish_child`).
        self.children: dict[str, ChildStart] = {}
        self.child_outcomes: dict[str, ChildOutcome] = {}
        self._waiters: builtins.list[
            tuple[builtins.list[str] | None, asyncio.Future[None]]
        ] = []
        self.streams = MemoryStreams()

    # KV ----------------------------------------------------------------------

    async def get(self, key: bytes) -> bytes | None:
        """Return the value at ``key`` or None."""
        return self.kv.get(key)

    async def set(self, key: bytes, value: bytes) -> None:
        """Write one key."""
        self._put(key, value)

    async def delete(self, key: bytes) -> None:
        """Delete one key."""
        self._remove(key)

    async def delete_prefix(self, prefix: bytes) -> None:
        """Delete every key starting with ``prefix``."""
        self._delete_prefix(prefix)

    async def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key in ``[start, end)``."""
        self._delete_range(start, end)

    def _delete_prefix(self, prefix: bytes) -> None:
        low = bisect_left(self._sorted, prefix)
        high = low
        while high < len(self._sorted) and self._sorted[high].startswith(prefix):
            high += 1
        for key in self._sorted[low:high]:
            del self.kv[key]
        del self._sorted[low:high]

    def _delete_range(self, start: bytes, end: bytes) -> None:
        low = bisect_left(self._sorted, start)
        high = bisect_left(self._sorted, end)
        for key in self._sorted[low:high]:
            del self.kv[key]
        del self._sorted[low:high]

    async def list(self, prefix: bytes) -> builtins.list[KVWrite]:
        """Return every pair under ``prefix`` in key byte order."""
        start = bisect_left(self._sorted, prefix)
        out = []
        for key in self._sorted[start:]:
            if not key.startswith(prefix):
                break
            out.append((key, self.kv[key]))
        return out

    async def batch(self, writes: builtins.list[KVWrite]) -> None:
        """Write every pair (atomic: nothing here can fail halfway)."""
        for key, value in writes:
            self._put(key, value)

    async def batch_delete(self, keys: builtins.list[bytes]) -> None:
        """Delete every key."""
        for key in keys:
            self._remove(key)

    async def atomic_flush(
        self, writes: builtins.list[KVWrite], deletions: KVDeletions
    ) -> None:
        """Apply ``deletions`` then ``writes`` (nothing here fails halfway)."""
        for prefix in deletions.prefixes:
            self._delete_prefix(prefix)
        for start, end in deletions.ranges:
            self._delete_range(start, end)
        for key in deletions.keys:
            self._remove(key)
        for key, value in writes:
            self._put(key, value)

    async def run_transactional(
        self,
        fn: Callable[[], Any],
        make_writes: Callable[[Any], builtins.list[KVWrite]],
    ) -> Any:
        """Run ``fn`` then write ``make_writes(output)`` with one ``batch``."""
        output = await call_maybe_async(fn)
        await self.batch(make_writes(output))
        return output

    def _put(self, key: bytes, value: bytes) -> None:
        key, value = bytes(key), bytes(value)
        if key not in self.kv:
            insort(self._sorted, key)
        self.kv[key] = value

    def _remove(self, key: bytes) -> None:
        if self.kv.pop(key, None) is not None:
            index = bisect_left(self._sorted, key)
            del self._sorted[index]

    async def append_streams(self, writes: builtins.list[StreamWrite]) -> None:
        """Append stream values and closes (``ctx.write_stream``)."""
        self.streams.append(writes)

    # Alarms --------------------------------------------------------------------

    async def set_alarm(self, workflow_id: str, wake_at: float) -> None:
        """Remember when ``workflow_id`` wants to run again."""
        self.alarms[workflow_id] = wake_at

    async def clear_alarm(self, workflow_id: str) -> None:
        """Forget the alarm of ``workflow_id``."""
        self.alarms.pop(workflow_id, None)

    def get_alarm(self, workflow_id: str) -> float | None:
        """Return the pending alarm of ``workflow_id``."""
        return self.alarms.get(workflow_id)

    def due_alarms(self, now: float | None = None) -> builtins.list[str]:
        """Return the workflow ids whose alarm is due."""
        moment = clock.now() if now is None else now
        return [wid for wid, at in self.alarms.items() if at <= moment]

    # Messages -----------------------------------------------------------------

    async def add_message(self, name: str, data: Any) -> str:
        """Append a message and wake live runs waiting for it.

        Refuses bodies a workflow could not store, as the Django driver does
        (``TypeError``, or ``StorageLimitError`` when too large).
        """
        encode_message_body(data)
        message = Message(uuid.uuid4().hex, name, data, clock.now())
        self.messages.append(message)
        for names, future in builtins.list(self._waiters):
            if (names is None or name in names) and not future.done():
                future.set_result(None)
        return message.id

    async def receive_messages(
        self, names: builtins.list[str] | None, count: int, completable: bool
    ) -> builtins.list[Message]:
        """Return the oldest matching messages; consume them unless completable."""
        found = [m for m in self.messages if names is None or m.name in names]
        found = found[: max(count, 0)]
        if not completable:
            taken = {m.id for m in found}
            self.messages = [m for m in self.messages if m.id not in taken]
        return found

    async def batch_completing(
        self, writes: builtins.list[KVWrite], message_ids: builtins.list[str]
    ) -> None:
        """Write ``writes`` and complete ``message_ids`` at once (one transaction)."""
        await self.batch(writes)
        for message_id in message_ids:
            await self.complete_message(message_id, None)

    async def complete_message(self, id: str, response: Any = None) -> None:
        """Remove a received message and keep its response."""
        before = len(self.messages)
        self.messages = [m for m in self.messages if m.id != id]
        if len(self.messages) != before:
            self.responses[id] = response

    # Children ------------------------------------------------------------------

    async def start_child(self, start: ChildStart) -> None:
        """Record a child start (idempotent per id, like a real host)."""
        known = self.children.get(start.child_id)
        if known is not None and known.workflow != start.workflow:
            raise ValueError(
                f"Workflow id {start.child_id!r} is already used by a "
                f"{known.workflow!r} workflow"
            )
        self.children.setdefault(start.child_id, start)

    async def child_outcome(self, child_id: str) -> ChildOutcome | None:
        """Return how the child ended (see :meth:`finish_child`), or None."""
        return self.child_outcomes.get(child_id)

    def finish_child(
        self,
        child_id: str,
        state: str = "completed",
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """End a child (tests play its host) and wake the parent waiting for it."""
        self.child_outcomes[child_id] = ChildOutcome(state, output, error)
        name = child_wake_name(child_id)
        for names, future in builtins.list(self._waiters):
            if (names is None or name in names) and not future.done():
                future.set_result(None)

    async def wait_for_messages(self, names: Iterable[str] | None) -> None:
        """Return once a message with one of ``names`` is added."""
        wanted = None if names is None else builtins.list(names)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (wanted, future)
        self._waiters.append(entry)
        try:
            await future
        finally:
            self._waiters.remove(entry)


if TYPE_CHECKING:  # InMemoryDriver must satisfy the protocol.
    _driver: EngineDriver = InMemoryDriver()
