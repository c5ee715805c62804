"""The one definition of how workflow records are stored.

Every value the engine writes is versioned CBOR. Since version 3 the three
records every history entry brings -- its name, the entry and its metadata --
are compact arrays ``[3, field, ...]`` (positions, not keys: a 10,000-entry
history is 30,000 of them); the workflow fields (state, output, error,
input) and the values published for readers outside the workflow (events and
replies) stay maps in the envelope ``{"v": 3, "type": <record type>, ...}``.
Versions 1 and 2 wrote every record as such a map; they decode through the
upgrade chain. This module encodes and decodes all of them. The engine, the
admin inspector and ``handle.history()`` all decode through here.

A loaded history's entries are decoded in one call (:func:`decode_entries`);
what that cannot vouch for, and all metadata, is decoded lazily:
:func:`lazy_entry` and :func:`lazy_metadata` read an entry's id and seq from
the first bytes of a version-3 record and decode the rest when a field is
first used (a replay that returns a step's recorded output never needs its
metadata).

The values inside are safe CBOR (:mod:`.cbor`: restricted tags, storable
types only), whose functions this module re-exports.

The module is one piece by design: every record type's encoding and
decoding, and the history view built from them, is the one definition that
the engine, the inspector and ``history()`` share.

``docs/storage-format.md`` describes the format; a format change adds a version
here (a decoder for the old version that upgrades to the current model) and
golden fixtures under ``tests/engine/fixtures/v<N>/`` that keep decoding.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..encoding import cbor_head
from . import keys
from .cbor import check_storable, check_value, dumps, loads, roundtrip
from .errors import SchemaError

__all__ = [
    "ENTRY_KINDS",
    "ENTRY_STATUSES",
    "SCHEMA_VERSION",
    "WORKFLOW_STATES",
    "Entry",
    "EntryMetadata",
    "HistoryEntry",
    "check_storable",
    "check_value",
    "decode_entries",
    "decode_entry",
    "decode_history",
    "decode_metadata",
    "decode_name",
    "decode_published",
    "decode_workflow_field",
    "disowned_at",
    "dumps",
    "encode_entry",
    "encode_metadata",
    "encode_name",
    "encode_published",
    "encode_workflow_field",
    "lazy_entry",
    "lazy_metadata",
    "loads",
    "record_version",
    "location_string",
    "roundtrip",
    "superseded",
    "upgrade_record",
]

SCHEMA_VERSION = 3

ENTRY_KINDS = (
    "step",
    "loop",
    "sleep",
    "message",
    "rollback_checkpoint",
    "join",
    "race",
    "removed",
    "version_check",
    # Version 2:
    "child",
    "reply",
    "event",
)
# Records of the published-values family ``(5, ...)`` (version 2).
PUBLISHED_TYPES = ("event", "reply")
ENTRY_STATUSES = ("pending", "running", "completed", "failed", "exhausted")
WORKFLOW_STATES = (
    "pending",
    "running",
    "sleeping",
    "failed",
    "completed",
    "cancelled",
    "rolling_back",
)

# --- Records ---------------------------------------------------------------------


# Where a record reports that it changed: the dirty set of the Storage that
# owns it (an insertion-ordered dict used as a set), or None when detached.
DirtySink = dict[Any, None]


@dataclass(slots=True, eq=False)
class Entry:
    """A history entry: one named call at a location (mutable, dirty-tracked)."""

    id: str
    kind: str
    location: keys.Location
    seq: int
    data: dict[str, Any]
    # Dirty tracking: ``gen`` moves on every change, ``flushed`` follows it once
    # a flush that saw that generation succeeded.
    gen: int = field(default=1, compare=False)
    flushed: int = field(default=0, compare=False)
    # Bookkeeping of the owning Storage: its dirty set, the packed key, and
    # the encoding made by the size check (``(gen, bytes)``), reused by the
    # flush while the entry has not changed since.
    sink: DirtySink | None = field(default=None, compare=False, repr=False)
    key: bytes = field(default=b"", compare=False, repr=False)
    encoded: tuple[int, bytes] | None = field(default=None, compare=False, repr=False)
    # A loaded entry not decoded yet (see lazy_entry): its stored record.
    raw: bytes | None = field(default=None, compare=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        # Only reached for an unset slot: the data of a lazy entry (its id,
        # seq and kind were read at load; data assigned since is a set slot).
        raw = self.raw
        if raw is None or name != "data":
            raise AttributeError(name)
        self.data = decode_entry(raw, self.location).data
        self.raw = None
        return self.data

    @property
    def dirty(self) -> bool:
        """Return whether the entry has changes not yet flushed."""
        return self.gen != self.flushed

    def touch(self) -> None:
        """Mark the entry changed."""
        self.gen += 1
        if self.sink is not None:
            self.sink[self] = None


@dataclass(slots=True, eq=False)
class EntryMetadata:
    """Bookkeeping of an entry: status, attempts, timings (dirty-tracked)."""

    status: str = "pending"
    error: dict[str, Any] | None = None
    attempts: int = 0
    last_attempt_at: float | None = None
    created_at: float = 0.0
    completed_at: float | None = None
    rollback_completed_at: float | None = None
    rollback_error: str | None = None
    gen: int = field(default=1, compare=False)
    flushed: int = field(default=0, compare=False)
    sink: DirtySink | None = field(default=None, compare=False, repr=False)
    key: bytes = field(default=b"", compare=False, repr=False)
    raw: bytes | None = field(default=None, compare=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        # Only reached for an unset slot: a field of lazy metadata.
        raw = self.raw
        if raw is None or name not in _METADATA_FIELDS:
            raise AttributeError(name)
        decoded = decode_metadata(raw)
        self.raw = None
        _fill(self, decoded, _METADATA_FIELDS)
        return getattr(self, name)

    @property
    def dirty(self) -> bool:
        """Return whether the metadata has changes not yet flushed."""
        return self.gen != self.flushed

    def touch(self) -> None:
        """Mark the metadata changed."""
        self.gen += 1
        if self.sink is not None:
            self.sink[self] = None


_METADATA_FIELDS = (
    "status",
    "error",
    "attempts",
    "last_attempt_at",
    "created_at",
    "completed_at",
    "rollback_completed_at",
    "rollback_error",
)
_metadata_values = operator.attrgetter(*_METADATA_FIELDS)


def _fill(record: Any, decoded: Any, names: Iterable[str]) -> None:
    """Set the fields of a lazy record that nothing assigned since loading."""
    for name in names:
        try:
            object.__getattribute__(record, name)
        except AttributeError:
            setattr(record, name, getattr(decoded, name))


# Defaults filled in when decoding each kind's data (optional keys stay absent:
# "output" present means "has an output", even when that output is None).
_KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "step": {},
    "loop": {"state": None, "iteration": 0, "pruned_before": 0},
    "sleep": {"deadline": 0.0, "state": "pending"},
    "message": {
        "names": None,
        "count": 1,
        "deadline": None,
        "state": "pending",
        "messages": [],
    },
    "rollback_checkpoint": {"name": ""},
    "join": {"branches": {}},
    "race": {"winner": None, "branches": {}},
    "removed": {"original_type": "", "original_name": ""},
    "version_check": {"version": 1},
    "child": {
        "workflow": "",
        "child_id": "",
        "detached": False,
        "wait": True,
        "state": "started",
    },
    "reply": {"message_id": "", "value": None},
    "event": {"key": "", "value": None},
}


def _envelope(record_type: str, **fields: Any) -> bytes:
    return dumps({"v": SCHEMA_VERSION, "type": record_type, **fields})


Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _upgrade_v1_to_v2(record: dict[str, Any]) -> dict[str, Any]:
    """Version 2 only adds: every version-1 record keeps its shape.

    (New entry kinds ``child``, ``reply``, ``event``; the published-values
    family; optional ``traceback`` and ``metadata`` in error maps.)
    """
    return {**record, "v": 2}


def _upgrade_v2_to_v3(record: dict[str, Any]) -> dict[str, Any]:
    """Version 3 changes how names, entries and metadata are laid out
    (compact arrays instead of maps), not what any record holds: a version-2
    record's fields are version 3's.
    """
    return {**record, "v": 3}


# Version N -> the function turning a version-N record into a version-(N+1)
# one. Decoding applies them in a chain up to SCHEMA_VERSION, so a record of
# any supported version comes out in the current shape. Each step is kept
# forever, with the fixtures of its version (docs/storage-format.md,
# "Adding a version"). The test suite registers a test-only version 0 here
# to prove the chain on real fixtures.
UPGRADES: dict[int, Upgrade] = {1: _upgrade_v1_to_v2, 2: _upgrade_v2_to_v3}


def record_version(data: bytes) -> int:
    """Return the schema version a stored record was written in."""
    record = loads(data)
    version = record[0] if isinstance(record, list) and record else None
    if isinstance(record, dict):
        version = record.get("v")
    if type(version) is not int:
        raise SchemaError(f"Unknown workflow schema version {version!r}")
    return version


def upgrade_record(record: dict[str, Any]) -> dict[str, Any]:
    """Bring a decoded record of any supported version to ``SCHEMA_VERSION``."""
    version = record.get("v")
    if type(version) is not int:
        raise SchemaError(f"Unknown workflow schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"Workflow schema version {version} is newer than this django-rivet "
            f"(it reads up to version {SCHEMA_VERSION}): upgrade django-rivet"
        )
    while version < SCHEMA_VERSION:
        step = UPGRADES.get(version)
        if step is None:
            raise SchemaError(f"Unknown workflow schema version {version!r}")
        record = step(record)
        if record.get("v") != version + 1:
            raise SchemaError(
                f"The upgrade of schema version {version} did not produce "
                f"version {version + 1}"
            )
        version += 1
    return record


def _open(data: bytes, record_type: str) -> dict[str, Any]:
    record = loads(data)
    if not isinstance(record, dict):
        raise SchemaError("A workflow record must be a CBOR map")
    if record.get("v") != SCHEMA_VERSION:
        record = upgrade_record(record)
    if record.get("type") != record_type:
        raise SchemaError(
            f"Expected a {record_type!r} record, found {record.get('type')!r}"
        )
    opened: dict[str, Any] = record
    return opened


# Version 3's compact records: [3, field, ...] in these orders.
_COMPACT_FIELDS = {
    "name": ("name",),
    "entry": ("id", "seq", "kind", "data"),
    "metadata": _METADATA_FIELDS,
}


def _compact(data: bytes, record_type: str) -> list[Any] | None:
    """Decode a compact record (a CBOR array), or ``None`` for an envelope map.

    Records of versions 1 and 2 are maps and go through :func:`_open` (the
    upgrade chain); only version 3 and later write arrays.
    """
    if not data or not 0x80 <= data[0] <= 0x9F:
        return None
    record = loads(data)
    if not isinstance(record, list) or not record:
        raise SchemaError(f"A {record_type!r} record must be a CBOR array or map")
    version = record[0]
    if type(version) is not int or version < 3:
        raise SchemaError(f"Unknown workflow schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"Workflow schema version {version} is newer than this django-rivet "
            f"(it reads up to version {SCHEMA_VERSION}): upgrade django-rivet"
        )
    if len(record) != 1 + len(_COMPACT_FIELDS[record_type]):
        raise SchemaError(
            f"Expected a {record_type!r} record of {len(_COMPACT_FIELDS[record_type])}"
            f" fields, found {len(record) - 1}"
        )
    return record


def _text_at(data: bytes, pos: int) -> tuple[str, int] | None:
    """Read a definite CBOR text string at ``pos``: ``(text, next pos)``."""
    head = data[pos]
    if 0x60 <= head <= 0x77:
        size, pos = head - 0x60, pos + 1
    elif head == 0x78 and pos + 1 < len(data):
        size, pos = data[pos + 1], pos + 2
    else:
        return None
    end = pos + size
    if end > len(data):
        return None
    try:
        return data[pos:end].decode("utf-8"), end
    except UnicodeDecodeError:
        return None


def _uint_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """Read a CBOR unsigned integer at ``pos``: ``(value, next pos)``."""
    head = data[pos]
    if head < 0x18:
        return head, pos + 1
    width = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}.get(head)
    if width is None or pos + 1 + width > len(data):
        return None
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "big"), pos + 1 + width


def encode_name(name: str) -> bytes:
    """Encode a name registry slot: the CBOR of ``[SCHEMA_VERSION, name]``.

    Written here rather than by cbor2 (the same bytes: definite lengths,
    the shortest heads): a flush writes one slot per new name, and the
    encoder's call cost most of it.
    """
    try:
        text = name.encode()
    except UnicodeEncodeError:  # a lone surrogate: cbor2 says what is wrong
        return dumps([SCHEMA_VERSION, name])
    return _NAME_HEAD + cbor_head(3, len(text)) + text  # 3: a text string


# A two-item array, then the version (an unsigned int below 24: one byte).
_NAME_HEAD = cbor_head(4, 2) + cbor_head(0, SCHEMA_VERSION)


def decode_name(data: bytes) -> str:
    """Decode a name registry slot."""
    if len(data) > 2 and data[0] == 0x82 and data[1] == SCHEMA_VERSION:
        # The common case, read without a general decoder: a loaded history
        # registers every name before replaying.
        found = _text_at(data, 2)
        if found is not None and found[1] == len(data):
            return found[0]
    compact = _compact(data, "name")
    name = compact[1] if compact is not None else _open(data, "name").get("name")
    if not isinstance(name, str):
        raise SchemaError("A name record needs a string name")
    return name


def encode_entry(entry: Entry, data: dict[str, Any] | None = None) -> bytes:
    """Encode a history entry (its location lives in the key).

    ``data`` replaces ``entry.data`` in the encoding (to measure a change
    before making it).
    """
    return dumps(
        [
            SCHEMA_VERSION,
            entry.id,
            entry.seq,
            entry.kind,
            entry.data if data is None else data,
        ]
    )


def _entry_data(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Return an entry's data: ``raw`` over its kind's defaults."""
    defaults = _KIND_DEFAULTS[kind]
    if not defaults:
        return raw  # a step: nothing to fill in (raw is freshly decoded)
    payload = {**defaults, **raw}
    if "messages" in payload and payload["messages"] is None:
        payload["messages"] = []
    return payload


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
                and kind in _KIND_DEFAULTS
                and type(raw) is dict
            ):
                entry = new(Entry)
                entry.id, entry.seq, entry.kind = entry_id, seq, kind
                entry.data = _entry_data(kind, raw)
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


