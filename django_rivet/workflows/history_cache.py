"""The history cache: a workflow's history kept in process between its runs.

Every run loads its workflow's whole history (``DjangoDriver.list(b"")``).
With ``RIVET["WORKFLOW_CACHE_SIZE"]`` above 0, a run that released cleanly
leaves its history here, as its writes left it, under its lease token; the
next run of that workflow in this process skips the read when the history
is provably unchanged since.

The proof is the ``Workflow.history_mark`` column, which the lease
statements keep (:mod:`django_rivet.models.sql`):

- a release writes its token, unless the mark was reset to ``""`` meanwhile;
- a claim turns a token ``T`` into ``"c:" + T``, and a claimed mark (a run
  that never released: it may have written) into ``"stale"``;
- a write of the history without a lease resets it to ``""``
  (:func:`invalidate`; new workflows start there).

So a claim returns ``"c:" + T`` exactly when nothing wrote the history since
the run holding ``T`` released it: the history is the one that run cached,
whichever process claims (a cache copied into a forked child stays right).
Anything else reads the database as without the cache.

A run's driver keeps a working copy (:class:`HistoryCopy`): the rows it
loaded, with every write it made applied once the write succeeded. Its
release stores the copy once the release commits with the lease still held;
a failed write, a lost lease or any error drops it.
"""

from __future__ import annotations

import operator
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType

from ..conf import rivet_settings
from ..models import Workflow, db
from ..models.base import prefix_end

__all__ = ["HistoryCache", "HistoryCopy", "cache", "invalidate"]

KVRow = tuple[bytes, bytes]

_first = operator.itemgetter(0)

# Writes above this many in one batch are merged by sorting the whole copy
# again; fewer go in one by one (a bisection and an insert each).
_MERGE_ABOVE = 32


def invalidate(workflow_id: str) -> None:
    """Reset the history mark: the history was written without the lease.

    Call in the write's transaction, whatever this process's settings: the
    release of a run holding the lease meanwhile keeps the reset
    (``models.sql.names.MARK_RELEASED``).
    """
    rows = Workflow.objects.filter(pk=workflow_id).exclude(history_mark="")
    rows.update(history_mark="")


@dataclass(slots=True)
class _Entry:
    token: str
    rows: list[KVRow]
    size: int


class HistoryCache:
    """Workflow id to the history its last run here left, least recent first.

    Bounded by ``WORKFLOW_CACHE_SIZE`` histories and ``WORKFLOW_CACHE_BYTES``
    bytes of keys and values; thread-safe. An entry is taken out when a run
    uses it, so no two runs share its rows.
    """

    def __init__(self) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0  # runs served from the cache, and runs that asked in vain
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, workflow_id: object) -> bool:
        return workflow_id in self._entries

    def take(self, workflow_id: str, mark: str) -> tuple[list[KVRow], int] | None:
        """Remove the entry; return its rows and size if ``mark`` proves it current."""
        with self._lock:
            entry = self._entries.pop(workflow_id, None)
            if entry is not None:
                self.bytes -= entry.size
            if entry is None or mark != "c:" + entry.token:
                self.misses += 1
                return None
            self.hits += 1
        return entry.rows, entry.size

    def store(self, workflow_id: str, token: str, rows: list[KVRow], size: int) -> None:
        """Keep ``rows`` (sorted by key) as the history ``token``'s release left."""
        count = rivet_settings.WORKFLOW_CACHE_SIZE
        limit = rivet_settings.WORKFLOW_CACHE_BYTES
        with self._lock:
            old = self._entries.pop(workflow_id, None)
            if old is not None:
                self.bytes -= old.size
            if count <= 0 or size > limit:
                return
            self._entries[workflow_id] = _Entry(token, rows, size)
            self.bytes += size
            while len(self._entries) > count or self.bytes > limit:
                _, evicted = self._entries.popitem(last=False)
                self.bytes -= evicted.size

    def evict(self, workflow_id: str) -> None:
        """Forget the history of ``workflow_id`` (nothing if none is kept)."""
        with self._lock:
            entry = self._entries.pop(workflow_id, None)
            if entry is not None:
                self.bytes -= entry.size

    def clear(self) -> None:
        """Forget every history."""
        with self._lock:
            self._entries.clear()
            self.bytes = self.hits = self.misses = 0


#: This process's cache.
cache = HistoryCache()


def _size(rows: Iterable[KVRow]) -> int:
    return sum(len(key) + len(value) for key, value in rows)


