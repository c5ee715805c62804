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
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django_rivet import clock

from . import children, flow, keys, messages, published, schema, steps
from .errors import (
    EntryInProgressError,
    EvictedError,
    SleepError,
    diverged,
)
from .execution import RollbackStop, Run, complete
from .values import Message, StepResult, seconds

__all__ = ["WorkflowContext"]

T = TypeVar("T")

DEFAULT_TRY_CATCH = ("critical", "timeout", "exhausted", "join", "race", "child")


class WorkflowContext:
    """The durable API of SPEC 5.1, bound to one scope of one run."""

    def __init__(
        self, run: Run, scope: keys.Location = (), *, checkpoint: bool = False
    ) -> None:
        self._run = run
        self._scope: keys.Location = tuple(scope)
        self._checkpoint = checkpoint
        self._in_flight: Coroutine[Any, Any, Any] | None = None
        # How many set_event calls this scope made per key: their entry names.
        self._events: dict[str, int] = {}
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

    # Children, replies and published values -----------------------------------

    def child(
        self,
        name: str,
        workflow: str,
        input: Any = None,
        *,
        id: str | None = None,
        timeout: float | timedelta | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Start the workflow ``workflow`` as a child and wait for its output.

        The child's id defaults to ``"<this workflow's id>/<location>"``, so a
        replay finds the same child instead of starting another. The wait is
        durable (the parent sleeps until the child ends). A child that fails
        or is cancelled raises :class:`ChildWorkflowError` here. A cancel of
        this workflow cancels the child (its rollbacks run).
        """
        spec = children.ChildOptions(workflow, input, id, False, seconds(timeout))
        return self._entry(lambda: children.run_child(self, name, spec, wait=True))

    def start_child(
        self,
        name: str,
        workflow: str,
        input: Any = None,
        *,
        id: str | None = None,
        detached: bool = False,
        timeout: float | timedelta | None = None,
    ) -> Coroutine[Any, Any, str]:
        """Start the workflow ``workflow`` as a child; return its id at once.

        A ``detached`` child outlives a cancel of this workflow; any other
        child is cancelled with it.
        """
        spec = children.ChildOptions(workflow, input, id, detached, seconds(timeout))
        return self._entry(lambda: children.run_child(self, name, spec, wait=False))

    def reply(
        self, name: str, message: Message | Mapping[str, Any] | str, value: Any = None
    ) -> Coroutine[Any, Any, None]:
        """Answer ``message`` (a request) with ``value``: sent once, never on replay.

        The caller of ``handle.request(...)`` that sent ``message`` gets
        ``value``.
        """
        return self._entry(lambda: published.run_reply(self, name, message, value))

    def set_event(self, key: str, value: Any) -> Coroutine[Any, Any, None]:
        """Publish ``value`` under ``key`` for ``handle.get_event``; last write wins.

        Each call is recorded (as the entry ``event:<key>``, then
        ``event:<key>#2``... within one scope), so a replay never publishes an
        older value again.
        """
        published.check_event_key(key)
        count = self._events.get(key, 0) + 1
        self._events[key] = count
        entry_name = published.event_entry_name(key, count)
        return self._entry(
            lambda: published.run_set_event(self, entry_name, key, value)
        )

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
        except RollbackStop as stop:
            if self._run.check and not stop.checked:
                # A replay check stops at the first entry history does not
                # have finished: what this scope recorded must have been
                # replayed by then, or the code changed (renamed, removed or
                # moved an entry; see ``check_replay``).
                stop.checked = True
                self._validate()
            raise
        finally:
            self._in_flight = None

    def _visit(self, name: str) -> keys.Location:
        """Return the location of ``name`` in this scope, refusing duplicates."""
        storage = self._run.storage
        if self._run.rollback and not self._run.check:
            index = storage.name_index(name)
            if index is None:
                raise RollbackStop()
        else:
            # A check registers new names in memory only (it never flushes):
            # get_version and removed go on where a run would, the other
            # entries stop there as new work.
            index = storage.register_name(name)
        location = (*self._scope, index)
        if location in self._run.visited:
            where = storage.location_string(self._scope) or "<root>"
            raise diverged(
                f'Duplicate entry name "{name}" in scope "{where}": every entry '
                "needs a unique name within its scope",
                storage.location_string(location),
            )
        self._run.visited.add(location)
        return location

    def _existing(self, location: keys.Location, kind: str) -> schema.Entry | None:
        entry = self._run.storage.entries.get(location)
        if entry is not None and entry.kind != kind:
            where = self._run.storage.location_string(location)
            raise diverged(
                f'Expected a {kind} at "{where}", history has a {entry.kind}', where
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
        if not self._run.rollback or self._run.check:
            self._validate()

    def _abandon(self) -> None:
        """Drop an entry that was started but never awaited."""
        if self._in_flight is not None:
            close_unstarted(self._in_flight)
            self._in_flight = None

    def _validate(self) -> None:
        """Refuse recorded entries of this scope the code did not visit."""
        run = self._run
        for location in run.storage.entries_under(self._scope):
            if location in run.visited:
                continue
            if any(location[:i] in run.covered for i in range(1, len(location))):
                continue
            where = run.storage.location_string(location)
            raise diverged(
                f'Entry "{where}" exists in history but was not visited: the '
                "workflow code changed. Use ctx.removed() to retire old entries.",
                where,
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
                raise diverged(
                    f'Expected a removed {original_type} at "{where}", history '
                    f"has a {entry.kind}",
                    where,
                )
            return
        if self._run.check:
            return  # the run would record a placeholder here and go on
        if self._run.rollback:
            raise RollbackStop()
        data = {"original_type": original_type, "original_name": name}
        complete(storage, storage.create_entry(location, "removed", data))

    async def _get_version(self, name: str, latest: int) -> int:
        location = self._visit(name)
        entry = self._existing(location, "version_check")
        if entry is not None:
            return int(entry.data["version"])
        if self._run.rollback and not self._run.check:
            raise RollbackStop()
        storage = self._run.storage
        # History recorded in this scope by an earlier run predates the gate:
        # that instance started on the old code, so it is pinned to version 1.
        loaded = storage.loaded_locations
        in_flight = any(loc in loaded for loc in storage.entries_under(self._scope))
        version = 1 if in_flight else int(latest)
        if self._run.check:
            return version  # what the run would record; a check writes nothing
        entry = storage.create_entry(location, "version_check", {"version": version})
        complete(storage, entry)
        return version


def close_unstarted(coroutine: Coroutine[Any, Any, Any]) -> None:
    # An entry coroutine that never started would warn "never awaited" at GC.
    if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
        coroutine.close()
