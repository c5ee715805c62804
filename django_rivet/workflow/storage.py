"""The in-memory image of one workflow's KV namespace, and its flush.

``Storage`` loads everything once per run (names, entries, metadata, workflow
fields), lets the context mutate it with dirty tracking, and writes changes
back with :meth:`Storage.flush`, exactly as SPEC 5.3 prescribes:

1. one write list: new names, dirty entries, dirty metadata, changed workflow
   fields (compared with their flushed shadows);
2. an ``atomic_batch`` driver gets the list whole in one ``batch()``; any other
   driver gets chunks of at most ``MAX_KV_BATCH_ENTRIES`` writes and
   ``MAX_KV_BATCH_PAYLOAD_BYTES`` key+value bytes (one write over that limit
   raises before anything is written);
3. then the pending deletions (prefixes, keys in chunks of 128, ranges), at
   most ``MAX_CONCURRENT_DELETES`` at once;
4. only when every write and delete succeeded are dirty markers and shadows
   cleared, so a failed flush is simply redone in full by the next one.

Dirty markers are generation counters: a change made while a flush is in
flight (a parallel join branch) bumps the generation, and the flush only
acknowledges the generation it actually wrote.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django_rivet import clock

from . import keys, schema
from .driver import EngineDriver, KVWrite
from .errors import StorageError, StorageLimitError
from .schema import Entry, EntryMetadata

__all__ = [
    "MAX_CONCURRENT_DELETES",
    "MAX_KV_BATCH_ENTRIES",
    "MAX_KV_BATCH_PAYLOAD_BYTES",
    "UNSET",
    "Storage",
    "chunk_writes",
]

logger = logging.getLogger("django_rivet.workflow")

MAX_KV_BATCH_ENTRIES = 128
MAX_KV_BATCH_PAYLOAD_BYTES = 976 * 1024
MAX_CONCURRENT_DELETES = 64

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()

_FIELDS = (
    keys.WORKFLOW_STATE,
    keys.WORKFLOW_OUTPUT,
    keys.WORKFLOW_ERROR,
    keys.WORKFLOW_INPUT,
)


def chunk_writes(writes: list[KVWrite]) -> list[list[KVWrite]]:
    """Split ``writes`` into batches within the entry and byte limits.

    Raises :class:`StorageLimitError` if one write alone is over the byte limit.
    """
    sizes = [len(key) + len(value) for key, value in writes]
    for size in sizes:
        if size > MAX_KV_BATCH_PAYLOAD_BYTES:
            raise StorageLimitError(
                f"KV batch write is {size} bytes, exceeding the "
                f"{MAX_KV_BATCH_PAYLOAD_BYTES} byte limit"
            )
    chunks: list[list[KVWrite]] = []
    chunk: list[KVWrite] = []
    total = 0
    for write, size in zip(writes, sizes, strict=True):
        full = len(chunk) >= MAX_KV_BATCH_ENTRIES
        if chunk and (full or total + size > MAX_KV_BATCH_PAYLOAD_BYTES):
            chunks.append(chunk)
            chunk, total = [], 0
        chunk.append(write)
        total += size
    if chunk:
        chunks.append(chunk)
    return chunks


@dataclass(slots=True)
class _Plan:
    """What one flush writes and deletes, with the generations it acknowledges."""

    writes: list[KVWrite] = field(default_factory=list)
    rewrites: list[KVWrite] = field(default_factory=list)
    names_upto: int = 0
    marks: list[tuple[Entry | EntryMetadata, int]] = field(default_factory=list)
    fields: dict[int, bytes | None] = field(default_factory=dict)
    prefixes: list[bytes] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    ranges: list[tuple[bytes, bytes]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.writes or self.rewrites or self.prefixes or self.keys or self.ranges
        )


def _doomed(key: bytes, plan: _Plan) -> bool:
    if key in plan.keys:
        return True
    if any(key.startswith(prefix) for prefix in plan.prefixes):
        return True
    return any(start <= key < end for start, end in plan.ranges)


class Storage:
    """One workflow's names, history, metadata and fields, with dirty tracking."""

    def __init__(self, driver: EngineDriver) -> None:
        self.driver = driver
        self.names: list[str] = []
        self._name_index: dict[str, int] = {}
        self._flushed_names = 0
        self.entries: dict[keys.Location, Entry] = {}
        self.metadata: dict[str, EntryMetadata] = {}
        self.loaded_locations: frozenset[keys.Location] = frozenset()
        self._fields: dict[int, Any] = dict.fromkeys(_FIELDS, UNSET)
        self._shadows: dict[int, bytes | None] = dict.fromkeys(_FIELDS)
        self.pending_prefixes: list[bytes] = []
        self.pending_keys: list[bytes] = []
        self.pending_ranges: list[tuple[bytes, bytes]] = []
        self._next_seq = 1
        self._lock = asyncio.Lock()
        self.on_flush: Callable[[], None] | None = None

    # Loading ------------------------------------------------------------------

    @classmethod
    async def load(cls, driver: EngineDriver) -> Storage:
        """Read the whole namespace of the driver's workflow."""
        storage = cls(driver)
        names: dict[int, str] = {}
        for key, value in await driver.list(keys.pack((keys.NAMES,))):
            names[keys.unpack(key)[1]] = schema.decode_name(value)
        for index in range(max(names, default=-1) + 1):
            # A hole cannot happen with this engine; keep indexes stable anyway.
            storage._add_name(names.get(index, f"#{index}"))
        storage._flushed_names = len(storage.names)
        for key, value in await driver.list(keys.pack((keys.ENTRIES,))):
            location = keys.unpack(key)[1:]
            entry = schema.decode_entry(value, location)
            storage.entries[location] = entry
            storage._next_seq = max(storage._next_seq, entry.seq + 1)
        for key, value in await driver.list(keys.pack((keys.METADATA,))):
            storage.metadata[keys.unpack(key)[1]] = schema.decode_metadata(value)
        for key, value in await driver.list(keys.pack((keys.WORKFLOW,))):
            field_id = keys.unpack(key)[1]
            if field_id in storage._fields:
                storage._fields[field_id] = schema.decode_workflow_field(
                    field_id, value
                )
                storage._shadows[field_id] = bytes(value)
        storage.loaded_locations = frozenset(storage.entries)
        return storage

    # Names and entries -----------------------------------------------------------

    def _add_name(self, name: str) -> int:
        self._name_index.setdefault(name, len(self.names))
        self.names.append(name)
        return len(self.names) - 1

    def name_index(self, name: str) -> int | None:
        """Return the registry index of ``name`` if it is registered."""
        return self._name_index.get(name)

    def register_name(self, name: str) -> int:
        """Return the registry index of ``name``, registering it if new."""
        index = self._name_index.get(name)
        return self._add_name(name) if index is None else index

    def location_string(self, location: keys.Location) -> str:
        """Render ``location`` as ``loop/~3/step``."""
        return schema.location_string(location, self.names)

    def create_entry(
        self,
        location: keys.Location,
        kind: str,
        data: dict[str, Any],
        *,
        status: str = "pending",
    ) -> Entry:
        """Record a new entry (and its metadata) at ``location``."""
        entry = Entry(uuid.uuid4().hex, kind, location, self._next_seq, data)
        self._next_seq += 1
        self.entries[location] = entry
        self.metadata[entry.id] = EntryMetadata(status=status, created_at=clock.now())
        return entry

    def meta(self, entry: Entry) -> EntryMetadata:
        """Return the metadata of ``entry``, creating it if it went missing."""
        metadata = self.metadata.get(entry.id)
        if metadata is None:
            metadata = self.metadata[entry.id] = EntryMetadata(created_at=clock.now())
        return metadata

    def delete_subtree(self, location: keys.Location) -> None:
        """Forget every entry strictly below ``location`` and delete it on flush."""
        depth = len(location)
        doomed = [
            loc
            for loc in self.entries
            if len(loc) > depth and loc[:depth] == tuple(location)
        ]
        self._forget(doomed)
        self.pending_prefixes.append(keys.entry_key(location))

    def delete_iterations(
        self, loop_location: keys.Location, loop_index: int, start: int, end: int
    ) -> None:
        """Delete iterations ``[start, end)`` of a loop with one range delete."""
        depth = len(loop_location)
        doomed = []
        for loc in self.entries:
            if len(loc) <= depth or loc[:depth] != tuple(loop_location):
                continue
            marker = loc[depth]
            if isinstance(marker, tuple) and start <= marker[1] < end:
                doomed.append(loc)
        self._forget(doomed)
        self.pending_ranges.append(
            (
                keys.entry_key((*loop_location, (loop_index, start))),
                keys.entry_key((*loop_location, (loop_index, end))),
            )
        )

    def _forget(self, locations: list[keys.Location]) -> None:
        for loc in locations:
            entry = self.entries.pop(loc)
            if self.metadata.pop(entry.id, None) is not None:
                self.pending_keys.append(keys.metadata_key(entry.id))

    # Workflow fields --------------------------------------------------------------

    def get_field(self, field_id: int, default: Any = None) -> Any:
        """Return a workflow field, or ``default`` when it is unset."""
        value = self._fields[field_id]
        return default if value is UNSET else value

    def has_field(self, field_id: int) -> bool:
        """Return whether a workflow field is set."""
        return self._fields[field_id] is not UNSET

    def set_field(self, field_id: int, value: Any) -> None:
        """Set a workflow field (``UNSET`` deletes it on the next flush)."""
        self._fields[field_id] = value

    @property
    def state(self) -> str:
        """Return the workflow state (``pending`` when never written)."""
        return self.get_field(keys.WORKFLOW_STATE, "pending")

    @state.setter
    def state(self, value: str) -> None:
        self.set_field(keys.WORKFLOW_STATE, value)

    # Flush ----------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Return whether anything waits to be flushed."""
        return not self._plan(with_deletions=True).empty

    def _plan(self, *, with_deletions: bool) -> _Plan:
        plan = _Plan(names_upto=len(self.names))
        for index in range(self._flushed_names, plan.names_upto):
            plan.writes.append(
                (keys.name_key(index), schema.encode_name(self.names[index]))
            )
        for entry in self.entries.values():
            if entry.dirty:
                key = keys.entry_key(entry.location)
                plan.writes.append((key, schema.encode_entry(entry)))
                plan.marks.append((entry, entry.gen))
        for entry_id, metadata in self.metadata.items():
            if metadata.dirty:
                key = keys.metadata_key(entry_id)
                plan.writes.append((key, schema.encode_metadata(metadata)))
                plan.marks.append((metadata, metadata.gen))
        for field_id, value in self._fields.items():
            shadow = self._shadows[field_id]
            if value is UNSET:
                if shadow is not None and with_deletions:
                    plan.keys.append(keys.workflow_key(field_id))
                    plan.fields[field_id] = None
                continue
            encoded = schema.encode_workflow_field(field_id, value)
            if encoded != shadow:
                plan.writes.append((keys.workflow_key(field_id), encoded))
                plan.fields[field_id] = encoded
        if with_deletions:
            plan.prefixes = list(self.pending_prefixes)
            plan.keys += self.pending_keys
            plan.ranges = list(self.pending_ranges)
            if plan.prefixes or plan.keys or plan.ranges:
                # A key written again after its deletion was scheduled (a new
                # entry where old ones were pruned) must land after the delete.
                later = [w for w in plan.writes if _doomed(w[0], plan)]
                if later:
                    plan.writes = [w for w in plan.writes if not _doomed(w[0], plan)]
                    plan.rewrites = later
        return plan

    def _commit(self, plan: _Plan) -> None:
        self._flushed_names = max(self._flushed_names, plan.names_upto)
        for record, gen in plan.marks:
            if record.flushed < gen:
                record.flushed = gen
        self._shadows.update(plan.fields)
        for prefix in plan.prefixes:
            self.pending_prefixes.remove(prefix)
        for key in plan.keys:
            if key in self.pending_keys:
                self.pending_keys.remove(key)
        for span in plan.ranges:
            self.pending_ranges.remove(span)
        if self.on_flush is not None and plan.marks:
            self.on_flush()

    async def flush(self) -> None:
        """Write every change, run pending deletions, then clear dirty markers."""
        async with self._lock:
            plan = self._plan(with_deletions=True)
            if plan.empty:
                return
            chunk_writes(plan.writes)  # every size is checked before any I/O
            chunk_writes(plan.rewrites)
            try:
                await self._write(plan.writes)
                await self._delete(plan)
                await self._write(plan.rewrites)
            except Exception as exc:
                logger.warning("workflow flush failed error=%r", exc)
                raise StorageError(f"Workflow storage failed: {exc}") from exc
            self._commit(plan)

    async def _write(self, writes: list[KVWrite]) -> None:
        chunks = chunk_writes(writes)  # validates every size before any I/O
        if not writes:
            return
        if self.driver.atomic_batch:
            await self.driver.batch(writes)
            return
        for chunk in chunks:
            await self.driver.batch(chunk)

    async def _delete(self, plan: _Plan) -> None:
        driver = self.driver
        operations: list[tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]]
        operations = [(driver.delete_prefix, (prefix,)) for prefix in plan.prefixes]
        for start in range(0, len(plan.keys), MAX_KV_BATCH_ENTRIES):
            chunk = plan.keys[start : start + MAX_KV_BATCH_ENTRIES]
            operations.append((driver.batch_delete, (chunk,)))
        operations += [(driver.delete_range, span) for span in plan.ranges]
        if not operations:
            return
        limit = asyncio.Semaphore(MAX_CONCURRENT_DELETES)

        async def run(operation: Any, args: tuple) -> None:
            async with limit:
                await operation(*args)

        results = await asyncio.gather(
            *(run(op, args) for op, args in operations), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def transactional_writes(self) -> tuple[list[KVWrite], _Plan]:
        """Build the write list of a transactional step without clearing markers.

        The caller hands the writes to ``driver.run_transactional`` and calls
        :meth:`acknowledge` once it returned; deletions wait for the next flush.
        """
        plan = self._plan(with_deletions=False)
        chunk_writes(plan.writes)  # the same single-write limit as any flush
        return plan.writes, plan

    def acknowledge(self, plan: _Plan) -> None:
        """Clear the dirty markers a successful transactional write covered."""
        self._commit(plan)
