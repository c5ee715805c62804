"""Dirty tracking: a record reports that it changed to the Storage owning it."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["DirtySink"]

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
