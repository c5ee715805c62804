"""Workflow streams as a driver stores them: the writes, and the rules for them.

A stream is an append-only list of values per workflow and key; each value
gets the next *offset* (1, 2, 3, ...) when it is committed. The engine
hands its driver batches of :class:`StreamWrite` (``driver.append_streams``,
an optional driver method: :func:`append_streams`), and every driver follows
the rules :class:`MemoryStreams` implements for :class:`InMemoryDriver`
(the Django host applies the same ones in SQL):

* **A write with a ``source`` the stream already holds is dropped.** A write
  from the workflow body carries a source naming its place in the code (its
  scope, key and count); a replay re-sends it and the store recognises it.
  A write from inside a step has none (at least once across retries).
* **A close marks the stream closed** (closing a closed stream does
  nothing); values that come after it are dropped (and logged).
* **Offsets follow the batch's order**, without gaps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["MemoryStreams", "StreamLog", "StreamWrite", "accept"]

logger = logging.getLogger("django_rivet.workflow")


@dataclass(frozen=True, slots=True)
class StreamWrite:
    """One value for stream ``key`` (CBOR bytes), or its close (``close=True``)."""

    key: str
    value: bytes = b""
    source: str | None = None
    close: bool = False


@dataclass(slots=True)
class StreamLog:
    """One stream in memory: its values by offset, their sources, closed or not."""

    values: list[bytes] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    closed: bool = False

    @property
    def length(self) -> int:
        """Return the offset of the last value (0: none yet)."""
        return len(self.values)


def accept(
    writes: Iterable[StreamWrite], known: set[str], closed: bool, where: str
) -> tuple[list[StreamWrite], bool]:
    """Return the writes of one stream that append, and whether it ends closed.

    ``known`` holds the sources the stream already has (updated here) and
    ``closed`` whether it is closed already; ``where`` names the stream for
    the log line about values written after its close.
    """
    taken: list[StreamWrite] = []
    dropped = 0
    for write in writes:
        if write.source is not None:
            if write.source in known:
                continue
            known.add(write.source)
        if write.close:
            closed = True
        elif closed:
            dropped += 1
        else:
            taken.append(write)
    if dropped:
        logger.warning(
            "values written after the stream was closed were dropped "
            "stream=%s count=%s",
            where,
            dropped,
        )
    return taken, closed


class MemoryStreams:
    """The streams of one workflow in memory (:class:`InMemoryDriver`'s)."""

    def __init__(self) -> None:
        self.logs: dict[str, StreamLog] = {}

    def append(self, writes: list[StreamWrite]) -> None:
        """Apply a batch by the rules above (nothing here fails halfway)."""
        for key in dict.fromkeys(write.key for write in writes):
            log = self.logs.setdefault(key, StreamLog())
            mine = [write for write in writes if write.key == key]
            taken, log.closed = accept(mine, log.sources, log.closed, key)
            log.values.extend(write.value for write in taken)

    def read(self, key: str, after: int = 0) -> list[tuple[int, bytes]]:
        """Return ``(offset, value)`` of every value of ``key`` after ``after``."""
        log = self.logs.get(key)
        if log is None:
            return []
        start = max(after, 0)
        return [(start + i + 1, v) for i, v in enumerate(log.values[start:])]

    def closed(self, key: str) -> bool:
        """Return whether stream ``key`` is closed."""
        log = self.logs.get(key)
        return log is not None and log.closed
