"""The process cache: actor instances and decoded state kept between calls.

Each process keeps the instance of every actor it has run (its ephemeral
attributes live there) and the decoded state of the version it last
committed, so the next invocation skips decoding when the row version still
matches. An invocation *checks out* the state (the cache holds no state
meanwhile), so a mutation made by a run that rolls back is never reused:
:func:`checkout` on the way in, :func:`store` after commit, :func:`drop` after
a failure. Idle entries are found by :func:`idle_entries`; the spine evicts
them (running ``on_sleep``).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from typing import Any

from .. import clock
from .definition import Actor
from .rows import LockedRow

__all__ = [
    "CachedActor",
    "cached_definition",
    "cached_ids",
    "checkout",
    "clear",
    "drop",
    "idle_entries",
    "store",
]


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


_cache: dict[uuid.UUID, CachedActor] = {}
_lock = threading.Lock()


def clear() -> None:
    """Forget every cached instance without running hooks (tests)."""
    with _lock:
        _cache.clear()


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
) -> tuple[CachedActor, bool, Any, bytes | None]:
    """Take the cached instance and state for ``row``.

    Returns ``(entry, fresh, state, state_bytes)``: ``fresh`` when the
    instance was just created (``on_wake`` must run); state and bytes are
    ``None`` unless the cached version matches the row.
    """
    with _lock:
        entry = _cache.get(row.id)
        if entry is None or entry.definition is not definition:
            entry = _cache[row.id] = CachedActor(
                instance=definition(), definition=definition
            )
            fresh = True
        else:
            fresh = False
        state, state_bytes = None, None
        if entry.state_bytes is not None and entry.version == row.version:
            state, state_bytes = entry.state, entry.state_bytes
        entry.state = entry.state_bytes = None
        entry.version = -1
        entry.last_used = clock.now()
    return entry, fresh, state, state_bytes


def store(
    actor_id: uuid.UUID,
    entry: CachedActor,
    state: Any,
    state_bytes: bytes,
    version: int,
) -> None:
    """Keep committed state for the next invocation in this process."""
    with _lock:
        entry.state = state
        entry.state_bytes = state_bytes
        entry.version = version
        entry.last_used = clock.now()


def drop(actor_id: uuid.UUID, entry: CachedActor) -> None:
    """Forget ``entry`` if it is still the one cached for ``actor_id``."""
    with _lock:
        if _cache.get(actor_id) is entry:
            del _cache[actor_id]


def idle_entries(max_idle: float) -> list[tuple[uuid.UUID, CachedActor]]:
    """Return entries unused for at least ``max_idle`` seconds."""
    now = clock.now()
    with _lock:
        return [
            (actor_id, entry)
            for actor_id, entry in _cache.items()
            if now - entry.last_used >= max_idle
        ]