def decode_entry(data: bytes, location: keys.Location = ()) -> Entry:
    """Decode a history entry stored at ``location``."""
    compact = _compact(data, "entry")
    if compact is not None:
        _, entry_id, seq, kind, raw = compact
    else:
        record = _open(data, "entry")
        entry_id, seq = record.get("id", ""), record.get("seq", 0)
        kind, raw = record.get("kind"), record.get("data")
    if kind not in _KIND_DEFAULTS:
        raise SchemaError(f"Unknown entry kind {kind!r}")
    raw = raw or {}
    if not isinstance(raw, dict):
        raise SchemaError("Entry data must be a map")
    payload = _entry_data(kind, raw)
    entry = Entry(
        id=str(entry_id),
        kind=kind,
        location=tuple(location),
        seq=int(seq),
        data=payload,
    )
    entry.flushed = entry.gen
    return entry


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
    found = _text_at(data, 2)
    if found is None or found[1] >= len(data):
        return None
    entry_id, pos = found
    seq = _uint_at(data, pos)
    if seq is None or seq[1] >= len(data):
        return None
    kind = _text_at(data, seq[1])
    if kind is None or kind[0] not in _KIND_DEFAULTS or kind[1] >= len(data):
        return None
    return entry_id, seq[0], kind[0]


