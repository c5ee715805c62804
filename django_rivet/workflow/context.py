"""``WorkflowContext``: the ``ctx`` a workflow function receives.

Every call on the context is a named *entry* at a *location* (the path of
names from the root, with ``~N`` for loop iterations). The first run records
each entry; later runs replay recorded entries instead of redoing the work.

Each context method returns its awaitable synchronously after claiming the
context, so a second entry started before the first was awaited (a missing
``await``, or ``asyncio.gather`` over two ``ctx`` calls) fails at once with
:class:`EntryInProgressError`. Parallel work goes through ``join``/``race``,
whose branches get contexts of their own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django_rivet import clock

from . import flow, keys, messages, schema, steps
from .errors import (
    EntryInProgressError,
    EvictedError,
    HistoryDivergedError,
    SleepError,
)
from .execution import RollbackStop, Run, complete
from .values import StepResult

__all__ = ["WorkflowContext"]

T = TypeVar("T")

DEFAULT_TRY_CATCH = ("critical", "timeout", "exhausted", "join", "race")


class WorkflowContext:
    """The durable API of SPEC 5.1, bound to one scope of one run."""

    def __init__(
        self, run: Run, scope: keys.Location = (), *, checkpoint: bool = False
    ) -> None:
        self._run = run
        self._scope: keys.Location = tuple(scope)
        self._checkpoint = checkpoint
        self._in_flight: Coroutine[Any, Any, Any] | None = None
        self.messages = messages.Messages(self)

    # Identity ----------------------------------------------------------------

    @property
    def workflow_id(self) -> str:
        """Return the id of the running workflow."""
        return self._run.workflow_id

    def is_evicted(self) -> bool:
        """Return whether the host asked this run to stop."""
        return self._run.evicted()

    # Entries -------------------------------------------------------------------

    def step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        max_retries: int = 3,
        retry_backoff_base: float = 0.1,
        retry_backoff_max: float = 30,
        timeout: float | None = 30,
        retry_on_timeout: bool = False,
        rollback: Callable[..., Any] | None = None,
        ephemeral: bool = False,
        transaction: bool = False,
    ) -> Coroutine[Any, Any, Any]:
        """Run ``fn()`` once, durably; replays return the recorded output.

        ``max_retries`` counts the retries after the first attempt, as
        RivetKit's engine does (3: up to 4 runs): failed attempts wait
        ``min(retry_backoff_max, retry_backoff_base * 2**attempts)`` seconds.
        ``CriticalError``/``RollbackError`` (``StorageLimitError`` among them)
        and timeouts (unless ``retry_on_timeout``) are never retried.
        ``ephemeral`` steps are written by the next flush instead of their
        own; ``transaction=True``
        hands ``fn`` and the step's history write to the driver together
        (``driver.run_transactional``), so their effects commit as one. A
        transactional step is not cut off by ``timeout``: abandoning it could
        not stop its commit, so the database bounds it instead.
        """
        options = steps.StepOptions(
            max_retries,
            retry_backoff_base,
            retry_backoff_max,
            timeout,
            retry_on_timeout,
            rollback,
            ephemeral,
            transaction,
        )
        return self._entry(lambda: steps.run_step(self, name, fn, options))

    def try_step(
        self, name: str, fn: Callable[[], Any], **options: Any
    ) -> Coroutine[Any, Any, StepResult[Any]]:
        """Run a step like :meth:`step`, returning failures as a ``StepResult``."""
        opts = steps.StepOptions(**options)
        return self._entry(lambda: steps.try_step(self, name, fn, opts))

    def try_block(
        self,
        name: str,
        fn: Callable[[WorkflowContext], Any],
        *,
        catch: Iterable[str | type[BaseException]] = DEFAULT_TRY_CATCH,
    ) -> Coroutine[Any, Any, StepResult[Any]]:
        """Run ``fn(ctx)`` as a scope; step, join and race failures become results."""
        return self._entry(lambda: flow.run_try_block(self, name, fn, tuple(catch)))

    def loop(
        self,
        name: str,
        fn: Callable[[WorkflowContext, Any], Any],
        *,
        state: Any = None,
        history_prune_interval: int = 20,
        history_size: int | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Call ``fn(ctx, state)`` until it returns ``Loop.break_(value)``.

        Each finished iteration's state is saved with the next flush (a
        resume goes on after it); every ``history_prune_interval``
        iterations the loop flushes and prunes the iterations older than the
        last ``history_size``, with one range delete.
        """
        size = history_prune_interval if history_size is None else history_size
        return self._entry(
            lambda: flow.run_loop(self, name, fn, state, history_prune_interval, size)
        )

    def join(
        self, name: str, branches: dict[str, Callable[[WorkflowContext], Any]]
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """Run every branch in parallel and return their outputs by name."""
        return self._entry(lambda: flow.run_join(self, name, dict(branches)))

    def race(
        self, name: str, branches: dict[str, Callable[[WorkflowContext], Any]]
    ) -> Coroutine[Any, Any, tuple[str, Any]]:
        """Run branches in parallel; return ``(winner, value)`` of the first."""
        return self._entry(lambda: flow.run_race(self, name, dict(branches)))

    def sleep(
        self, name: str, duration: float | timedelta
    ) -> Coroutine[Any, Any, None]:
        """Sleep durably for ``duration`` (seconds or a timedelta)."""
        seconds = (
            duration.total_seconds()
            if isinstance(duration, timedelta)
            else float(duration)
        )
        return self._entry(lambda: self._sleep(name, lambda: clock.now() + seconds))

    def sleep_until(
        self, name: str, moment: float | datetime
    ) -> Coroutine[Any, Any, None]:
        """Sleep durably until ``moment`` (a datetime or epoch seconds)."""
        deadline = (
            clock.to_timestamp(moment) if isinstance(moment, datetime) else moment
        )
        return self._entry(lambda: self._sleep(name, lambda: float(deadline)))

    def rollback_checkpoint(self, name: str) -> Coroutine[Any, Any, None]:
        """Mark where rollbacks start; steps with ``rollback=`` need one first."""
        return self._entry(lambda: self._rollback_checkpoint(name))

    def removed(self, name: str, original_type: str) -> Coroutine[Any, Any, None]:
        """Stand in for an entry the code no longer makes, so replays still match."""
        if original_type not in schema.ENTRY_KINDS:
            raise ValueError(f"Unknown entry kind {original_type!r}")
        return self._entry(lambda: self._removed(name, original_type))

    def get_version(self, name: str, latest: int) -> Coroutine[Any, Any, int]:
        """Return ``latest`` for new work, 1 where history predates this gate."""
        return self._entry(lambda: self._get_version(name, latest))

    # Plumbing ------------------------------------------------------------------

    def _entry(
        self, factory: Callable[[], Coroutine[Any, Any, T]]
    ) -> Coroutine[Any, Any, T]:
        stale = self._in_flight
        if stale is not None:
            close_unstarted(stale)
            raise EntryInProgressError()
        if self._run.evicted():
            raise EvictedError()
        coroutine = self._guard(factory)
        self._in_flight = coroutine
        return coroutine

    async def _guard(self, factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
        try:
            return await factory()
        finally:
            self._in_flight = None

    def _visit(self, name: str) -> keys.Location:
        """Return the location of ``name`` in this scope, refusing duplicates."""
        storage = self._run.storage
        if self._run.rollback:
            index = storage.name_index(name)
            if index is None:
                raise RollbackStop()
        else:
            index = storage.register_name(name)
        location = (*self._scope, index)
        if location in self._run.visited:
            where = storage.location_string(self._scope) or "<root>"
            raise HistoryDivergedError(
                f'Duplicate entry name "{name}" in scope "{where}": every entry '
                "needs a unique name within its scope"
            )
        self._run.visited.add(location)
        return location

    def _existing(self, location: keys.Location, kind: str) -> schema.Entry | None:
        entry = self._run.storage.entries.get(location)
        if entry is not None and entry.kind != kind:
            where = self._run.storage.location_string(location)
            raise HistoryDivergedError(
                f'Expected a {kind} at "{where}", history has a {entry.kind}'
            )
        return entry

    def _child(self, scope: keys.Location) -> WorkflowContext:
        return WorkflowContext(self._run, scope, checkpoint=self._checkpoint)

    def _finish(self) -> None:
        """Close the scope: nothing in flight, every recorded entry visited."""
        stale = self._in_flight
        if stale is not None:
            close_unstarted(stale)
            raise EntryInProgressError()
        if not self._run.rollback:
            self._validate()

    def _abandon(self) -> None:
        """Drop an entry that was started but never awaited."""
        if self._in_flight is not None:
            close_unstarted(self._in_flight)
            self._in_flight = None

    def _validate(self) -> None:
        run = self._run
        for location in run.storage.entries_under(self._scope):
            if location in run.visited:
                continue
            if any(location[:i] in run.covered for i in range(1, len(location))):
                continue
            where = run.storage.location_string(location)
            raise HistoryDivergedError(
                f'Entry "{where}" exists in history but was not visited: the '
                "workflow code changed. Use ctx.removed() to retire old entries."
            )

    # Simple entries ------------------------------------------------------------

    async def _sleep(self, name: str, deadline_of: Callable[[], float]) -> None:
        run = self._run
        storage = run.storage
        location = self._visit(name)
        entry = self._existing(location, "sleep")
        if entry is not None:
            if entry.data["state"] != "pending":
                return
            if run.rollback:
                raise RollbackStop()
            deadline = float(entry.data["deadline"])
        else:
            if run.rollback:
                raise RollbackStop()
            deadline = deadline_of()
            entry = storage.create_entry(
                location, "sleep", {"deadline": deadline, "state": "pending"}
            )
            await storage.flush()
        remaining = deadline - clock.now()
        if remaining > 0:
            if remaining >= run.driver.worker_poll_interval:
                raise SleepError(deadline)
            await run.until_evicted(clock.wait_until(deadline))
        complete(storage, entry, state="completed")
        if remaining <= 0:
            await storage.flush()

    async def _rollback_checkpoint(self, name: str) -> None:
        location = self._visit(name)
        entry = self._existing(location, "rollback_checkpoint")
        if entry is None:
            if self._run.rollback:
                raise RollbackStop()
            storage = self._run.storage
            entry = storage.create_entry(
                location, "rollback_checkpoint", {"name": name}
            )
            complete(storage, entry)
            await storage.flush()
        self._checkpoint = True

    async def _removed(self, name: str, original_type: str) -> None:
        location = self._visit(name)
        storage = self._run.storage
        entry = storage.entries.get(location)
        self._run.cover(location)
        if entry is not None:
            if entry.kind not in ("removed", original_type):
                where = storage.location_string(location)
                raise HistoryDivergedError(
                    f'Expected a removed {original_type} at "{where}", history '
                    f"has a {entry.kind}"
                )
            return
        if self._run.rollback:
            raise RollbackStop()
        data = {"original_type": original_type, "original_name": name}
        complete(storage, storage.create_entry(location, "removed", data))

    async def _get_version(self, name: str, latest: int) -> int:
        location = self._visit(name)
        entry = self._existing(location, "version_check")
        if entry is not None:
            return int(entry.data["version"])
        if self._run.rollback:
            raise RollbackStop()
        storage = self._run.storage
        # History recorded in this scope by an earlier run predates the gate:
        # that instance started on the old code, so it is pinned to version 1.
        loaded = storage.loaded_locations
        in_flight = any(loc in loaded for loc in storage.entries_under(self._scope))
        version = 1 if in_flight else int(latest)
        entry = storage.create_entry(location, "version_check", {"version": version})
        complete(storage, entry)
        return version


def close_unstarted(coroutine: Coroutine[Any, Any, Any]) -> None:
    # An entry coroutine that never started would warn "never awaited" at GC.
    if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
        coroutine.close()
