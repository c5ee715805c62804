"""``Scope``: one scope of one run, and the bookkeeping every entry does.

A workflow function's ``ctx`` (:class:`~.context.WorkflowContext`) is the
public face of a scope; the engine's parts (steps, loops, joins, races,
messages, children, published values, the replay check) take the scope
itself. It holds the run, its location (the path of names from the root,
with ``~N`` for loop iterations) and the rule that one entry at a time is
in flight, and offers what each entry does with them: :meth:`Scope.visit`
a name, find its recorded entry (:meth:`Scope.existing`), open a child scope
(:meth:`Scope.child`), close the scope (:meth:`Scope.finish`).

Each entry's awaitable is returned synchronously after claiming the scope
(:meth:`Scope.enter`), so a second entry started before the first was
awaited (a missing ``await``, or ``asyncio.gather`` over two ``ctx`` calls)
fails at once with :class:`EntryInProgressError`. Parallel work goes
through ``join``/``race``, whose branches get scopes of their own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from . import keys, schema
from .errors import EntryInProgressError, EvictedError, diverged
from .execution import RollbackStop, Run

__all__ = ["Scope", "close_unstarted"]

T = TypeVar("T")


class Scope:
    """One scope of one run: its location, and the entry in flight.

    ``context`` is the object the workflow function's code receives for this
    scope, built by ``make_context`` (the engine passes
    :class:`~.context.WorkflowContext`); child scopes build theirs the same
    way. Nothing here uses it, so its type is the caller's business.
    """

    __slots__ = (
        "_events",
        "_in_flight",
        "_make_context",
        "_streams",
        "checkpoint",
        "context",
        "location",
        "run",
    )

    def __init__(
        self,
        run: Run,
        location: keys.Location = (),
        *,
        make_context: Callable[[Scope], Any],
        checkpoint: bool = False,
    ) -> None:
        self.run = run
        self.location: keys.Location = tuple(location)
        # Whether a rollback checkpoint was passed in this scope or above it:
        # steps with a rollback handler need one.
        self.checkpoint = checkpoint
        self._make_context = make_context
        self._in_flight: Coroutine[Any, Any, Any] | None = None
        # How many set_event calls this scope made per key: their entry names.
        self._events: dict[str, int] = {}
        # How many stream writes and closes it made per key: their sources.
        self._streams: dict[tuple[str, str], int] = {}
        self.context: Any = make_context(self)

    def child(self, location: keys.Location) -> Scope:
        """Return the scope at ``location`` below this one (a branch, an iteration)."""
        return Scope(
            self.run,
            location,
            make_context=self._make_context,
            checkpoint=self.checkpoint,
        )

    def count_event(self, key: str) -> int:
        """Count one more ``set_event(key)`` in this scope; return how many."""
        count = self._events.get(key, 0) + 1
        self._events[key] = count
        return count

    def count_stream(self, what: str, key: str) -> int:
        """Count one more stream ``what`` (write, close) of ``key``; return how many."""
        count = self._streams.get((what, key), 0) + 1
        self._streams[(what, key)] = count
        return count

    # -- one entry at a time -----------------------------------------------------------

    def enter(
        self, factory: Callable[[], Coroutine[Any, Any, T]]
    ) -> Coroutine[Any, Any, T]:
        """Claim the scope for the entry ``factory`` makes; return its awaitable."""
        stale = self._in_flight
        if stale is not None:
            close_unstarted(stale)
            raise EntryInProgressError()
        if self.run.evicted():
            raise EvictedError()
        coroutine = self._guard(factory)
        self._in_flight = coroutine
        return coroutine

    async def _guard(self, factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
        try:
            return await factory()
        except RollbackStop as stop:
            if self.run.check and not stop.checked:
                # A replay check stops at the first entry history does not
                # have finished: what this scope recorded must have been
                # replayed by then, or the code changed (renamed, removed or
                # moved an entry; see ``check_replay``).
                stop.checked = True
                self.validate()
            raise
        finally:
            self._in_flight = None

    def finish(self) -> None:
        """Close the scope: nothing in flight, every recorded entry visited."""
        stale = self._in_flight
        if stale is not None:
            close_unstarted(stale)
            raise EntryInProgressError()
        if not self.run.rollback or self.run.check:
            self.validate()

    def abandon(self) -> None:
        """Drop an entry that was started but never awaited."""
        if self._in_flight is not None:
            close_unstarted(self._in_flight)
            self._in_flight = None

    # -- names, locations and history --------------------------------------------------

    def visit(self, name: str) -> keys.Location:
        """Return the location of ``name`` in this scope, refusing duplicates.

        A rollback (not a check) stops at a name history does not have.
        """
        run = self.run
        storage = run.storage
        if run.rollback and not run.check:
            index = storage.name_index(name)
            if index is None:
                raise RollbackStop()
        else:
            # A check registers new names in memory only (it never flushes):
            # get_version and removed go on where a run would, the other
            # entries stop there as new work.
            index = storage.register_name(name)
        location = (*self.location, index)
        if location in run.visited:
            where = storage.location_string(self.location) or "<root>"
            raise diverged(
                f'Duplicate entry name "{name}" in scope "{where}": every entry '
                "needs a unique name within its scope",
                storage.location_string(location),
                causes=False,
            )
        run.visited.add(location)
        return location

    def existing(self, location: keys.Location, kind: str) -> schema.Entry | None:
        """Return the recorded entry at ``location``, refusing another kind."""
        entry = self.run.storage.entries.get(location)
        if entry is not None and entry.kind != kind:
            where = self.run.storage.location_string(location)
            raise diverged(
                f'Expected a {kind} at "{where}", history has a {entry.kind}', where
            )
        return entry

    def validate(self) -> None:
        """Refuse recorded entries of this scope the code did not visit."""
        run = self.run
        for location in run.storage.entries_under(self.location):
            if location in run.visited:
                continue
            if any(location[:i] in run.covered for i in range(1, len(location))):
                continue
            where = run.storage.location_string(location)
            raise diverged(
                f'Entry "{where}" exists in history but this run did not reach '
                "it (the first recorded entry it did not visit)",
                where,
            )


def close_unstarted(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Close an entry coroutine that never started (no "never awaited" warning)."""
    if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
        coroutine.close()
