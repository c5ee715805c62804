"""The process cache: actor instances and decoded state kept between calls.

Each process keeps the instance of every actor it has run (its ephemeral
attributes live there) and the decoded state of the version it last
committed, so the next invocation skips decoding when the row version still
matches. An invocation *checks out* the state (the cache holds no state
meanwhile), so a mutation made by a run that rolls back is never reused:
:func:`checkout` on the way in, :func:`store` after commit, :func:`drop` after
a failure. Idle entries are found by :func:`idle_entries`; the spine evicts
them (running ``on_sleep``) after invocations, and :func:`watch_idle` runs
that eviction in the background when the process itself goes idle -- else a
process that served 10,000 actors once would keep them all.

Memory is bounded twice. By count (``ACTOR_CACHE_SIZE``: instances beyond it
are evicted by the background watcher, ``on_sleep`` running) and by bytes
(``ACTOR_CACHE_BYTES``): each kept state's memory is measured when a new one
is kept (:func:`estimate`: the objects' own sizes, walked once; a call that
changed nothing keeps the last measure), and a :func:`store` that takes the
total past the bound drops the states of the least recently used actors at
once (their instances stay; their next call reads the row). A decoded state
costs many times its encoded size, and how many depends on its shape (a 0.9
MB state of small records is ~7 MiB of Python objects; one-entry maps and
strings holding an astral character cost more per encoded byte), so a count
alone let a process hold gigabytes and a per-byte guess let client-chosen
shapes exceed the bound threefold.

Evicting does not by itself give the memory back: a dict keeps its table at
its largest size, and glibc keeps freed blocks in its arenas (one per
invoking thread). After a large eviction the cache rebuilds its dict and
asks glibc to return free memory to the system (:func:`compact`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections

from .. import clock
from ..conf import rivet_settings
from . import sizes
from .definition import Actor
from .rows import LockedRow

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "CachedActor",
    "Measure",
    "cached_bytes",
    "cached_definition",
    "cached_ids",
    "checkout",
    "clear",
    "compact",
    "drop",
    "estimate",
    "idle_entries",
    "remeasure",
    "store",
    "watch_idle",
]


#: Bytes an actor instance costs without its state (measured: ~0.8 KiB).
INSTANCE_BYTES = 1024


@dataclass(slots=True)
class CachedActor:
    """One actor loaded in this process."""

    instance: Actor
    definition: type[Actor]
    # The decoded state matching ``version``; None while an invocation has it
    # checked out, so a rolled-back mutation is never reused.
    state: Any = None
    state_bytes: bytes | None = None
    version: int = -1
    last_used: float = 0.0
    # Estimated bytes this entry holds (see estimate()): its instance and
    # state (state_size), plus a committed copy that is not that state; and
    # how far the state may have moved from its measure (see store()).
    size: int = 0
    state_size: int = INSTANCE_BYTES
    drift: int = 0
    # The newest committed state this process knows, encoded, and its
    # version: kept while an invocation has the state checked out, for the
    # read-only actions that run meanwhile (reads.py), which decode their
    # own copy of it.
    committed_version: int = -1
    committed_bytes: bytes | None = None
    # (name, key) of the actor, so a call by key finds the entry.
    address: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True, slots=True)
class Measure:
    """A kept state's estimate, and the encoding it was taken for."""

    size: int
    drift: int
    data: bytes


#: Measure a changed state again once what changed since it was measured
#: could have moved its memory by this share of its estimate.
MAX_DRIFT = 0.25


def estimate(state: Any, state_bytes: bytes) -> int:
    """Return the memory a cached state holds: its objects and its encoding.

    The encoded bytes are kept too (to compare at the next write). Within a
    few percent of what tracemalloc measures for a decoded state of any
    shape (tests/actors/test_cache.py); shared objects (small integers,
    one-character strings, ``None``, booleans) cost nothing.
    """
    return INSTANCE_BYTES + sizes.measure(state) + sys.getsizeof(state_bytes)


_cache: dict[uuid.UUID, CachedActor] = {}
# Actor ids by (name, key), for the entries of _cache.
_by_address: dict[tuple[str, tuple[str, ...]], uuid.UUID] = {}
# Sum of the entries' sizes.
_bytes = 0
_lock = threading.Lock()
# Entries dropped since the dict was last rebuilt, and the largest size the
# dict reached meanwhile (its table never shrinks by itself).
_dropped = 0
_peak = 0
# time.monotonic() of the last store: the process is idle when it is old.
_last_store = 0.0
# Rebuild the dict once this many entries (and half of its peak) were dropped.
COMPACT_AFTER = 1000


def clear() -> None:
    """Forget every cached instance without running hooks (tests)."""
    global _dropped, _peak, _bytes
    with _lock:
        _cache.clear()
        _by_address.clear()
        _dropped = _peak = _bytes = 0


def cached_bytes() -> int:
    """Return the estimated bytes the cache holds (instances and states)."""
    return _bytes


def cached_ids() -> set[uuid.UUID]:
    """Return the ids of actors loaded in this process."""
    with _lock:
        return set(_cache)