def encode_metadata(metadata: EntryMetadata) -> bytes:
    """Encode entry metadata."""
    return dumps([SCHEMA_VERSION, *_metadata_values(metadata)])


def decode_metadata(data: bytes) -> EntryMetadata:
    """Decode entry metadata."""
    compact = _compact(data, "metadata")
    if compact is not None:
        values = dict(zip(_METADATA_FIELDS, compact[1:], strict=True))
    else:
        record = _open(data, "metadata")
        values = {name: record[name] for name in _METADATA_FIELDS if name in record}
    if values.get("status", "pending") not in ENTRY_STATUSES:
        raise SchemaError(f"Unknown entry status {values.get('status')!r}")
    metadata = EntryMetadata(**values)
    metadata.flushed = metadata.gen
    return metadata


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


_FIELD_TYPES = {
    keys.WORKFLOW_STATE: "state",
    keys.WORKFLOW_OUTPUT: "output",
    keys.WORKFLOW_ERROR: "error",
    keys.WORKFLOW_INPUT: "input",
}


def encode_workflow_field(field_id: int, value: Any) -> bytes:
    """Encode a workflow field: state (str), output, error (info map) or input."""
    return _envelope(_FIELD_TYPES[field_id], value=value)


def decode_workflow_field(field_id: int, data: bytes) -> Any:
    """Decode a workflow field written by :func:`encode_workflow_field`."""
    value = _open(data, _FIELD_TYPES[field_id]).get("value")
    if field_id == keys.WORKFLOW_STATE and value not in WORKFLOW_STATES:
        raise SchemaError(f"Unknown workflow state {value!r}")
    return value


