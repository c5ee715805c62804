"""The workflow fields: its state, output, error and input.

Four records beside the history (``(3, field)`` keys), each encoded and
measured when it is set. Unlike entries and metadata, which are dirty by
generation, a field is written when its encoding differs from the one last
flushed (its shadow): setting a field back to what is stored writes nothing.
``UNSET`` deletes a field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import keys, schema
from .driver import KVWrite
from .flush import Plan
from .limits import check_record

__all__ = ["UNSET", "WorkflowFields"]

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()

_FIELDS = (
    keys.WORKFLOW_STATE,
    keys.WORKFLOW_OUTPUT,
    keys.WORKFLOW_ERROR,
    keys.WORKFLOW_INPUT,
)
_FIELD_NAMES = {
    keys.WORKFLOW_STATE: "Workflow state",
    keys.WORKFLOW_OUTPUT: "Workflow output",
    keys.WORKFLOW_ERROR: "Workflow error",
    keys.WORKFLOW_INPUT: "Workflow input",
}


class WorkflowFields:
    """The four fields of one workflow, with their flushed shadows."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = dict.fromkeys(_FIELDS, UNSET)
        self._encoded: dict[int, bytes | None] = dict.fromkeys(_FIELDS)
        self._shadows: dict[int, bytes | None] = dict.fromkeys(_FIELDS)
        self._changed: set[int] = set()

    def load(self, rows: Iterable[KVWrite]) -> None:
        """Take the stored fields from ``rows``, the ``(3, field)`` rows."""
        for key, value in rows:
            field_id = keys.unpack(key)[1]
            if field_id in self._values:
                self._values[field_id] = schema.decode_workflow_field(field_id, value)
                self._shadows[field_id] = bytes(value)
                self._encoded[field_id] = bytes(value)

    def get(self, field_id: int, default: Any = None) -> Any:
        """Return a field, or ``default`` when it is unset."""
        value = self._values[field_id]
        return default if value is UNSET else value

    def has(self, field_id: int) -> bool:
        """Return whether a field is set."""
        return self._values[field_id] is not UNSET

    def set(self, field_id: int, value: Any) -> None:
        """Set a field (``UNSET`` deletes it on the next flush).

        The value is encoded and measured now: over the record limit this
        raises :class:`StorageLimitError` and the field keeps its value.
        """
        if value is UNSET:
            encoded = None
        else:
            encoded = schema.encode_workflow_field(field_id, value)
            check_record(keys.workflow_key(field_id), encoded, _FIELD_NAMES[field_id])
        self._values[field_id] = value
        self._encoded[field_id] = encoded
        self._changed.add(field_id)

    @property
    def dirty(self) -> bool:
        """Return whether a field differs from what was last flushed."""
        return any(self._encoded[f] != self._shadows[f] for f in self._changed)

    def plan(self, plan: Plan, *, with_deletions: bool) -> None:
        """Add the changed fields to ``plan`` (deletions only if asked)."""
        for field_id in sorted(self._changed):
            encoded = self._encoded[field_id]
            if encoded == self._shadows[field_id]:
                continue
            if encoded is None:
                if not with_deletions:
                    continue
                plan.deletions.keys.append(keys.workflow_key(field_id))
            else:
                plan.writes.append((keys.workflow_key(field_id), encoded))
            plan.fields[field_id] = encoded

    def commit(self, flushed: dict[int, bytes | None]) -> None:
        """Record that ``flushed`` (field -> encoding, None: deleted) landed."""
        for field_id, encoded in flushed.items():
            self._shadows[field_id] = encoded
            if self._encoded[field_id] == encoded:
                self._changed.discard(field_id)
