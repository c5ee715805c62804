"""The record codec: how each workflow record is encoded and decoded.

Every value the engine writes is versioned CBOR. Since version 4 a history
entry is one compact array, ``[4, id, seq, kind, data, <its metadata>]``
and, when the flush that first wrote it also registered names, those names
(``[first index, name, ...]``) last: one record per entry (a step's flush
writes one row). Version 3 wrote three arrays per entry (its name, the entry,
its metadata), which still decode; a version-3 entry keeps its metadata row
until the entry is written again. The name registry's rows (``[4, name]``)
hold the names no entry brought. The workflow fields (state, output, error,
input) and the values published for readers outside the workflow (events and
replies) stay maps in the envelope ``{"v": 4, "type": <record type>, ...}``.
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..splicing import cbor_head
from . import keys
from .cbor import dumps, loads, roundtrip, text_at
from .errors import SchemaError
from .ids import new_entry_id
from .tracking import DirtySink, _Tracked
from .upgrades import SCHEMA_VERSION, check_version, envelope, open_envelope

__all__ = [
    "ENTRY_ITEMS",
    "ENTRY_KINDS",
    "ENTRY_STATUSES",
    "WORKFLOW_STATES",
    "Entry",
    "EntryMetadata",
    "KIND_DEFAULTS",
    "decode_entry",
    "decode_entry_record",
    "decode_metadata",
    "decode_name",
    "check_carried",
    "decode_published",
    "decode_workflow_field",
    "dumps",
    "encode_entry",
    "encode_metadata",
    "encode_name",
    "encode_published",
    "encode_workflow_field",
    "entry_data",
    "with_names",
    "loads",
    "metadata_from",
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
    # the encoding made by the size check (``(gen, metadata gen, bytes)``),
    # reused by the flush while neither the entry nor its metadata changed.
    sink: DirtySink | None = field(default=None, compare=False, repr=False)
    key: bytes = field(default=b"", compare=False, repr=False)
    encoded: tuple[int, int, bytes] | None = field(
        default=None, compare=False, repr=False
    )
    # A loaded entry not decoded yet (see loading.lazy_entry): its stored record.
    raw: bytes | None = field(default=None, compare=False, repr=False)
    # The names its record brings (``[first index, name, ...]``): the flush
    # that first wrote it registered them (version 4).
    carried: list[Any] | None = field(default=None, compare=False, repr=False)
    # Its metadata is a record of its own (written before version 4), to
    # delete once the entry's record holds it.
    split: bool = field(default=False, compare=False, repr=False)

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
    # The key of its own record (an entry's metadata before version 4), or b"".
    key: bytes = field(default=b"", compare=False, repr=False)
    raw: bytes | None = field(default=None, compare=False, repr=False)
    # The entry it belongs to: since version 4 they are one record.
    owner: Entry | None = field(default=None, compare=False, repr=False)

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


# Version 3's compact records: [3, field, ...] in these orders (an entry's
# record adds its metadata's fields from version 4, and may end with the
# names it brought).
_COMPACT_FIELDS = {
    "name": ("name",),
    "entry": ("id", "seq", "kind", "data"),
    "metadata": _METADATA_FIELDS,
}
# The items of a version-4 entry record: the version, the entry's four
# fields, its metadata's eight; then, in some, the names it brought.
ENTRY_ITEMS = 1 + len(_COMPACT_FIELDS["entry"]) + len(_METADATA_FIELDS)


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
    if record_type == "entry" and version >= 4:
        if len(record) not in (ENTRY_ITEMS, ENTRY_ITEMS + 1):
            raise SchemaError(
                f"Expected an 'entry' record of {ENTRY_ITEMS - 1} or "
                f"{ENTRY_ITEMS} fields, found {len(record) - 1}"
            )
        return record
    if len(record) != 1 + len(_COMPACT_FIELDS[record_type]):
        raise SchemaError(
            f"Expected a {record_type!r} record of {len(_COMPACT_FIELDS[record_type])}"
            f" fields, found {len(record) - 1}"
        )
    return record


def encode_name(name: str) -> bytes:
    """Encode a name registry slot: the CBOR of ``[SCHEMA_VERSION, name]``.

    Written here rather than by cbor2 (the same bytes: definite lengths,
    the shortest heads): a flush writes one slot per new name no entry
    brings, and the encoder's call cost most of it.
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
    if len(data) > 2 and data[0] == 0x82 and 3 <= data[1] <= SCHEMA_VERSION:
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


