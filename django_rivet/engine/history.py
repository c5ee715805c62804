"""The history view: decoded entries as ``history()`` and the inspector show them.

:func:`decode_history` turns a workflow's raw KV rows into its history;
:func:`history_entry` builds the view of one entry of a loaded
:class:`~.storage.Storage`. :func:`disowned_at` finds the entries a recorded
loop or race disowned before a lost deletion: they are not history (loading
drops them, and deletes them again with :func:`redeletions`). The records
themselves are decoded by :mod:`.schema`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import keys
from .driver import KVDeletions
from .names import Names
from .schema import (
    Entry,
    EntryMetadata,
    decode_entry_record,
    decode_metadata,
)

__all__ = [
    "HistoryEntry",
    "decode_history",
    "disowned_at",
    "history_entry",
    "location_string",
    "redeletions",
    "superseded",
]


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
    elif entry.kind == "wait_first":
        output, error = data.get("first"), None
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


def redeletions(
    stale: Iterable[tuple[keys.Location, Entry]],
    entries: Mapping[keys.Location, Entry],
    name_index: Mapping[str, int],
) -> KVDeletions:
    """Return the deletions that remove again what a lost deletion left.

    ``stale`` holds the left-over entries (:func:`disowned_at` finds their
    loop or race in ``entries``): each one's metadata key (an entry written
    before version 4), one range per pruned loop and one prefix per race's
    losing branch.
    """
    again = KVDeletions()
    spans: dict[tuple[bytes, bytes], None] = {}
    prefixes: dict[bytes, None] = {}
    for location, entry in stale:
        if entry.split:
            again.keys.append(keys.metadata_key(entry.id))
        depth = disowned_at(location, entries, name_index)
        assert depth is not None
        parent = entries[location[:depth]]
        if parent.kind == "loop":
            loop_index = location[depth - 1]
            assert isinstance(loop_index, int)
            scope = location[:depth]
            pruned_before = int(parent.data["pruned_before"])
            start = keys.entry_key((*scope, (loop_index, 0)))
            end = keys.entry_key((*scope, (loop_index, pruned_before)))
            spans[(start, end)] = None
        else:  # a race's losing branch
            prefixes[keys.entry_key(location[: depth + 1])] = None
    again.ranges = [span for span in spans if span[0] < span[1]]
    again.prefixes = list(prefixes)
    return again


def decode_history(rows: Iterable[tuple[bytes, bytes]]) -> list[HistoryEntry]:
    """Decode a workflow's raw KV rows into its history, in creation order.

    ``rows`` may hold every key of the workflow's namespace; names, entries and
    metadata are picked out by their key prefix, the rest is ignored. Entries
    left over from an interrupted deletion (see ``superseded()``) are not
    history and are left out.
    """
    name_rows: list[tuple[bytes, bytes]] = []
    found: dict[keys.Location, Entry] = {}
    metadata: dict[str, EntryMetadata] = {}
    inline: dict[str, EntryMetadata] = {}
    for key, value in rows:
        parts = keys.unpack(bytes(key))
        if not parts:
            continue
        if parts[0] == keys.NAMES:
            name_rows.append((bytes(key), bytes(value)))
        elif parts[0] == keys.ENTRIES:
            location = parts[1:]
            entry, held = decode_entry_record(value, location)
            found[location] = entry
            if held is not None:
                inline[entry.id] = held
        elif parts[0] == keys.METADATA:
            metadata[parts[1]] = decode_metadata(value)
    metadata.update(inline)  # a record of its own is older than the entry's
    names = Names()  # the registry's rows and the names the entries brought
    names.load(name_rows, found.values())
    registry, index = names.names, names.index
    entries = [e for loc, e in found.items() if not superseded(loc, found, index)]
    entries.sort(key=lambda entry: (entry.seq, keys.pack(entry.location)))
    return [history_entry(e, metadata.get(e.id), registry) for e in entries]