def encode_published(record_type: str, value: Any) -> bytes:
    """Encode a published value: an ``event`` or a ``reply`` (version 2)."""
    if record_type not in PUBLISHED_TYPES:
        raise SchemaError(f"Unknown published record type {record_type!r}")
    return _envelope(record_type, value=value)


def decode_published(record_type: str, data: bytes) -> Any:
    """Decode a value written by :func:`encode_published`."""
    return _open(data, record_type).get("value")


# --- Decoded history ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One decoded history entry, as ``history()`` and the admin show it."""

    id: str
    kind: str
    location: str
    status: str
    attempts: int
    created_at: float | None
    completed_at: float | None
    output: Any
    error: dict[str, Any] | None
    seq: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    rollback_completed_at: float | None = None
    rollback_error: str | None = None


def location_string(location: keys.Location, names: list[str]) -> str:
    """Render a location as ``sum/~3/fetch``."""
    parts = []
    for segment in location:
        if isinstance(segment, tuple):
            parts.append(f"~{segment[1]}")
        elif 0 <= segment < len(names):
            parts.append(names[segment])
        else:
            parts.append(f"#{segment}")
    return "/".join(parts)


def history_entry(
    entry: Entry, metadata: EntryMetadata | None, names: list[str]
) -> HistoryEntry:
    """Build the decoded view of one entry."""
    data = entry.data
    if entry.kind == "step":
        output = data.get("output")
        error = data.get("error") or (metadata.error if metadata else None)
    elif entry.kind == "loop":
        output, error = data.get("output"), None
    elif entry.kind == "message":
        output, error = data.get("messages"), None
    elif entry.kind == "race":
        winner = data.get("winner")
        branch = data.get("branches", {}).get(winner, {}) if winner else {}
        output, error = ([winner, branch.get("output")] if winner else None), None
    elif entry.kind == "join":
        branches = data.get("branches", {})
        output = {k: b.get("output") for k, b in branches.items() if "output" in b}
        errors = {k: b["error"] for k, b in branches.items() if b.get("error")}
        error = {"name": "JoinError", "branches": errors} if errors else None
    elif entry.kind == "version_check":
        output, error = data.get("version"), None
    elif entry.kind == "child":
        output = data.get("output") if "output" in data else data.get("child_id")
        error = data.get("error")
    elif entry.kind in ("reply", "event"):
        output, error = data.get("value"), None
    else:
        output, error = None, None
    return HistoryEntry(
        id=entry.id,
        kind=entry.kind,
        location=location_string(entry.location, names),
        status=metadata.status if metadata else "pending",
        attempts=metadata.attempts if metadata else 0,
        created_at=metadata.created_at if metadata else None,
        completed_at=metadata.completed_at if metadata else None,
        output=output,
        error=error,
        seq=entry.seq,
        data=dict(data),
        rollback_completed_at=metadata.rollback_completed_at if metadata else None,
        rollback_error=metadata.rollback_error if metadata else None,
    )