def encode_entry(
    entry: Entry,
    metadata: EntryMetadata,
    data: dict[str, Any] | None = None,
    changes: dict[str, Any] | None = None,
    *,
    names: bool = True,
) -> bytes:
    """Encode a history entry and its metadata: one record (its location is the key).

    ``data`` replaces ``entry.data`` and ``changes`` (metadata fields) apply
    over ``metadata`` in the encoding: a change is measured before it is made.
    The names the entry brings (``entry.carried``) come last, unless
    ``names`` is false (:func:`with_names` adds them).
    """
    record = [
        SCHEMA_VERSION,
        entry.id,
        entry.seq,
        entry.kind,
        entry.data if data is None else data,
        *_metadata_values(metadata),
    ]
    if changes:
        for name, value in changes.items():
            record[_METADATA_AT[name]] = value
    encoded = dumps(record)
    if names and entry.carried is not None:
        return with_names(encoded, entry.carried)
    return encoded


def with_names(encoded: bytes, carried: list[Any]) -> bytes:
    """Return an entry's record, encoded without names, bringing ``carried``.

    Spliced, not encoded again: the record is an array of 13 items, whose
    head is one byte; an array of 14 has the same items and the names last.
    """
    return _WITH_NAMES + encoded[1:] + dumps(carried)


# Where each metadata field sits in an entry's record.
_METADATA_AT = {name: 5 + at for at, name in enumerate(_METADATA_FIELDS)}
_WITH_NAMES = cbor_head(4, ENTRY_ITEMS + 1)


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
    """Decode a history entry stored at ``location`` (without its metadata)."""
    return decode_entry_record(data, location)[0]


def decode_entry_record(
    data: bytes, location: keys.Location = ()
) -> tuple[Entry, EntryMetadata | None]:
    """Decode an entry's record: the entry, and its metadata since version 4.

    An older record gives ``None`` for the metadata (a record of its own)
    and an entry marked ``split``.
    """
    compact = _compact(data, "entry")
    metadata: EntryMetadata | None = None
    carried = None
    if compact is not None:
        entry_id, seq, kind, raw = compact[1:5]
        if len(compact) > 5:
            metadata = metadata_from(compact[5:ENTRY_ITEMS])
            if len(compact) > ENTRY_ITEMS:
                carried = check_carried(compact[ENTRY_ITEMS])
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
    entry.carried = carried
    if metadata is None:
        entry.split = True
    else:
        metadata.owner = entry
    return entry, metadata


def metadata_from(values: list[Any]) -> EntryMetadata:
    """Return the metadata of an entry's record (its eight fields, in order)."""
    if values[0] not in ENTRY_STATUSES:
        raise SchemaError(f"Unknown entry status {values[0]!r}")
    metadata = EntryMetadata(*values)
    metadata.flushed = metadata.gen
    return metadata


def check_carried(carried: Any) -> list[Any]:
    """Return the names an entry's record brings, ``[first index, name, ...]``."""
    if (
        type(carried) is not list
        or len(carried) < 2
        or type(carried[0]) is not int
        or carried[0] < 0
        or not all(type(name) is str for name in carried[1:])
    ):
        raise SchemaError("An entry's names must be [first index, name, ...]")
    return carried


def encode_metadata(metadata: EntryMetadata) -> bytes:
    """Encode entry metadata as a record of its own (the layout version 3 wrote)."""
    return dumps([SCHEMA_VERSION, *_metadata_values(metadata)])


def decode_metadata(data: bytes) -> EntryMetadata:
    """Decode entry metadata stored as a record of its own (before version 4)."""
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
