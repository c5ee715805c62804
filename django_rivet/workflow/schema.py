"""The one definition of how workflow records are stored.

Every value the engine writes is a CBOR map in a versioned envelope
``{"v": <schema version>, "type": <record type>, ...}``. This module encodes
and decodes all of them: names, history entries (every entry kind), entry
metadata and the workflow fields (state, output, error, input). The engine, the
admin inspector and ``handle.history()`` all decode through here.

Decoding is restricted: only the CBOR tags for datetimes (0, 1), bignums (2, 3)
and UUIDs (37) are accepted; anything else raises :class:`SchemaError`. User
values (step outputs, loop state, inputs, message bodies) must be made of
``None``, bools, ints, floats, str, bytes, lists, tuples, dicts, datetimes,
UUIDs and :class:`Message`; :func:`roundtrip` checks that and returns the value
as a replay will see it (tuples come back as lists, naive datetimes as aware
UTC ones, messages as ``{id, name, body, created_at}`` maps).

``docs/storage-format.md`` describes the format; a format change adds a version
here (a decoder for the old version that upgrades to the current model) and
golden fixtures under ``tests/workflow/fixtures/v<N>/`` that keep decoding.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import cbor2

from ..encoding import MAX_DEPTH, READ_DEPTH, check_depth
from . import keys
from .errors import SchemaError, StepOutputError
from .values import Message

__all__ = [
    "ENTRY_KINDS",
    "ENTRY_STATUSES",
    "SCHEMA_VERSION",
    "WORKFLOW_STATES",
    "Entry",
    "EntryMetadata",
    "HistoryEntry",
    "decode_entry",
    "decode_history",
    "decode_metadata",
    "decode_name",
    "decode_workflow_field",
    "dumps",
    "encode_entry",
    "encode_metadata",
    "encode_name",
    "encode_workflow_field",
    "loads",
    "location_string",
    "roundtrip",
]

SCHEMA_VERSION = 1

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
)
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

_ALLOWED_TAGS = frozenset({0, 1, 2, 3, 37})


# --- Safe CBOR -----------------------------------------------------------------


def _rejecting(tag: int) -> Any:
    # cbor2 calls semantic decoders with the decoder and, in some versions,
    # more arguments: accept any so the refusal is always the one raised.
    def reject(*args: Any) -> Any:
        raise cbor2.CBORDecodeError(f"CBOR tag {tag} is not allowed")

    return reject


class _RestrictedTags(Mapping):
    """Semantic decoders that refuse every tag outside the allowed set."""

    def __getitem__(self, tag: int) -> Any:
        if tag in _ALLOWED_TAGS:
            raise KeyError(tag)
        return _rejecting(tag)

    def get(self, tag: Any, default: Any = None) -> Any:
        return default if tag in _ALLOWED_TAGS else _rejecting(tag)

    def __contains__(self, tag: object) -> bool:
        return tag not in _ALLOWED_TAGS

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _reject_unknown_tag(*args: Any) -> Any:
    # The hook's arguments changed across cbor2 versions; find the tag itself.
    tag = next((a.tag for a in args if isinstance(a, cbor2.CBORTag)), "?")
    raise cbor2.CBORDecodeError(f"CBOR tag {tag} is not allowed")


_RESTRICTED = _RestrictedTags()
_DECODING: dict[str, Any] = {"tag_hook": _reject_unknown_tag, "max_depth": READ_DEPTH}


def _encode_extra(encoder: Any, value: Any) -> None:
    # Messages are what ctx.messages hands out; they are stored as plain maps.
    if isinstance(value, Message):
        encoder.encode(_message_map(value))
        return
    raise cbor2.CBOREncodeTypeError(f"cannot store a {type(value).__name__}")


def _message_map(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "name": message.name,
        "body": message.body,
        "created_at": message.created_at,
    }


def dumps(value: Any) -> bytes:
    """Encode ``value`` as CBOR (naive datetimes are UTC, messages are maps)."""
    check_depth(value, READ_DEPTH - 1)  # what is written can be read back
    return cbor2.dumps(value, timezone=UTC, default=_encode_extra)


def loads(data: bytes) -> Any:
    """Decode CBOR, accepting only the datetime, bignum and UUID tags."""
    try:
        return cbor2.loads(data, semantic_decoders=_RESTRICTED, **_DECODING)
    except cbor2.CBORDecodeError as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        raise SchemaError(f"Undecodable CBOR: {exc}{cause}") from exc


def check_value(value: Any, path: str = "value") -> None:
    """Raise ``TypeError`` unless ``value`` is made of storable types only."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return
    if isinstance(value, datetime | uuid.UUID):
        return
    if isinstance(value, Message):
        check_value(value.body, f"{path}.body")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_value(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not (key is None or isinstance(key, str | int | bytes | float)):
                raise TypeError(f"{path} has a {type(key).__name__} key")
            check_value(item, f"{path}[{key!r}]")
        return
    raise TypeError(f"{path} is a {type(value).__name__}, which cannot be stored")


def roundtrip(value: Any, what: str = "value", *, limit: int | None = None) -> Any:
    """Return ``value`` as stored and read back; raise if it cannot be stored.

    Raises :class:`StepOutputError` for unstorable types and for encodings over
    ``limit`` bytes.
    """
    try:
        check_depth(value, MAX_DEPTH)  # as actor state; before the recursion below
        check_value(value, what)
        encoded = dumps(value)
    except (TypeError, ValueError, cbor2.CBOREncodeError) as exc:
        raise StepOutputError(f"{what} cannot be stored: {exc}") from exc
    if limit is not None and len(encoded) > limit:
        raise StepOutputError(
            f"{what} is {len(encoded)} bytes encoded, over the {limit} byte limit"
        )
    return loads(encoded)


# --- Records ---------------------------------------------------------------------


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

    @property
    def dirty(self) -> bool:
        """Return whether the entry has changes not yet flushed."""
        return self.gen != self.flushed

    def touch(self) -> None:
        """Mark the entry changed."""
        self.gen += 1


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

    @property
    def dirty(self) -> bool:
        """Return whether the metadata has changes not yet flushed."""
        return self.gen != self.flushed

    def touch(self) -> None:
        """Mark the metadata changed."""
        self.gen += 1


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
}