def superseded(
    location: keys.Location,
    entries: Mapping[keys.Location, Entry],
    name_index: Mapping[str, int],
) -> bool:
    """Tell whether the entry at ``location`` is left over from a deletion.

    See :func:`disowned_at`.
    """
    return disowned_at(location, entries, name_index) is not None


def disowned_at(
    location: keys.Location,
    entries: Mapping[keys.Location, Entry],
    name_index: Mapping[str, int],
) -> int | None:
    """Return the depth of the loop or race that disowned ``location``, or None.

    Pruning a loop writes the loop entry's ``pruned_before`` and deletes the
    older iterations; finishing a race writes its winner and deletes the
    losing branches. The writes and the deletions are separate driver calls
    (unless the driver is atomic), so a crash or a failed delete in between
    leaves entries that the recorded loop or race already disowned: an
    iteration below ``pruned_before``, or an entry under a branch that is not
    the winner. They are not history: loading skips them and deletes them
    again (deletions are idempotent).
    """
    for depth in range(1, len(location)):
        parent = entries.get(location[:depth])
        if parent is None:
            continue
        if parent.kind == "loop":
            marker = location[depth]
            pruned_before = parent.data.get("pruned_before") or 0
            if isinstance(marker, tuple) and marker[1] < pruned_before:
                return depth
        elif parent.kind == "race":
            winner = parent.data.get("winner")
            if winner is not None and location[depth] != name_index.get(str(winner)):
                return depth
    return None


