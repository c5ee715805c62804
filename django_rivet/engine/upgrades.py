"""Schema versions: the current one, the envelope, and the upgrade chain.

Every record the engine writes carries the schema version it was written in.
The workflow fields and the published values are CBOR maps in the envelope
``{"v": SCHEMA_VERSION, "type": <record type>, ...fields}``; versions 1 and 2
wrote every record as such a map. A map of an older version is brought to
the current one on read by :data:`UPGRADES`, a chain of functions each
turning a version-N record into a version-(N+1) one; a version this code does
not know, or a newer one, is refused with :class:`SchemaError`. Nothing is
migrated in bulk: a record is written back in the current version the next
time it changes.

How each record type is laid out in the current version is :mod:`.schema`'s
business; ``docs/storage-format.md`` ("Adding a version") says what a new
version adds here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cbor import dumps, loads
from .errors import SchemaError

__all__ = [
    "SCHEMA_VERSION",
    "UPGRADES",
    "check_version",
    "envelope",
    "open_envelope",
    "record_version",
    "upgrade_record",
]

SCHEMA_VERSION = 4

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


def _upgrade_v3_to_v4(record: dict[str, Any]) -> dict[str, Any]:
    """Version 4 folds an entry's metadata (and the names it brought) into
    the entry's record; no map record changes: a version-3 map is version 4's.
    """
    return {**record, "v": 4}


# Version N -> the function turning a version-N record into a version-(N+1)
# one. Decoding applies them in a chain up to SCHEMA_VERSION, so a record of
# any supported version comes out in the current shape. Each step is kept
# forever, with the fixtures of its version (docs/storage-format.md,
# "Adding a version"). The test suite registers a test-only version 0 here
# to prove the chain on real fixtures.
UPGRADES: dict[int, Upgrade] = {
    1: _upgrade_v1_to_v2,
    2: _upgrade_v2_to_v3,
    3: _upgrade_v3_to_v4,
}


def check_version(version: Any) -> int:
    """Return ``version`` if this code reads it; raise :class:`SchemaError` if not."""
    if type(version) is not int:
        raise SchemaError(f"Unknown workflow schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"Workflow schema version {version} is newer than this django-rivet "
            f"(it reads up to version {SCHEMA_VERSION}): upgrade django-rivet"
        )
    return version


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
    version = check_version(record.get("v"))
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


def envelope(record_type: str, **fields: Any) -> bytes:
    """Encode a map record of the current version."""
    return dumps({"v": SCHEMA_VERSION, "type": record_type, **fields})


def open_envelope(data: bytes, record_type: str) -> dict[str, Any]:
    """Decode a map record of any supported version, upgraded to the current one.

    Raises :class:`SchemaError` unless it is a ``record_type`` record.
    """
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
