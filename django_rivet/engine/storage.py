"""The in-memory image of one workflow's KV namespace, and its flush.

``Storage`` loads everything once per run with one ordered range read
(names, entries, workflow fields, metadata), lets the context change it, and
writes the changes back with :meth:`Storage.flush` (docs/storage-format.md,
"Flush"): one write list of new names, dirty entries, dirty metadata and
changed workflow fields (compared with their flushed shadows: :mod:`.fields`),
plus the pending deletions, sent by :mod:`.flush`; dirty markers and shadows
are cleared only once everything succeeded, so a failed flush is redone in
full by the next one.

Cost. Changed records sit in a dirty set (a record reports itself when
touched) and every entry is indexed under each scope that contains it, so a
flush, a prune and a scope check cost what changed, not the history size.
Dirty markers are generation counters: a change made while a flush is in
flight (a parallel join branch) stays dirty.

Durability. Deletions are idempotent and may be lost with a crash (or fail)
after the writes that made them due: loading drops entries a recorded loop
or race has disowned (``history.disowned_at``) and orphaned metadata, and
schedules their deletion again with the next flush.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from django_rivet import clock

from . import history, keys, loading, observe, schema
from .driver import EngineDriver, KVWrite
from .fields import WorkflowFields
from .flush import Plan, apply, chunk_writes, doomed, driver_call, plan_records
from .limits import (
    MAX_CONCURRENT_DELETES,
    MAX_KV_BATCH_ENTRIES,
    MAX_KV_BATCH_PAYLOAD_BYTES,
    check_record,
)
from .schema import Entry, EntryMetadata
from .stream_buffer import StreamBuffer

__all__ = [
    "MAX_CONCURRENT_DELETES",
    "MAX_KV_BATCH_ENTRIES",
    "MAX_KV_BATCH_PAYLOAD_BYTES",
    "Storage",
    "chunk_writes",
    "driver_call",
]

logger = logging.getLogger("django_rivet.workflow")

# Key prefixes of the four record families, in key order.
_NAMES = keys.pack((keys.NAMES,))
_ENTRIES = keys.pack((keys.ENTRIES,))
_WORKFLOW = keys.pack((keys.WORKFLOW,))
_METADATA = keys.pack((keys.METADATA,))


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
        # Every entry, under each proper non-empty prefix of its location:
        # the entries inside a scope without scanning the history.
        self._under: dict[keys.Location, dict[keys.Location, None]] = {}
        # Records changed since their last successful flush (an ordered set).
        self._dirty: dict[Entry | EntryMetadata, None] = {}
        self.fields = WorkflowFields()
        self.pending_prefixes: list[bytes] = []
        self.pending_keys: dict[bytes, None] = {}
        self.pending_ranges: list[tuple[bytes, bytes]] = []
        # Published values (events, replies) waiting for the next flush.
        self._published: dict[bytes, bytes] = {}
        # Received messages to remove from the inbox with the next flush.
        self._completing: dict[str, None] = {}
        self._next_seq = 1
        self._lock = asyncio.Lock()
        self.on_flush: Callable[[], None] | None = None
        # Stream writes (ctx.write_stream): committed after the history.
        self.streams = StreamBuffer(driver, self.flush)

    # Loading ------------------------------------------------------------------

    @classmethod
    async def load(cls, driver: EngineDriver) -> Storage:
        """Read the driver's whole namespace with one ordered range read."""
        storage = cls(driver)
        rows = await driver_call(driver.list(b""), "load")
        with loading.collector_paused():
            storage._build(rows)
        return storage

    def _build(self, rows: list[KVWrite]) -> None:
        """Fill this empty image from ``rows``, the driver's sorted rows."""
        # The driver returns the rows sorted by key, so each record family is
        # one run of them: found by bisection, each handled at once.
        # Names first: an entry may need them (a race's winner is a name).
        self._load_names(loading.family(rows, _NAMES))
        self._load_entries(loading.family(rows, _ENTRIES))
        self.fields.load(loading.family(rows, _WORKFLOW))
        self._load_metadata(loading.family(rows, _METADATA))
        self.loaded_locations = frozenset(self.entries)

    def _load_entries(self, rows: list[KVWrite]) -> None:
        start = len(_ENTRIES)
        locations = [keys.unpack_location(key, start) for key, _ in rows]
        decoded = loading.decode_entries([value for _, value in rows], locations)
        entries, dirty = self.entries, self._dirty
        stale: list[tuple[keys.Location, Entry]] = []
        for (key, _), location, entry in zip(rows, locations, decoded, strict=True):
            if len(location) > 1:
                if self._disowned(location):
                    stale.append((location, entry))
                    continue
                self._index(location)
            entry.key = key
            entry.sink = dirty
            entries[location] = entry
        self._next_seq = max((entry.seq for entry in entries.values()), default=0) + 1
        self._delete_again(stale)

    def _load_metadata(self, rows: list[KVWrite]) -> None:
        # Matched by key: building each entry's key is cheaper than parsing
        # each metadata key for its id.
        owners = {
            keys.metadata_key(entry.id): entry.id for entry in self.entries.values()
        }
        metadata, dirty = self.metadata, self._dirty
        for key, value in rows:
            entry_id = owners.get(key)
            if entry_id is None:
                # The metadata of an entry that is gone (its delete was lost).
                self.pending_keys[key] = None
                continue
            record = loading.lazy_metadata(value)
            record.key = key
            record.sink = dirty
            metadata[entry_id] = record

    def _load_names(self, rows: list[KVWrite]) -> None:
        found = {
            keys.name_index_of(key): schema.decode_name(value) for key, value in rows
        }
        size = max(found, default=-1) + 1
        if len(found) == size and next(iter(found), 0) == 0:
            # Slots 0..size-1 (distinct, sorted by key: in index order).
            names = list(found.values())
        else:  # a hole cannot happen with this engine; keep indexes stable anyway
            names = [found.get(index, f"#{index}") for index in range(size)]
        self.names = names
        # A name in two slots (no engine writes that) answers to the first.
        self._name_index = dict(
            zip(reversed(names), range(size - 1, -1, -1), strict=True)
        )
        self._flushed_names = size

    def _disowned(self, location: keys.Location) -> bool:
        return len(location) > 1 and history.superseded(
            location, self.entries, self._name_index
        )

    def _delete_again(self, stale: list[tuple[keys.Location, Entry]]) -> None:
        """Schedule again the lost deletion of each left-over entry."""
        again = history.redeletions(stale, self.entries, self._name_index)
        self.pending_keys.update(dict.fromkeys(again.keys))
        self.pending_ranges += again.ranges
        self.pending_prefixes += again.prefixes
        if stale:
            logger.info(
                "workflow history had %s entries left over from a lost deletion",
                len(stale),
            )

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
        return history.location_string(location, self.names)

    def _index(self, location: keys.Location) -> None:
        under = self._under
        for depth in range(1, len(location)):
            scope = location[:depth]
            bucket = under.get(scope)
            if bucket is None:
                under[scope] = {location: None}
            else:
                bucket[location] = None

    def entries_under(self, scope: keys.Location) -> Iterable[keys.Location]:
        """Return the locations of every entry strictly below ``scope``."""
        if not scope:
            return list(self.entries)
        return list(self._under.get(tuple(scope), ()))

    def create_entry(
        self,
        location: keys.Location,
        kind: str,
        data: dict[str, Any],
        *,
        status: str = "pending",
    ) -> Entry:
        """Record a new entry (and its metadata) at ``location``."""
        entry = Entry(schema.new_entry_id(), kind, location, self._next_seq, data)
        self._next_seq += 1
        previous = self.entries.get(location)
        if previous is not None:
            self._forget([location])
        entry.key = keys.entry_key(location)
        entry.sink = self._dirty
        self.entries[location] = entry
        self._index(location)
        self._dirty[entry] = None
        metadata = EntryMetadata(status=status, created_at=clock.now())
        self._adopt(entry.id, metadata)
        return entry

    def _adopt(self, entry_id: str, metadata: EntryMetadata) -> None:
        metadata.key = keys.metadata_key(entry_id)
        metadata.sink = self._dirty
        self.metadata[entry_id] = metadata
        self._dirty[metadata] = None

    def meta(self, entry: Entry) -> EntryMetadata:
        """Return the metadata of ``entry``, creating it if it went missing."""
        metadata = self.metadata.get(entry.id)
        if metadata is None:
            metadata = EntryMetadata(created_at=clock.now())
            self._adopt(entry.id, metadata)
        return metadata

    def update(
        self,
        entry: Entry,
        what: str,
        *,
        remove: Iterable[str] = (),
        **changes: Any,
    ) -> None:
        """Change ``entry.data`` if the changed entry still fits one record.

        The one size check of what the engine records in history: the entry
        is encoded with the change and measured first; over the limit,
        :class:`StorageLimitError` names ``what`` and the entry is left as it
        was (so the failure can still be flushed). The encoding is kept for
        the flush.
        """
        data = {**entry.data, **changes}
        for name in remove:
            data.pop(name, None)
        encoded = schema.encode_entry(entry, data)
        check_record(entry.key or keys.entry_key(entry.location), encoded, what)
        entry.data = data
        entry.touch()
        entry.encoded = (entry.gen, encoded)

    def delete_subtree(self, location: keys.Location) -> None:
        """Forget every entry strictly below ``location`` and delete it on flush."""
        self._forget(self.entries_under(location))
        self.pending_prefixes.append(keys.entry_key(location))

    def delete_iterations(
        self, loop_location: keys.Location, loop_index: int, start: int, end: int
    ) -> None:
        """Delete iterations ``[start, end)`` of a loop with one range delete."""
        scope = tuple(loop_location)
        for iteration in range(start, end):
            marker = (*scope, (loop_index, iteration))
            self._forget([marker, *self.entries_under(marker)])
        self.pending_ranges.append(
            (
                keys.entry_key((*scope, (loop_index, start))),
                keys.entry_key((*scope, (loop_index, end))),
            )
        )

    def delete_entry(self, location: keys.Location) -> None:
        """Forget the entry at ``location`` and delete it (and its metadata)."""
        entry = self.entries.get(location)
        if entry is not None:
            self.pending_keys[entry.key or keys.entry_key(location)] = None
            self._forget([location])

    def _forget(self, locations: Iterable[keys.Location]) -> None:
        for loc in locations:
            entry = self.entries.pop(loc, None)
            if entry is None:
                continue
            entry.sink = None
            self._dirty.pop(entry, None)
            for depth in range(1, len(loc)):
                scope = loc[:depth]
                bucket = self._under.get(scope)
                if bucket is not None:
                    bucket.pop(loc, None)
                    if not bucket:
                        del self._under[scope]
            metadata = self.metadata.pop(entry.id, None)
            if metadata is not None:
                metadata.sink = None
                self._dirty.pop(metadata, None)
                self.pending_keys[metadata.key or keys.metadata_key(entry.id)] = None

    # Published values -------------------------------------------------------------

    def publish(self, key: bytes, record_type: str, value: Any, what: str) -> None:
        """Write a value readers outside the workflow see, with the next flush.

        ``key`` is an event's or a reply's (:func:`keys.event_key`,
        :func:`keys.reply_key`); the value is measured now, like every record.
        The write goes before the entries of its flush, so the entry that
        records it never lands without it.
        """
        encoded = schema.encode_published(record_type, value)
        check_record(key, encoded, what)
        self._published[key] = encoded

    def complete_messages(self, message_ids: Iterable[str]) -> None:
        """Remove received messages from the inbox with the next flush.

        The flush removes them in its own transaction when the driver can
        (``batch_completing``), else right after its writes; a failed flush
        keeps them for the next one.
        """
        self._completing.update(dict.fromkeys(message_ids))

    @property
    def completing(self) -> bool:
        """Return whether received messages wait for the flush that removes them."""
        return bool(self._completing)

    # Workflow fields --------------------------------------------------------------

    def get_field(self, field_id: int, default: Any = None) -> Any:
        """Return a workflow field, or ``default`` when it is unset."""
        return self.fields.get(field_id, default)

    def has_field(self, field_id: int) -> bool:
        """Return whether a workflow field is set."""
        return self.fields.has(field_id)

    def set_field(self, field_id: int, value: Any) -> None:
        """Set a workflow field (:meth:`WorkflowFields.set`)."""
        self.fields.set(field_id, value)

    @property
    def state(self) -> str:
        """Return the workflow state (``pending`` when never written)."""
        return str(self.get_field(keys.WORKFLOW_STATE, "pending"))

    @state.setter
    def state(self, value: str) -> None:
        self.set_field(keys.WORKFLOW_STATE, value)

    # Flush ----------------------------------------------------------------------

    @property
    def unshown(self) -> bool:
        """Return whether published values or stream writes wait to be flushed."""
        return bool(self._published or self.streams.pending)

    @property
    def dirty(self) -> bool:
        """Return whether anything waits to be flushed."""
        if self._flushed_names < len(self.names) or self._dirty or self.unshown:
            return True
        if self._completing:
            return True
        if self.pending_prefixes or self.pending_keys or self.pending_ranges:
            return True
        return self.fields.dirty

    def _plan(self, *, with_deletions: bool, only_fields: bool = False) -> Plan:
        plan = Plan(names_upto=self._flushed_names)
        writes = plan.writes
        if not only_fields:
            plan.names_upto = len(self.names)
            for index in range(self._flushed_names, plan.names_upto):
                writes.append(
                    (keys.name_key(index), schema.encode_name(self.names[index]))
                )
            if self._published:
                plan.published = list(self._published.items())
                writes += plan.published
            if self._dirty:
                plan_records(self._dirty, plan)
        self.fields.plan(plan, with_deletions=with_deletions)
        if with_deletions and not only_fields:
            plan.completions = list(self._completing)
            deletions = plan.deletions
            deletions.prefixes = list(self.pending_prefixes)
            deletions.keys += self.pending_keys
            deletions.ranges = list(self.pending_ranges)
            if deletions and writes:
                # A key written again after its deletion was scheduled (a new
                # entry where old ones were pruned) must land after the delete.
                single = set(deletions.keys)
                later = [w for w in writes if doomed(w[0], deletions, single)]
                if later:
                    plan.writes = [
                        w for w in writes if not doomed(w[0], deletions, single)
                    ]
                    plan.rewrites = later
        return plan

    def _commit(self, plan: Plan) -> None:
        names_before = self._flushed_names
        self._flushed_names = max(self._flushed_names, plan.names_upto)
        dirty = self._dirty
        for record, gen in plan.marks:
            if record.flushed < gen:
                record.flushed = gen
            if record.flushed == record.gen:
                dirty.pop(record, None)
        for key, value in plan.published:
            if self._published.get(key) == value:
                del self._published[key]
        for message_id in plan.completions:
            self._completing.pop(message_id, None)
        self.fields.commit(plan.fields)
        deletions = plan.deletions
        if deletions.prefixes:
            done = set(deletions.prefixes)
            self.pending_prefixes = [p for p in self.pending_prefixes if p not in done]
        for key in deletions.keys:
            self.pending_keys.pop(key, None)
        if deletions.ranges:
            spans = set(deletions.ranges)
            self.pending_ranges = [r for r in self.pending_ranges if r not in spans]
        # Observers hear of every flush that changed history: names, entries
        # or metadata written, or anything deleted (RivetKit's rule); a
        # state-only write is not news.
        if self.on_flush is not None and (
            plan.marks or plan.names_upto > names_before or plan.deletions
        ):
            self.on_flush()

    async def flush(self, *, only_fields: bool = False) -> None:
        """Write every change, run pending deletions, then clear dirty markers.

        ``only_fields`` writes the workflow fields alone: the last resort of
        a run whose other changes the driver refused as too large.
        """
        async with self._lock:
            with loading.collector_paused():
                plan = self._plan(with_deletions=True, only_fields=only_fields)
            if not plan.empty:
                await observe.flush(apply(self.driver, plan), len(plan.writes))
                self._commit(plan)
            if not only_fields:
                await self.streams.commit()

    def transactional_writes(self) -> tuple[list[KVWrite], Plan]:
        """Build the write list of a transactional step without clearing markers.

        The caller hands the writes to ``driver.run_transactional`` and calls
        :meth:`acknowledge` once it returned; deletions wait for the next flush.
        """
        with loading.collector_paused():
            plan = self._plan(with_deletions=False)
        chunk_writes(plan.writes)  # the same single-write limit as any flush
        return plan.writes, plan

    def acknowledge(self, plan: Plan) -> None:
        """Clear the dirty markers a successful transactional write covered."""
        self._commit(plan)
