"""Loading a history fast: its rows by family, decoded in one call or lazily.

Loading a long history is mostly decoding it (P6). :func:`decode_entries`
sends a history's entry records through the CBOR decoder in one call (a
version-4 record gives the entry and its metadata); what that cannot vouch
for is decoded alone. The version-3 records of older histories are decoded
lazily: :func:`lazy_entry` and :func:`lazy_metadata` read an entry's id, seq
and kind from the first bytes of its record and decode the rest when a
field is first used (a replay that returns a step's recorded output never
needs its metadata). Older records are decoded at once, through the upgrade
chain. Each record's codec is :mod:`.schema`'s.

:func:`family` finds one record family in a load's sorted rows by
bisection, and :func:`collector_paused` keeps the garbage collector from
walking a history while it is built (or a flush of it planned).
"""

from __future__ import annotations

import bisect
import gc
import operator
from collections.abc import Iterable, Sequence
from typing import Any

from ..splicing import cbor_head
from . import keys
from .cbor import loads, text_at, uint_at
from .driver import KVWrite
from .errors import SchemaError
from .schema import (
    ENTRY_ITEMS,
    ENTRY_STATUSES,
    KIND_DEFAULTS,
    Entry,
    EntryMetadata,
    check_carried,
    decode_entry_record,
    decode_metadata,
    entry_data,
)
from .upgrades import SCHEMA_VERSION

__all__ = [
    "collector_paused",
    "decode_entries",
    "family",
    "lazy_entry",
    "lazy_entry_record",
    "lazy_metadata",
    "split_metadata",
]


def decode_entries(
    records: Sequence[bytes], locations: Sequence[keys.Location]
) -> tuple[list[Entry], list[EntryMetadata | None]]:
    """Decode the entries of a loaded history, ``records[i]`` at ``locations[i]``.

    Returns the entries and, for each, the metadata its record holds
    (version 4) or ``None`` (older: a record of its own, the entry ``split``).

    Loading a long history is mostly this (P6): the records go through the
    CBOR decoder in one call, as one indefinite-length array, which costs
    half as much as a call per record. A decoded record is used only when
    its own bytes start as a version-4 or version-3 entry and it has that
    shape; any other record, or all of them when the joined decoding fails
    or does not give one item per record, goes through :func:`lazy_entry`
    alone (with its errors and the upgrade chain).
    """
    decoded = _loads_joined(records)
    if decoded is None:
        return _decode_alone(records, locations)
    out: list[Entry] = []
    metas: list[EntryMetadata | None] = []
    append, append_meta = out.append, metas.append
    new, new_meta = Entry.__new__, EntryMetadata.__new__
    for data, record, location in zip(records, decoded, locations, strict=True):
        head = data[:2]
        values: list[Any] | None = None
        carried = None
        if head in _V4_HEADS and type(record) is list and len(record) == data[0] - 0x80:
            entry_id, seq, kind, raw = record[1:5]
            values = record[5:ENTRY_ITEMS]
            carried = record[ENTRY_ITEMS] if len(record) > ENTRY_ITEMS else None
            shaped = values[0] in ENTRY_STATUSES and (
                carried is None or _carried_ok(carried)
            )
        elif head == _V3_ENTRY_HEAD and type(record) is list and len(record) == 5:
            _, entry_id, seq, kind, raw = record
            shaped = True
        else:
            shaped = False
        if (
            shaped
            and type(entry_id) is str
            and type(seq) is int
            and kind in KIND_DEFAULTS
            and type(raw) is dict
        ):
            entry = new(Entry)
            entry.id, entry.seq, entry.kind = entry_id, seq, kind
            entry.data = entry_data(kind, raw)
            entry.location = location
            entry.gen = entry.flushed = 1
            entry.sink = None
            entry.key = b""
            entry.encoded = entry.raw = None
            entry.carried, entry.split = carried, values is None
            append(entry)
            if values is None:  # version 3: its metadata is a record of its own
                append_meta(None)
                continue
            metadata = new_meta(EntryMetadata)
            (
                metadata.status,
                metadata.error,
                metadata.attempts,
                metadata.last_attempt_at,
                metadata.created_at,
                metadata.completed_at,
                metadata.rollback_completed_at,
                metadata.rollback_error,
            ) = values
            metadata.gen = metadata.flushed = 1
            metadata.sink = metadata.raw = None
            metadata.key = b""
            metadata.owner = entry
            append_meta(metadata)
            continue
        entry, held = lazy_entry_record(data, location)
        append(entry)
        append_meta(held)
    return out, metas


def _decode_alone(
    records: Sequence[bytes], locations: Sequence[keys.Location]
) -> tuple[list[Entry], list[EntryMetadata | None]]:
    out: list[Entry] = []
    metas: list[EntryMetadata | None] = []
    for data, location in zip(records, locations, strict=True):
        entry, metadata = lazy_entry_record(data, location)
        out.append(entry)
        metas.append(metadata)
    return out, metas


def _carried_ok(carried: Any) -> bool:
    # The common case first: a step under a new name brings that name.
    if (
        type(carried) is list
        and len(carried) == 2
        and type(carried[0]) is int
        and carried[0] >= 0
        and type(carried[1]) is str
    ):
        return True
    try:
        check_carried(carried)
    except SchemaError:
        return False
    return True