class HistoryCopy:
    """One run's copy of its workflow's history, following its writes.

    Off (every method a no-op) without a lease token and a claimed mark,
    or with the cache off. The driver records each write before it runs
    (``upsert``, the deletions) inside :meth:`applying`, which applies them
    when the database call succeeded and drops the copy when it raised.
    """

    def __init__(self, workflow_id: str, token: str | None, mark: str | None) -> None:
        self.workflow_id = workflow_id
        self.token = token
        self.mark = mark
        self.on = (
            token is not None
            and mark is not None
            and rivet_settings.WORKFLOW_CACHE_SIZE > 0
        )
        self.rows: list[KVRow] | None = None
        self.size = 0
        self.wrote = False  # a write was recorded (before a load, too)
        self._pending: list[Callable[[list[KVRow]], None]] = []

    def cached(self) -> list[KVRow] | None:
        """Return the cached history if it is current (once, before any write)."""
        if not self.on or self.wrote or self.rows is not None or self.mark is None:
            return None
        found = cache.take(self.workflow_id, self.mark)
        self.mark = None  # taken: a later load reads the database
        if found is None:
            return None
        self.rows, self.size = found
        return list(self.rows)

    def loaded(self, rows: list[KVRow]) -> None:
        """Start from ``rows``, the whole history just read from the database."""
        if self.on:
            self.rows, self.size = list(rows), _size(rows)

    def drop(self) -> None:
        """Give up the copy for this run: it may not be what the database holds."""
        self.on, self.rows = False, None
        self._pending.clear()

    def applying(self) -> HistoryCopy:
        """Apply the writes recorded inside once it finished; drop on errors.

        The copy is its own context manager: every database call of a run
        enters one, and a generator's costs three times as much.
        """
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:
            # A write that may or may not have landed -- or may still land:
            # a cancelled call's thread goes on with its statement after the
            # await was cancelled, and may record its write only then.
            self.drop()
            return  # (raised on)
        pending, self._pending = self._pending, []
        if self.rows is not None:
            for change in pending:
                change(self.rows)

    def keep(self, keep: bool) -> None:
        """After the release's commit, store the copy (``keep``) or evict.

        Call in the releasing transaction, once the release matched the lease.
        """
        rows, size, token = self.rows, self.size, self.token
        self.drop()
        if not keep or rows is None or token is None:
            cache.evict(self.workflow_id)
            return
        workflow_id = self.workflow_id
        db.on_commit(lambda: cache.store(workflow_id, token, rows, size))

    # -- recording writes ------------------------------------------------------------
    def _record(self, change: Callable[[list[KVRow]], None]) -> None:
        if self.on:
            self.wrote = True
            self._pending.append(change)

    def upsert(self, pairs: dict[bytes, bytes]) -> None:
        """Record the write of ``pairs`` (new keys or new values)."""
        if self.on:
            written = {bytes(key): bytes(value) for key, value in pairs.items()}
            self._record(lambda rows: self._upsert(rows, written))

    def delete_keys(self, keys: Iterable[bytes]) -> None:
        """Record the deletion of ``keys``."""
        if self.on:
            gone = sorted({bytes(key) for key in keys})
            self._record(lambda rows: self._delete_keys(rows, gone))

    def delete_range(self, start: bytes, end: bytes | None) -> None:
        """Record the deletion of the keys in ``[start, end)`` (None: no end)."""
        self._record(lambda rows: self._delete_range(rows, bytes(start), end))

    def delete_prefix(self, prefix: bytes) -> None:
        """Record the deletion of every key under ``prefix`` (b"": all)."""
        end = prefix_end(prefix) if prefix else None
        self.delete_range(prefix, end)

    # -- applying them to the sorted rows ---------------------------------------------
    def _upsert(self, rows: list[KVRow], pairs: dict[bytes, bytes]) -> None:
        if len(pairs) > _MERGE_ABOVE:
            merged = dict(rows)
            for key, value in pairs.items():
                old = merged.get(key)
                self.size += len(value) + (len(key) if old is None else -len(old))
                merged[key] = value
            rows[:] = sorted(merged.items())
            return
        for key, value in sorted(pairs.items()):
            at = bisect_left(rows, key, key=_first)
            if at < len(rows) and rows[at][0] == key:
                self.size += len(value) - len(rows[at][1])
                rows[at] = (key, value)
            else:
                rows.insert(at, (key, value))
                self.size += len(key) + len(value)

    def _delete_keys(self, rows: list[KVRow], keys: list[bytes]) -> None:
        for key in keys:
            at = bisect_left(rows, key, key=_first)
            if at < len(rows) and rows[at][0] == key:
                self.size -= len(key) + len(rows[at][1])
                del rows[at]

    def _delete_range(self, rows: list[KVRow], start: bytes, end: bytes | None) -> None:
        low = bisect_left(rows, start, key=_first)
        high = len(rows) if end is None else bisect_left(rows, bytes(end), key=_first)
        if low < high:
            self.size -= _size(rows[low:high])
            del rows[low:high]