def decode_history(rows: Iterable[tuple[bytes, bytes]]) -> list[HistoryEntry]:
    """Decode a workflow's raw KV rows into its history, in creation order.

    ``rows`` may hold every key of the workflow's namespace; names, entries and
    metadata are picked out by their key prefix, the rest is ignored. Entries
    left over from an interrupted deletion (see ``superseded()``) are not
    history and are left out.
    """
    names: dict[int, str] = {}
    found: dict[keys.Location, Entry] = {}
    metadata: dict[str, EntryMetadata] = {}
    for key, value in rows:
        parts = keys.unpack(bytes(key))
        if not parts:
            continue
        if parts[0] == keys.NAMES:
            names[parts[1]] = decode_name(value)
        elif parts[0] == keys.ENTRIES:
            location = parts[1:]
            found[location] = decode_entry(value, location)
        elif parts[0] == keys.METADATA:
            metadata[parts[1]] = decode_metadata(value)
    registry = [names.get(i, f"#{i}") for i in range(max(names, default=-1) + 1)]
    index = {name: i for i, name in reversed(list(enumerate(registry)))}
    entries = [e for loc, e in found.items() if not superseded(loc, found, index)]
    entries.sort(key=lambda entry: (entry.seq, keys.pack(entry.location)))
    return [history_entry(e, metadata.get(e.id), registry) for e in entries]
