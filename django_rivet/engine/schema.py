"""The record codec: how each workflow record is encoded and decoded.

Every value the engine writes is versioned CBOR. Since version 3 the three
records every history entry brings -- its name, the entry and its metadata --
are compact arrays ``[3, field, ...]`` (positions, not keys: a 10,000-entry
history is 30,000 of them); the workflow fields (state, output, error,
input) and the values published for readers outside the workflow (events and
replies) stay maps in the envelope ``{"v": 3, "type": <record type>, ...}``.
Versions 1 and 2 wrote every record as such a map; they decode through the
upgrade chain of :mod:`.upgrades`, which also holds ``SCHEMA_VERSION``. This
module encodes and decodes all of them; the engine, the admin inspector and
``handle.history()`` (:mod:`.history`) all decode through here.

An :class:`Entry` or :class:`EntryMetadata` may be lazy: loaded with its
stored record and decoded when a field is first used (:mod:`.loading`
decodes a loaded history so).

The values inside are safe CBOR (:mod:`.cbor`: restricted tags, storable
types only), whose ``dumps``, ``loads`` and ``roundtrip`` this module
re-exports for the code that reads and writes records.

``docs/storage-format.md`` describes the format; a format change adds a version
(:mod:`.upgrades`: the step that upgrades the old version to the new one),
changes the encoders here, and adds golden fixtures under
``tests/engine/fixtures/v<N>/`` that keep decoding.
"""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..splicing import cbor_head
from . import keys
from .cbor import dumps, loads, roundtrip, text_at
from .errors import SchemaError
from .upgrades import SCHEMA_VERSION, check_version, envelope, open_envelope

__all__ = [
    "ENTRY_KINDS",
    "ENTRY_STATUSES",
    "WORKFLOW_STATES",
    "Entry",
    "EntryMetadata",
    "KIND_DEFAULTS",
    "decode_entry",
    "decode_metadata",
    "decode_name",
    "decode_published",
    "decode_workflow_field",
    "dumps",
    "encode_entry",
    "encode_metadata",
    "encode_name",
    "encode_published",
    "encode_workflow_field",
    "entry_data",
    "loads",
    "new_entry_id",
    "roundtrip",
]

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
    # Version 3 (no new record format: a kind older code does not know):
    "wait_first",
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


class _Record(Protocol):
    """The fields ``touch`` writes (``_Tracked`` has no slots of its own)."""

    gen: int
    flushed: int
    sink: DirtySink | None


class _Tracked:
    """Dirty tracking of a record: ``gen`` moves on, a flush catches ``flushed`` up.

    The fields are the dataclass's (slots declared there, none here).
    """

    __slots__ = ()
    gen: int
    flushed: int
    sink: DirtySink | None

    @property
    def dirty(self) -> bool:
        """Return whether the record has changes not yet flushed."""
        return self.gen != self.flushed

    def touch(self: _Record) -> None:
        """Mark the record changed."""
        self.gen += 1
        if self.sink is not None:
            self.sink[self] = None


# A version 4 UUID's variant and version bits (RFC 4122), as uuid.UUID sets them.
_UUID4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)
# Random bytes for this many ids are read at once (new_entry_id).
_IDS_PER_READ = 256


class _RandomBytes(threading.local):
    """Each thread's random bytes not yet made into entry ids."""

    def __init__(self) -> None:
        self.drop()

    def drop(self) -> None:
        """Forget the bytes read (the next id reads new ones)."""
        self.data = b""
        self.at = 0


_random = _RandomBytes()
# A forked child must not hand out the ids its parent's bytes will give.
os.register_at_fork(after_in_child=_random.drop)


def new_entry_id() -> str:
    """Return a new entry's id: what ``uuid.uuid4().hex`` gives, for less.

    The same 32 hex digits of a version 4 UUID made of 16 bytes from
    ``os.urandom``, without building a ``UUID`` (its checks and conversions
    cost more than the rest of creating a step's entry), and the bytes
    read 256 ids at a time: each read is a system call that lets go of
    the GIL, so another busy thread (a live wake's sender) could keep the
    run waiting for it.
    """
    random = _random
    at = random.at
    if at >= len(random.data):
        random.data, at = os.urandom(16 * _IDS_PER_READ), 0
    random.at = at + 16
    value = int.from_bytes(random.data[at : at + 16], "big")
    return f"{value & _UUID4_CLEAR | _UUID4_SET:032x}"


@dataclass(slots=True, eq=False)
class Entry(_Tracked):
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
    # A loaded entry not decoded yet (see loading.lazy_entry): its stored record.
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


@dataclass(slots=True, eq=False)
class EntryMetadata(_Tracked):
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
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
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
    "wait_first": {"children": [], "state": "pending", "first": None},
}