def cached_definition(actor_id: uuid.UUID) -> type[Actor] | None:
    """Return the class of a loaded actor, or ``None``."""
    with _lock:
        entry = _cache.get(actor_id)
    return None if entry is None else entry.definition


def checkout(
    row: LockedRow, definition: type[Actor]
) -> tuple[CachedActor, bool, Any, bytes | None, Measure | None]:
    """Take the cached instance and state for ``row``.

    Returns ``(entry, fresh, state, state_bytes, measure)``: ``fresh``
    when the instance was just created (``on_wake`` must run); state, bytes
    and the state's :class:`Measure` are ``None`` unless the cached version
    matches the row.
    """
    global _peak, _bytes
    with _lock:
        entry = _cache.pop(row.id, None)
        if entry is None or entry.definition is not definition:
            if entry is not None:
                _bytes -= entry.size
            entry = CachedActor(
                instance=definition(), definition=definition, size=INSTANCE_BYTES
            )
            _bytes += entry.size
            fresh = True
        else:
            fresh = False
        if entry.address is None:
            entry.address = (row.name, tuple(row.key_parts))
            _by_address[entry.address] = row.id
        # Re-inserted: the dict's order is the order of last use.
        _cache[row.id] = entry
        _peak = max(_peak, len(_cache))
        state, state_bytes, measure = None, None, None
        if entry.state_bytes is not None and entry.version == row.version:
            state, state_bytes = entry.state, entry.state_bytes
            measure = Measure(entry.state_size, entry.drift, entry.state_bytes)
        entry.state = entry.state_bytes = None
        entry.version = -1
        entry.state_size = INSTANCE_BYTES
        _resize(entry, INSTANCE_BYTES)
        entry.last_used = clock.now()
    return entry, fresh, state, state_bytes, measure


def _resize(entry: CachedActor, size: int) -> None:
    """Set ``entry``'s estimate to ``size`` plus the committed copy it keeps."""
    global _bytes
    committed = entry.committed_bytes
    if committed is not None and committed is not entry.state_bytes:
        size += len(committed)
    _bytes += size - entry.size
    entry.size = size


def read_hint(
    name: str | None, key: tuple[str, ...], actor_id: uuid.UUID | None
) -> tuple[uuid.UUID | None, int, bytes | None]:
    """Return ``(actor id, version, state bytes)`` of the newest committed
    state this process holds for the actor, or ``(None, -1, None)``."""
    with _lock:
        if actor_id is None and name is not None:
            actor_id = _by_address.get((name, key))
        entry = _cache.get(actor_id) if actor_id is not None else None
        if entry is None or entry.committed_bytes is None:
            return None, -1, None
        return actor_id, entry.committed_version, entry.committed_bytes


def reader(actor_id: uuid.UUID, definition: type[Actor]) -> CachedActor | None:
    """Return the loaded instance's entry for a read-only call, or ``None``.

    ``None`` when this process has not loaded the actor (as ``definition``):
    the call loads it under the lock first (``on_wake`` runs there).
    """
    with _lock:
        entry = _cache.get(actor_id)
        if entry is None or entry.definition is not definition:
            return None
        entry.last_used = clock.now()
    return entry


def remember(
    actor_id: uuid.UUID, entry: CachedActor, version: int, data: bytes
) -> None:
    """Keep a committed state a read-only call read, if it is the newest known."""
    global _last_store
    _last_store = time.monotonic()
    with _lock:
        if _cache.get(actor_id) is not entry or version <= entry.committed_version:
            return
        if 2 * len(data) > rivet_settings.ACTOR_CACHE_BYTES:
            return
        entry.committed_version, entry.committed_bytes = version, data
        _resize(entry, entry.state_size)


def store(
    actor_id: uuid.UUID,
    entry: CachedActor,
    state: Any,
    state_bytes: bytes,
    version: int,
    measure: Measure | None = None,
) -> None:
    """Keep committed state for the next invocation in this process.

    ``measure`` is the one the state had when it was checked out, if any
    (:func:`remeasure`). Past ``ACTOR_CACHE_BYTES`` the least recently used
    states are dropped; a state over the bound by itself is not kept.
    """
    global _last_store, _bytes
    _last_store = time.monotonic()
    _ensure_watcher()
    limit = rivet_settings.ACTOR_CACHE_BYTES
    size, drift = remeasure(state, state_bytes, measure)
    with _lock:
        if _cache.get(actor_id) is not entry:
            return  # dropped meanwhile
        entry.last_used = clock.now()
        if size > limit:
            return
        entry.state = state
        entry.state_bytes = state_bytes
        entry.version = version
        entry.committed_version, entry.committed_bytes = version, state_bytes
        entry.state_size, entry.drift = size, drift
        _resize(entry, size)
        if _bytes > limit:
            _shed(limit, keep=entry)


