"""The in-memory image of one workflow's KV namespace, and its flush.

``Storage`` loads everything once per run with one ordered range read
(names, entries, workflow fields, older metadata), lets the context change
it, and writes the changes back with :meth:`Storage.flush`
(docs/storage-format.md, "Flush"): one write list of the names to store
(:mod:`.names`), one record per changed entry (with its metadata) and the
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
from .flush import (
    Plan,
    apply,
    chunk_writes,
    dirty_entries,
    driver_call,
    fits_one_batch,
    plan_records,
    schedule_deletions,
    settle_deletions,
)
from .limits import (
    MAX_CONCURRENT_DELETES,
    MAX_KV_BATCH_ENTRIES,
    MAX_KV_BATCH_PAYLOAD_BYTES,
    check_record,
)
from .names import Names
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

# Key prefixes of the record families the engine loads, in key order.
_NAMES, _ENTRIES = keys.pack((keys.NAMES,)), keys.pack((keys.ENTRIES,))
_WORKFLOW, _METADATA = keys.pack((keys.WORKFLOW,)), keys.pack((keys.METADATA,))
# A non-atomic flush of this many entries is more than one batch: no carrying.
_ONE_BATCH = MAX_KV_BATCH_ENTRIES - 8


class Storage:
    """One workflow's names, history, metadata and fields, with dirty tracking."""

    def __init__(self, driver: EngineDriver) -> None:
        self.driver = driver
        self.registry = Names()
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
        # Names first: an entry may need them (a race's winner is a name);
        # since version 4 the entries bring most of them.
        self._load_entries(loading.family(rows, _ENTRIES), loading.family(rows, _NAMES))
        self.fields.load(loading.family(rows, _WORKFLOW))
        self._load_metadata(loading.family(rows, _METADATA))
        self.loaded_locations = frozenset(self.entries)

    def _load_entries(self, rows: list[KVWrite], name_rows: list[KVWrite]) -> None:
        start = len(_ENTRIES)
        locations = [keys.unpack_location(key, start) for key, _ in rows]
        decoded, metas = loading.decode_entries([value for _, value in rows], locations)
        self.registry.load(name_rows, decoded)
        entries, metadata, dirty = self.entries, self.metadata, self._dirty
        stale: list[tuple[keys.Location, Entry]] = []
        for (key, _), location, entry, meta in zip(
            rows, locations, decoded, metas, strict=True
        ):
            if len(location) > 1:
                if history.superseded(location, entries, self.registry.index):
                    stale.append((location, entry))
                    continue
                self._index(location)
            entry.key = key
            entry.sink = dirty
            entries[location] = entry
            if meta is not None:
                meta.sink = dirty
                metadata[entry.id] = meta
        self._next_seq = max((entry.seq for entry in entries.values()), default=0) + 1
        self._delete_again(stale)

    def _load_metadata(self, rows: list[KVWrite]) -> None:
        """Adopt the metadata records of entries written before version 4."""
        adopted, orphans = loading.split_metadata(rows, self.entries.values())
        for entry_id, record in adopted:
            record.sink = self._dirty
            self.metadata[entry_id] = record
        # Of an entry that is gone (its delete was lost), or whose record
        # holds its metadata now.
        self.pending_keys.update(dict.fromkeys(orphans))

    def _delete_again(self, stale: list[tuple[keys.Location, Entry]]) -> None:
        """Schedule again the lost deletion of each left-over entry."""
        again = history.redeletions(stale, self.entries, self.registry.index)
        for _, entry in stale:
            self.registry.rescue(entry)
        self.pending_keys.update(dict.fromkeys(again.keys))
        self.pending_ranges += again.ranges
        self.pending_prefixes += again.prefixes
        if stale:
            logger.info(
                "workflow history had %s entries left over from a lost deletion",
                len(stale),
            )

    # Names and entries -----------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Return the name registry (index to name)."""
        return self.registry.names

    def name_index(self, name: str) -> int | None:
        """Return the registry index of ``name`` if it is registered."""
        return self.registry.index.get(name)

    def register_name(self, name: str) -> int:
        """Return the registry index of ``name``, registering it if new."""
        return self.registry.register(name)

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
        self._adopt(entry, metadata)
        return entry

    def _adopt(self, entry: Entry, metadata: EntryMetadata) -> None:
        metadata.owner = entry
        metadata.sink = self._dirty
        self.metadata[entry.id] = metadata
        self._dirty[metadata] = None

    def meta(self, entry: Entry) -> EntryMetadata:
        """Return the metadata of ``entry``, creating it if it went missing."""
        metadata = self.metadata.get(entry.id)
        if metadata is None:
            metadata = EntryMetadata(created_at=clock.now())
            self._adopt(entry, metadata)
        return metadata

    def update(
        self,
        entry: Entry,
        what: str,
        *,
        remove: Iterable[str] = (),
        meta: dict[str, Any] | None = None,
        **changes: Any,
    ) -> None:
        """Change ``entry.data`` (and its metadata) if the entry still fits one record.

        The one size check of what the engine records in history: the entry
        is encoded with the change (``meta``: metadata fields) and measured
        first; over the limit, :class:`StorageLimitError` names ``what`` and
        the entry is left as it was (so the failure can still be flushed).
        The encoding is kept for the flush.
        """
        data = {**entry.data, **changes}
        for name in remove:
            data.pop(name, None)
        metadata = self.meta(entry)
        # Kept for the flush without the names it brings (they are spliced
        # on), measured with them.
        encoded = schema.encode_entry(entry, metadata, data, meta, names=False)
        key = entry.key or keys.entry_key(entry.location)
        carried = entry.carried
        check_record(
            key, schema.with_names(encoded, carried) if carried else encoded, what
        )
        entry.data = data
        entry.touch()
        if meta:
            for name, value in meta.items():
                setattr(metadata, name, value)
            metadata.touch()
        entry.encoded = (entry.gen, metadata.gen, encoded)

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
            if entry.split:
                self.pending_keys[keys.metadata_key(entry.id)] = None
            self.registry.rescue(entry)

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
        if self.registry.dirty or self._dirty or self.unshown:
            return True
        if self._completing:
            return True
        if self.pending_prefixes or self.pending_keys or self.pending_ranges:
            return True
        return self.fields.dirty

    def _plan(
        self, *, with_deletions: bool, only_fields: bool = False, carry: bool = True
    ) -> Plan:
        registry = self.registry
        plan = Plan(names_upto=registry.flushed)
        writes = plan.writes
        carrier = None
        if not only_fields:
            start, upto = registry.flushed, len(registry.names)
            plan.names_upto = upto
            entries = dirty_entries(self._dirty) if self._dirty else []
            if carry and (self.driver.atomic_batch or len(entries) < _ONE_BATCH):
                carrier = registry.carrier(entries)
            if registry.rescued:
                plan.rescued = list(registry.rescued)
                writes += registry.rows(plan.rescued)
            if carrier is None and start < upto:
                writes += registry.rows(range(start, upto))
            if self._published:
                plan.published = list(self._published.items())
                writes += plan.published
            if entries and not plan_records(
                entries, plan, self.meta, self.pending_keys
            ):
                carry = False  # the names made a record too large: rows
        self.fields.plan(plan, with_deletions=with_deletions)
        if with_deletions and not only_fields:
            plan.completions = list(self._completing)
            schedule_deletions(
                plan, self.pending_prefixes, self.pending_keys, self.pending_ranges
            )
        if carrier is not None and (
            not carry
            or not self.driver.atomic_batch
            and (plan.rewrites or not fits_one_batch(plan.writes))
        ):
            # More than one batch: a batch cut short could leave an entry
            # without the names its location needs. The registry's rows
            # lead the first batch instead.
            carrier.carried = None
            return self._plan(
                with_deletions=with_deletions, only_fields=only_fields, carry=False
            )
        return plan

    def _commit(self, plan: Plan) -> None:
        named = self.registry.commit(plan.names_upto, plan.rescued)
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
        self.pending_prefixes, self.pending_ranges = settle_deletions(
            plan.deletions,
            self.pending_prefixes,
            self.pending_keys,
            self.pending_ranges,
        )
        # Observers hear of every flush that changed history: names, entries
        # or metadata written, or anything deleted (RivetKit's rule); a
        # state-only write is not news.
        if self.on_flush is not None and (plan.marks or named or plan.deletions):
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