# Version 3's compact records: [3, field, ...] in these orders.
_COMPACT_FIELDS = {
    "name": ("name",),
    "entry": ("id", "seq", "kind", "data"),
    "metadata": _METADATA_FIELDS,
}


def _compact(data: bytes, record_type: str) -> list[Any] | None:
    """Decode a compact record (a CBOR array), or ``None`` for an envelope map.

    Records of versions 1 and 2 are maps and go through
    :func:`.upgrades.open_envelope` (the upgrade chain); only version 3 and
    later write arrays.
    """
    if not data or not 0x80 <= data[0] <= 0x9F:
        return None
    record = loads(data)
    if not isinstance(record, list) or not record:
        raise SchemaError(f"A {record_type!r} record must be a CBOR array or map")
    version = check_version(record[0])
    if version < 3:
        raise SchemaError(f"Unknown workflow schema version {version!r}")
    if len(record) != 1 + len(_COMPACT_FIELDS[record_type]):
        raise SchemaError(
            f"Expected a {record_type!r} record of {len(_COMPACT_FIELDS[record_type])}"
            f" fields, found {len(record) - 1}"
        )
    return record


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
        found = text_at(data, 2)
        if found is not None and found[1] == len(data):
            return found[0]
    compact = _compact(data, "name")
    name = (
        compact[1] if compact is not None else open_envelope(data, "name").get("name")
    )
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


def entry_data(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Return an entry's data: ``raw`` over its kind's defaults."""
    defaults = KIND_DEFAULTS[kind]
    if not defaults:
        return raw  # a step: nothing to fill in (raw is freshly decoded)
    payload = {**defaults, **raw}
    if "messages" in payload and payload["messages"] is None:
        payload["messages"] = []
    return payload


def decode_entry(data: bytes, location: keys.Location = ()) -> Entry:
    """Decode a history entry stored at ``location``."""
    compact = _compact(data, "entry")
    if compact is not None:
        _, entry_id, seq, kind, raw = compact
    else:
        record = open_envelope(data, "entry")
        entry_id, seq = record.get("id", ""), record.get("seq", 0)
        kind, raw = record.get("kind"), record.get("data")
    if kind not in KIND_DEFAULTS:
        raise SchemaError(f"Unknown entry kind {kind!r}")
    raw = raw or {}
    if not isinstance(raw, dict):
        raise SchemaError("Entry data must be a map")
    payload = entry_data(kind, raw)
    entry = Entry(
        id=str(entry_id),
        kind=kind,
        location=tuple(location),
        seq=int(seq),
        data=payload,
    )
    entry.flushed = entry.gen
    return entry


def encode_metadata(metadata: EntryMetadata) -> bytes:
    """Encode entry metadata."""
    return dumps([SCHEMA_VERSION, *_metadata_values(metadata)])


def decode_metadata(data: bytes) -> EntryMetadata:
    """Decode entry metadata."""
    compact = _compact(data, "metadata")
    if compact is not None:
        values = dict(zip(_METADATA_FIELDS, compact[1:], strict=True))
    else:
        record = open_envelope(data, "metadata")
        values = {name: record[name] for name in _METADATA_FIELDS if name in record}
    if values.get("status", "pending") not in ENTRY_STATUSES:
        raise SchemaError(f"Unknown entry status {values.get('status')!r}")
    metadata = EntryMetadata(**values)
    metadata.flushed = metadata.gen
    return metadata


_FIELD_TYPES = {
    keys.WORKFLOW_STATE: "state",
    keys.WORKFLOW_OUTPUT: "output",
    keys.WORKFLOW_ERROR: "error",
    keys.WORKFLOW_INPUT: "input",
}


def encode_workflow_field(field_id: int, value: Any) -> bytes:
    """Encode a workflow field: state (str), output, error (info map) or input."""
    return envelope(_FIELD_TYPES[field_id], value=value)


def decode_workflow_field(field_id: int, data: bytes) -> Any:
    """Decode a workflow field written by :func:`encode_workflow_field`."""
    value = open_envelope(data, _FIELD_TYPES[field_id]).get("value")
    if field_id == keys.WORKFLOW_STATE and value not in WORKFLOW_STATES:
        raise SchemaError(f"Unknown workflow state {value!r}")
    return value


def encode_published(record_type: str, value: Any) -> bytes:
    """Encode a published value: an ``event`` or a ``reply`` (version 2)."""
    if record_type not in PUBLISHED_TYPES:
        raise SchemaError(f"Unknown published record type {record_type!r}")
    return envelope(record_type, value=value)


def decode_published(record_type: str, data: bytes) -> Any:
    """Decode a value written by :func:`encode_published`."""
    return open_envelope(data, record_type).get("value")