# An entry record starts with these bytes: an array of 13 or 14 (version 4:
# the entry and its metadata, then maybe the names it brought) or of 5
# (version 3), then the version (an unsigned int below 24).
_V4_HEADS = (
    cbor_head(4, ENTRY_ITEMS) + cbor_head(0, SCHEMA_VERSION),
    cbor_head(4, ENTRY_ITEMS + 1) + cbor_head(0, SCHEMA_VERSION),
)
_V3_ENTRY_HEAD = cbor_head(4, 5) + cbor_head(0, 3)


def _loads_joined(records: Sequence[bytes]) -> list[Any] | None:
    """Decode ``records`` in one call; None unless that gives one item each."""
    try:
        decoded = loads(b"\x9f" + b"".join(records) + b"\xff")
    except SchemaError:
        return None
    if type(decoded) is not list or len(decoded) != len(records):
        return None
    return decoded


def lazy_entry_record(
    data: bytes, location: keys.Location
) -> tuple[Entry, EntryMetadata | None]:
    """Return the entry stored at ``location`` and the metadata its record holds.

    A version-3 record gives its id, seq and kind from its first bytes; the
    data is decoded on first access (an undecodable one raises
    :class:`SchemaError` then), and its metadata is a record of its own
    (``None``). Other records are decoded now.
    """
    peeked = _peek_entry(data)
    if peeked is None:
        return decode_entry_record(data, location)
    entry = Entry.__new__(Entry)
    entry.id, entry.seq, entry.kind = peeked
    entry.location = tuple(location)
    entry.gen = entry.flushed = 1
    entry.sink = None
    entry.key = b""
    entry.encoded = None
    entry.raw = data
    entry.carried, entry.split = None, True
    return entry, None


def lazy_entry(data: bytes, location: keys.Location) -> Entry:
    """Return the entry stored at ``location`` (:func:`lazy_entry_record`)."""
    return lazy_entry_record(data, location)[0]


def _peek_entry(data: bytes) -> tuple[str, int, str] | None:
    # [3, id, seq, kind, data]: array of 5, version 3, a text, a uint, a
    # known kind; anything else is left to decode_entry (and its errors).
    if len(data) < 5 or data[0] != 0x85 or data[1] != 3:
        return None
    found = text_at(data, 2)
    if found is None or found[1] >= len(data):
        return None
    entry_id, pos = found
    seq = uint_at(data, pos)
    if seq is None or seq[1] >= len(data):
        return None
    kind = text_at(data, seq[1])
    if kind is None or kind[0] not in KIND_DEFAULTS or kind[1] >= len(data):
        return None
    return entry_id, seq[0], kind[0]


def lazy_metadata(data: bytes) -> EntryMetadata:
    """Return entry metadata decoded when a field is first used.

    A record of its own: what version 3 wrote (from version 4 an entry's
    record holds its metadata). Older records are decoded now.
    """
    if len(data) < 2 or data[0] != 0x89 or data[1] != 3:
        return decode_metadata(data)
    metadata = EntryMetadata.__new__(EntryMetadata)
    metadata.gen = metadata.flushed = 1
    metadata.sink = None
    metadata.key = b""
    metadata.raw = data
    metadata.owner = None
    return metadata


def split_metadata(
    rows: list[KVWrite], entries: Iterable[Entry]
) -> tuple[list[tuple[str, EntryMetadata]], list[bytes]]:
    """Match metadata records (written before version 4) to their ``entries``.

    Returns each record matched to a ``split`` entry (lazy, ``owner`` set),
    with that entry's id, and the keys of the others: their entry is gone,
    or its record holds its metadata now.
    """
    if not rows:
        return [], []
    # Matched by key: building each entry's key is cheaper than parsing
    # each metadata key for its id.
    owners = {keys.metadata_key(entry.id): entry for entry in entries if entry.split}
    adopted: list[tuple[str, EntryMetadata]] = []
    orphans: list[bytes] = []
    for key, value in rows:
        entry = owners.get(key)
        if entry is None:
            orphans.append(key)
            continue
        record = lazy_metadata(value)
        record.key = key
        record.owner = entry
        adopted.append((entry.id, record))
    return adopted, orphans


_first = operator.itemgetter(0)


def family(rows: list[KVWrite], prefix: bytes) -> list[KVWrite]:
    """Return the rows whose keys start with ``prefix`` (``rows`` sorted)."""
    start = bisect.bisect_left(rows, prefix, key=_first)
    end = bisect.bisect_left(rows, keys.strinc(prefix), lo=start, key=_first)
    return rows[start:end]


def collector_paused() -> _CollectorPaused:
    """Pause Python's cyclic garbage collector while a history is built or planned.

    Building a long history makes tens of thousands of container objects
    at once (entries, their data, locations, metadata), none of them
    garbage, and their allocations set off collector passes that walk them
    -- the oldest generation's passes walk every object of the process --
    for nothing: a fifth of a 10,000-entry load (P6). Planning a flush
    makes one tuple per write, and those passes walk the whole history
    held in memory: half of planning 10,000 new entries (P4). The collector is
    process-wide: meanwhile another thread's garbage cycles wait for the
    next pass after it. It is switched back on only if it was on.
    """
    return _CollectorPaused()


class _CollectorPaused:
    """What :func:`collector_paused` returns: a class, as every flush (a step's)
    enters one and a generator's context manager costs three times as much."""

    __slots__ = ("_paused",)

    def __enter__(self) -> None:
        self._paused = gc.isenabled()
        if self._paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._paused:
            gc.enable()