def remeasure(state: Any, data: bytes, measure: Measure | None) -> tuple[int, int]:
    """Return ``(estimate, drift)`` of a state about to be kept.

    The last measure stands while the state's encoding is the one it was
    taken for. A change of ``n`` encoded bytes moves the state's memory by
    at most :data:`~.sizes.MAX_BYTES_PER_BYTE` times ``n``: while those
    moves add up to less than :data:`MAX_DRIFT` of the estimate, it stands
    (less the bytes kept), so a write of one field of a large state does
    not walk it again; past that, or with nothing to start from, the state
    is measured (:func:`estimate`).
    """
    if measure is not None:
        if measure.data is data:
            return measure.size, measure.drift
        moved = sizes.MAX_BYTES_PER_BYTE * sizes.changed_bytes(measure.data, data)
        drift = measure.drift + moved
        if drift <= MAX_DRIFT * measure.size:
            return measure.size + len(data) - len(measure.data), drift
    return estimate(state, data), 0


def _shed(limit: int, keep: CachedActor) -> None:
    """Drop the least recently used states until the cache is within ``limit``."""
    global _bytes
    for other in list(_cache.values()):
        if _bytes <= limit:
            return
        if other is keep or (
            other.state_bytes is None and other.committed_bytes is None
        ):
            continue
        other.state = other.state_bytes = other.committed_bytes = None
        other.version = other.committed_version = -1
        other.state_size, other.drift = INSTANCE_BYTES, 0
        _resize(other, INSTANCE_BYTES)


def drop(actor_id: uuid.UUID, entry: CachedActor) -> None:
    """Forget ``entry`` if it is still the one cached for ``actor_id``."""
    global _dropped, _bytes
    with _lock:
        if _cache.get(actor_id) is not entry:
            return
        del _cache[actor_id]
        if entry.address is not None and _by_address.get(entry.address) == actor_id:
            del _by_address[entry.address]
        _bytes -= entry.size
        _dropped += 1


def _worth_compacting() -> bool:
    return _dropped >= COMPACT_AFTER and _dropped * 2 >= _peak


def compact() -> None:
    """Give the memory of dropped entries back to the system.

    Rebuilds the dict (its table keeps its largest size otherwise) and, on
    glibc, calls ``malloc_trim(0)`` so freed blocks leave the process.
    """
    global _cache, _by_address, _dropped, _peak
    with _lock:
        _cache = dict(_cache)
        _by_address = dict(_by_address)
        _dropped = 0
        _peak = len(_cache)
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    # glibc only (Linux); elsewhere the allocator decides on its own.
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (AttributeError, OSError):
        return None
    return function


def idle_entries(max_idle: float) -> list[tuple[uuid.UUID, CachedActor]]:
    """Return entries unused for at least ``max_idle`` seconds."""
    now = clock.now()
    with _lock:
        return [
            (actor_id, entry)
            for actor_id, entry in _cache.items()
            if now - entry.last_used >= max_idle
        ]


# -- eviction while the process is idle, and the size bound -------------------------
_evictor: Callable[[float | None], int] | None = None
_watcher: threading.Thread | None = None
_watcher_pid = 0
_watcher_lock = threading.Lock()


def watch_idle(evict: Callable[[float | None], int]) -> None:
    """Run ``evict(max_idle)`` in the background: when idle, and over the bound.

    The spine evicts idle actors after invocations; a process that stops
    getting any would keep its actors forever, and a busy one serving many
    actors would grow until they idle out. ``evict`` (the spine's
    ``evict_idle``, wired by the app config) runs from a daemon thread
    started with the first stored state: when no state was stored for
    ``SLEEP_TIMEOUT`` seconds, and, every second, for the least recently
    used actors beyond ``ACTOR_CACHE_SIZE``.
    """
    global _evictor
    _evictor = evict


def _ensure_watcher() -> None:
    global _watcher, _watcher_pid
    if _evictor is None:
        return
    pid = os.getpid()
    if _watcher is not None and _watcher_pid == pid and _watcher.is_alive():
        return
    with _watcher_lock:
        if _watcher is None or _watcher_pid != pid or not _watcher.is_alive():
            _watcher_pid = pid
            _watcher = threading.Thread(
                target=_watch, name="rivet-idle-eviction", daemon=True
            )
            _watcher.start()


def _excess_age() -> float | None:
    """Return the idle age beyond which evicting brings the cache to its bound."""
    bound = rivet_settings.ACTOR_CACHE_SIZE
    now = clock.now()
    with _lock:
        excess = len(_cache) - bound
        if excess <= 0:
            return None
        ages = sorted((now - e.last_used for e in _cache.values()), reverse=True)
    return max(ages[excess - 1], 0.0)


def _watch() -> None:
    while True:
        timeout = max(rivet_settings.SLEEP_TIMEOUT, 0.05)
        time.sleep(min(timeout, 1.0))
        evict = _evictor
        if evict is None:
            continue
        try:
            close_old_connections()
            over = _excess_age()
            if over is not None:
                evict(over)
            elif _cache and time.monotonic() - _last_store >= timeout:
                # Idle: invocations would have evicted after themselves.
                if evict(None):
                    compact()
            if _worth_compacting():
                # Many entries went (here or after invocations): give their
                # memory back.
                compact()
        except Exception:
            logger.exception("background eviction failed")
        finally:
            close_old_connections()
