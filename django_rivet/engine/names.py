"""A workflow's name registry: every name its locations use, by index.

A location is a path of name indexes (:mod:`.keys`); the registry maps them
back. Since version 4 a name is stored once, either in the record of the
entry that first used it (the flush's first new entry brings the names the
flush registers: a step named anew is one row, not two) or in the
registry's own rows ``(1, index)``, which are never deleted. An entry that
brought names and goes (a pruned loop iteration, a replayed step, a lost
deletion done again) leaves them to the registry's rows, written by the
flush that deletes it (docs/storage-format.md, "Names").
"""

from __future__ import annotations

from collections.abc import Iterable

from . import keys, schema
from .driver import KVWrite
from .schema import Entry

__all__ = ["Names"]


class Names:
    """The names of one workflow's history, and which of them are stored."""

    __slots__ = ("flushed", "index", "names", "rescued")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        # Names [0, flushed) are stored (in a row or an entry's record).
        self.flushed = 0
        # Names whose only record was an entry's that is gone (or going):
        # the next flush writes them to the registry's rows.
        self.rescued: dict[int, None] = {}

    def load(self, rows: list[KVWrite], entries: Iterable[Entry]) -> None:
        """Fill the registry from its rows and the names ``entries`` brought."""
        found = {
            keys.name_index_of(key): schema.decode_name(value) for key, value in rows
        }
        ordered = True  # the rows' names alone come in index order
        setdefault = found.setdefault
        for entry in entries:
            carried = entry.carried
            if carried is None:
                continue
            ordered = False
            if len(carried) == 2:  # (a step under a new name: the usual)
                setdefault(carried[0], carried[1])
                continue
            first = carried[0]
            for offset in range(1, len(carried)):
                setdefault(first + offset - 1, carried[offset])
        size = max(found, default=-1) + 1
        if ordered and len(found) == size and next(iter(found), 0) == 0:
            # Slots 0..size-1 (distinct, sorted by key: in index order).
            names = list(found.values())
        else:  # a hole cannot happen with this engine; keep indexes stable anyway
            names = [found.get(index, f"#{index}") for index in range(size)]
        self.names = names
        # A name in two slots (no engine writes that) answers to the first.
        self.index = dict(zip(reversed(names), range(size - 1, -1, -1), strict=True))
        self.flushed = size

    def register(self, name: str) -> int:
        """Return the index of ``name``, registering it if new."""
        index = self.index.get(name)
        if index is None:
            index = len(self.names)
            self.index[name] = index
            self.names.append(name)
        return index

    @property
    def dirty(self) -> bool:
        """Return whether names wait to be stored."""
        return self.flushed < len(self.names) or bool(self.rescued)

    def rescue(self, entry: Entry) -> None:
        """Keep the names ``entry``'s stored record brought, as it goes."""
        carried = entry.carried
        if carried is None or not entry.flushed:
            return  # (never stored: the names are still to flush)
        first = carried[0]
        for index in range(first, min(first + len(carried) - 1, self.flushed)):
            self.rescued[index] = None

    def carrier(self, entries: list[Entry]) -> Entry | None:
        """Let the first new entry of ``entries`` bring the names not stored yet.

        Returns it, or None when no name waits or no entry is new (the names
        then get rows).
        """
        start, upto = self.flushed, len(self.names)
        if start >= upto:
            return None
        for entry in entries:
            if not entry.flushed:
                entry.carried = [start, *self.names[start:upto]]
                return entry
        return None

    def rows(self, indexes: Iterable[int]) -> list[KVWrite]:
        """Return the registry's rows of the names at ``indexes``."""
        names = self.names
        return [(keys.name_key(i), schema.encode_name(names[i])) for i in indexes]

    def commit(self, upto: int, rescued: list[int]) -> bool:
        """Note that names up to ``upto`` and the ``rescued`` are stored.

        Returns whether that stored a name not stored before.
        """
        before = self.flushed
        self.flushed = max(before, upto)
        for index in rescued:
            self.rescued.pop(index, None)
        return self.flushed > before or bool(rescued)
