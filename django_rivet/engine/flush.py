"""One flush's write list and deletions, and how they reach the driver.

:class:`Storage` (``storage.py``) decides what a flush writes and deletes
(a :class:`Plan`); :func:`apply` sends it: an atomic driver gets it whole in
one ``atomic_flush`` call, any other driver ``batch`` chunks within the
limits, then the deletions (at most ``MAX_CONCURRENT_DELETES`` at once),
then the writes that recreate a key inside a deleted span. Received
messages the flush records (``Plan.completions``) leave the inbox in the
transaction of its one chunk when the driver offers ``batch_completing``,
else once everything was written. Every size is checked before any I/O; a
driver failure is a ``StorageError``, a refusal of the unit as too large a
``StorageLimitError``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from . import keys, schema
from .driver import EngineDriver, KVDeletions, KVWrite
from .errors import StorageError, StorageLimitError
from .limits import (
    MAX_CONCURRENT_DELETES,
    MAX_KV_BATCH_ENTRIES,
    MAX_KV_BATCH_PAYLOAD_BYTES,
)
from .schema import Entry, EntryMetadata

__all__ = [
    "Plan",
    "apply",
    "chunk_writes",
    "dirty_entries",
    "doomed",
    "driver_call",
    "fits_one_batch",
    "plan_records",
    "schedule_deletions",
    "settle_deletions",
]

logger = logging.getLogger("django_rivet.workflow")

T = TypeVar("T")


def chunk_writes(writes: list[KVWrite]) -> list[list[KVWrite]]:
    """Split ``writes`` into batches within the entry and byte limits.

    Raises :class:`StorageLimitError` if one write alone is over the byte limit.
    """
    chunks: list[list[KVWrite]] = []
    chunk: list[KVWrite] = []
    total = 0
    for write in writes:
        size = len(write[0]) + len(write[1])
        if size > MAX_KV_BATCH_PAYLOAD_BYTES:
            raise StorageLimitError(
                f"KV batch write is {size} bytes, exceeding the "
                f"{MAX_KV_BATCH_PAYLOAD_BYTES} byte limit"
            )
        full = len(chunk) >= MAX_KV_BATCH_ENTRIES
        if chunk and (full or total + size > MAX_KV_BATCH_PAYLOAD_BYTES):
            chunks.append(chunk)
            chunk, total = [], 0
        chunk.append(write)
        total += size
    if chunk:
        chunks.append(chunk)
    return chunks


async def driver_call(awaitable: Awaitable[T], what: str) -> T:
    """Await a driver call, reporting its failure as :class:`StorageError`.

    Whatever a driver raises is infrastructure trouble, never the workflow's
    failure: the host retries the run later. ``StorageLimitError`` (a refusal
    of what the engine asked to store) passes unchanged.
    """
    try:
        return await awaitable
    except (StorageError, StorageLimitError):
        raise
    except Exception as exc:
        logger.warning("workflow driver call failed call=%s error=%r", what, exc)
        raise StorageError(f"Workflow storage failed ({what}): {exc}") from exc


@dataclass(slots=True)
class Plan:
    """What one flush writes and deletes, with the generations it acknowledges."""

    writes: list[KVWrite] = field(default_factory=list)
    rewrites: list[KVWrite] = field(default_factory=list)
    names_upto: int = 0
    # Names written to the registry again: their entry's record is going.
    rescued: list[int] = field(default_factory=list)
    marks: list[tuple[Entry | EntryMetadata, int]] = field(default_factory=list)
    fields: dict[int, bytes | None] = field(default_factory=dict)
    published: list[KVWrite] = field(default_factory=list)
    deletions: KVDeletions = field(default_factory=KVDeletions)
    # Received messages whose record this flush writes: removed from the
    # inbox as (or once) that record is durable.
    completions: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.writes or self.rewrites or self.deletions or self.completions)


def dirty_entries(dirty: Iterable[Entry | EntryMetadata]) -> list[Entry]:
    """Return the entries whose record a flush writes, in creation order.

    Each changed entry, and the entry of each changed metadata: since
    version 4 they are one record.
    """
    found: dict[Entry, None] = {}
    for record in dirty:
        if not record.dirty:
            continue
        if isinstance(record, Entry):
            found[record] = None
        else:
            owner = record.owner
            if owner is not None:
                found[owner] = None
    # In creation order: a chunked flush cut short leaves whole entries
    # behind, the oldest first.
    entries = list(found)
    if len(entries) > 1:
        entries.sort(key=_seq)
    return entries


def _seq(entry: Entry) -> int:
    return entry.seq


def plan_records(
    entries: list[Entry],
    plan: Plan,
    meta: Callable[[Entry], EntryMetadata],
    deleting: dict[bytes, None],
) -> bool:
    """Add the record of each of ``entries`` (with its metadata) to ``plan``.

    The metadata record of an entry written before version 4 joins the keys
    ``deleting``: the entry's record holds its metadata now. Returns False
    when the names an entry brings make its record too large for one write
    (the flush then stores them in the registry's rows).
    """
    writes, marks = plan.writes, plan.marks
    fits = True
    for entry in entries:
        if entry.split:
            deleting[keys.metadata_key(entry.id)] = None
            entry.split = False
        metadata = meta(entry)
        cached = entry.encoded
        if cached is not None and cached[0] == entry.gen and cached[1] == metadata.gen:
            encoded = cached[2]  # the size check's, without names
            if entry.carried is not None:
                encoded = schema.with_names(encoded, entry.carried)
        else:
            encoded = schema.encode_entry(entry, metadata)
        if entry.carried is not None and entry.flushed == 0:
            fits = fits and len(entry.key) + len(encoded) <= MAX_KV_BATCH_PAYLOAD_BYTES
        writes.append((entry.key, encoded))
        marks.append((entry, entry.gen))
        marks.append((metadata, metadata.gen))
    return fits


def fits_one_batch(writes: list[KVWrite]) -> bool:
    """Return whether a non-atomic driver gets ``writes`` in one ``batch``.

    One write always does (the limit of one record is checked on its own).
    """
    if len(writes) > MAX_KV_BATCH_ENTRIES:
        return False
    if len(writes) == 1:
        return True
    size = 0
    for key, value in writes:
        size += len(key) + len(value)
    return size <= MAX_KV_BATCH_PAYLOAD_BYTES


def doomed(key: bytes, deletions: KVDeletions, single: set[bytes]) -> bool:
    if key in single:
        return True
    if any(key.startswith(prefix) for prefix in deletions.prefixes):
        return True
    return any(start <= key < end for start, end in deletions.ranges)


def schedule_deletions(
    plan: Plan,
    prefixes: list[bytes],
    pending_keys: dict[bytes, None],
    ranges: list[tuple[bytes, bytes]],
) -> None:
    """Add the pending deletions to ``plan``.

    A key written again after its deletion was scheduled (a new entry where
    old ones were pruned) moves to ``plan.rewrites``: it lands after the
    delete.
    """
    deletions = plan.deletions
    deletions.prefixes = list(prefixes)
    deletions.keys += pending_keys
    deletions.ranges = list(ranges)
    writes = plan.writes
    if deletions and writes:
        single = set(deletions.keys)
        later = [w for w in writes if doomed(w[0], deletions, single)]
        if later:
            plan.writes = [w for w in writes if not doomed(w[0], deletions, single)]
            plan.rewrites = later


def settle_deletions(
    deletions: KVDeletions,
    prefixes: list[bytes],
    pending_keys: dict[bytes, None],
    ranges: list[tuple[bytes, bytes]],
) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    """Drop the ``deletions`` a flush made from the pending ones.

    ``pending_keys`` changes in place; returns the prefixes and ranges still pending.
    """
    if deletions.prefixes:
        done = set(deletions.prefixes)
        prefixes = [p for p in prefixes if p not in done]
    for key in deletions.keys:
        pending_keys.pop(key, None)
    if deletions.ranges:
        spans = set(deletions.ranges)
        ranges = [r for r in ranges if r not in spans]
    return prefixes, ranges


async def apply(driver: EngineDriver, plan: Plan) -> None:
    """Send ``plan`` to ``driver``: one atomic unit, or chunks then deletions."""
    # Every size is checked before any I/O.
    chunks = chunk_writes(plan.writes)
    later = chunk_writes(plan.rewrites) if plan.rewrites else []
    completing = plan.completions
    try:
        if driver.atomic_batch:
            await driver.atomic_flush(plan.writes + plan.rewrites, plan.deletions)
        else:
            carrier = getattr(driver, "batch_completing", None)
            if carrier is not None and completing and len(chunks) == 1 and not later:
                # One transaction records the messages and removes them: a
                # commit less per receive, and never one without the other.
                await carrier(chunks[0], list(completing))
                chunks, completing = [], []
            for chunk in chunks:
                await driver.batch(chunk)
            if plan.deletions:  # (a step's flush deletes nothing)
                await _delete(driver, plan.deletions)
            for chunk in later:
                await driver.batch(chunk)
        # Else removed once their record is durable: a crash in between
        # leaves them in the inbox, and the record keeps them from being
        # received twice.
        for message_id in completing:
            await driver.complete_message(message_id, None)
    except StorageLimitError:
        raise  # the driver refused the unit: the caller decides
    except Exception as exc:
        logger.warning("workflow flush failed error=%r", exc)
        raise StorageError(f"Workflow storage failed: {exc}") from exc


async def _delete(driver: EngineDriver, deletions: KVDeletions) -> None:
    operations: list[Callable[[], Awaitable[None]]] = []
    for prefix in deletions.prefixes:
        operations.append(functools.partial(driver.delete_prefix, prefix))
    for start in range(0, len(deletions.keys), MAX_KV_BATCH_ENTRIES):
        chunk = deletions.keys[start : start + MAX_KV_BATCH_ENTRIES]
        operations.append(functools.partial(driver.batch_delete, chunk))
    for low, high in deletions.ranges:
        operations.append(functools.partial(driver.delete_range, low, high))
    if not operations:
        return
    if len(operations) == 1:
        await operations[0]()
        return
    limit = asyncio.Semaphore(MAX_CONCURRENT_DELETES)

    async def run(operation: Callable[[], Awaitable[None]]) -> None:
        async with limit:
            await operation()

    results = await asyncio.gather(
        *(run(operation) for operation in operations), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
