"""Loading a history fast: its rows by family, decoded in one call or lazily.

Loading a long history is mostly decoding it (P6). :func:`decode_entries`
sends a history's entry records through the CBOR decoder in one call;
what that cannot vouch for, and all metadata, is decoded lazily:
:func:`lazy_entry` and :func:`lazy_metadata` read an entry's id, seq and
kind from the first bytes of a version-3 record and decode the rest when a
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
from collections.abc import Sequence
from typing import Any

from ..splicing import cbor_head
from . import keys
from .cbor import loads, text_at, uint_at
from .driver import KVWrite
from .errors import SchemaError
from .schema import (
    KIND_DEFAULTS,
    Entry,
    EntryMetadata,
    decode_entry,
    decode_metadata,
    entry_data,
)
from .upgrades import SCHEMA_VERSION

__all__ = [
    "collector_paused",
    "decode_entries",
    "family",
    "lazy_entry",
    "lazy_metadata",
]


def decode_entries(
    records: Sequence[bytes], locations: Sequence[keys.Location]
) -> list[Entry]:
    """Decode the entries of a loaded history, ``records[i]`` at ``locations[i]``.

    Loading a long history is mostly this (P6): the records go through the
    CBOR decoder in one call, as one indefinite-length array, which costs
    half as much as a call per record. A decoded record is used only when
    its own bytes start as a version-3 entry and it has that shape; any
    other record, or all of them when the joined decoding fails or does not
    give one item per record, goes through :func:`lazy_entry` alone (with
    its errors and the upgrade chain).
    """
    decoded = _loads_joined(records)
    if decoded is None:
        return [
            lazy_entry(data, location)
            for data, location in zip(records, locations, strict=True)
        ]
    out: list[Entry] = []
    append = out.append
    new = Entry.__new__
    for data, record, location in zip(records, decoded, locations, strict=True):
        if data[:2] == _ENTRY_HEAD and type(record) is list and len(record) == 5:
            _, entry_id, seq, kind, raw = record
            if (
                type(entry_id) is str
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
                append(entry)
                continue
        append(lazy_entry(data, location))
    return out


# A version-3 entry record starts with these bytes: an array of five, then
# the version (an unsigned int below 24).
_ENTRY_HEAD = cbor_head(4, 5) + cbor_head(0, SCHEMA_VERSION)


def _loads_joined(records: Sequence[bytes]) -> list[Any] | None:
    """Decode ``records`` in one call; None unless that gives one item each."""
    try:
        decoded = loads(b"\x9f" + b"".join(records) + b"\xff")
    except SchemaError:
        return None
    if type(decoded) is not list or len(decoded) != len(records):
        return None
    return decoded


def lazy_entry(data: bytes, location: keys.Location) -> Entry:
    """Return the entry stored at ``location``, decoded when first used.

    A version-3 record gives its id, seq and kind from its first bytes; the
    data is decoded on first access (an undecodable one raises
    :class:`SchemaError` then). Older records are decoded now.
    """
    peeked = _peek_entry(data)
    if peeked is None:
        return decode_entry(data, location)
    entry = Entry.__new__(Entry)
    entry.id, entry.seq, entry.kind = peeked
    entry.location = tuple(location)
    entry.gen = entry.flushed = 1
    entry.sink = None
    entry.key = b""
    entry.encoded = None
    entry.raw = data
    return entry


def _peek_entry(data: bytes) -> tuple[str, int, str] | None:
    # [3, id, seq, kind, data]: array of 5, the version, a text, a uint, a
    # known kind; anything else is left to decode_entry (and its errors).
    if len(data) < 5 or data[0] != 0x85 or data[1] != SCHEMA_VERSION:
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
    """Return entry metadata decoded when a field is first used (version 3).

    Older records are decoded now.
    """
    if len(data) < 2 or data[0] != 0x89 or data[1] != SCHEMA_VERSION:
        return decode_metadata(data)
    metadata = EntryMetadata.__new__(EntryMetadata)
    metadata.gen = metadata.flushed = 1
    metadata.sink = None
    metadata.key = b""
    metadata.raw = data
    return metadata


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