def _envelope(record_type: str, **fields: Any) -> bytes:
    return dumps({"v": SCHEMA_VERSION, "type": record_type, **fields})


def _open(data: bytes, record_type: str) -> dict[str, Any]:
    record = loads(data)
    if not isinstance(record, dict):
        raise SchemaError("A workflow record must be a CBOR map")
    version = record.get("v")
    upgrade = _UPGRADES.get(version)  # type: ignore[arg-type]
    if upgrade is None:
        raise SchemaError(f"Unknown workflow schema version {version!r}")
    record = upgrade(record)
    if record.get("type") != record_type:
        raise SchemaError(
            f"Expected a {record_type!r} record, found {record.get('type')!r}"
        )
    return record


def _upgrade_v1(record: dict[str, Any]) -> dict[str, Any]:
    # Version 1 is current. A version 2 would add ``_upgrade_v1 -> v2`` here and
    # keep this function for the fixtures and databases written by version 1.
    return record


_UPGRADES = {1: _upgrade_v1}


def encode_name(name: str) -> bytes:
    """Encode a name registry slot."""
    return _envelope("name", name=name)


def decode_name(data: bytes) -> str:
    """Decode a name registry slot."""
    name = _open(data, "name").get("name")
    if not isinstance(name, str):
        raise SchemaError("A name record needs a string name")
    return name


def encode_entry(entry: Entry) -> bytes:
    """Encode a history entry (its location lives in the key)."""
    return _envelope(
        "entry", id=entry.id, seq=entry.seq, kind=entry.kind, data=entry.data
    )


def decode_entry(data: bytes, location: keys.Location = ()) -> Entry:
    """Decode a history entry stored at ``location``."""
    record = _open(data, "entry")
    kind = record.get("kind")
    if kind not in _KIND_DEFAULTS:
        raise SchemaError(f"Unknown entry kind {kind!r}")
    raw = record.get("data") or {}
    if not isinstance(raw, dict):
        raise SchemaError("Entry data must be a map")
    payload = {**_KIND_DEFAULTS[kind], **raw}
    for key in ("messages",):
        if key in payload and payload[key] is None:
            payload[key] = []
    entry = Entry(
        id=str(record.get("id", "")),
        kind=kind,
        location=tuple(location),
        seq=int(record.get("seq", 0)),
        data=payload,
    )
    entry.flushed = entry.gen
    return entry


def encode_metadata(metadata: EntryMetadata) -> bytes:
    """Encode entry metadata."""
    return _envelope(
        "metadata", **{name: getattr(metadata, name) for name in _METADATA_FIELDS}
    )


def decode_metadata(data: bytes) -> EntryMetadata:
    """Decode entry metadata."""
    record = _open(data, "metadata")
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
    return _envelope(_FIELD_TYPES[field_id], value=value)


def decode_workflow_field(field_id: int, data: bytes) -> Any:
    """Decode a workflow field written by :func:`encode_workflow_field`."""
    value = _open(data, _FIELD_TYPES[field_id]).get("value")
    if field_id == keys.WORKFLOW_STATE and value not in WORKFLOW_STATES:
        raise SchemaError(f"Unknown workflow state {value!r}")
    return value


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


def decode_history(rows: Iterable[tuple[bytes, bytes]]) -> list[HistoryEntry]:
    """Decode a workflow's raw KV rows into its history, in creation order.

    ``rows`` may hold every key of the workflow's namespace; names, entries and
    metadata are picked out by their key prefix, the rest is ignored.
    """
    names: dict[int, str] = {}
    entries: list[Entry] = []
    metadata: dict[str, EntryMetadata] = {}
    for key, value in rows:
        parts = keys.unpack(bytes(key))
        if not parts:
            continue
        if parts[0] == keys.NAMES:
            names[parts[1]] = decode_name(value)
        elif parts[0] == keys.ENTRIES:
            entries.append(decode_entry(value, parts[1:]))
        elif parts[0] == keys.METADATA:
            metadata[parts[1]] = decode_metadata(value)
    registry = [names.get(i, f"#{i}") for i in range(max(names, default=-1) + 1)]
    entries.sort(key=lambda entry: (entry.seq, keys.pack(entry.location)))
    return [history_entry(e, metadata.get(e.id), registry) for e in entries]
