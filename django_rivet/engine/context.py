"""``WorkflowContext``: the ``ctx`` a workflow function receives.

Every call on the context is a named *entry* at a *location* (the path of
names from the root, with ``~N`` for loop iterations). The first run records
each entry; later runs replay recorded entries instead of redoing the work.

The context is the public face of one :class:`~.scope.Scope`: each method
checks its arguments and hands the entry to the engine's part that runs it
(:mod:`.steps`, :mod:`.flow`, :mod:`.messages`, :mod:`.children`,
:mod:`.published`, :mod:`.entries`), which takes the scope. Each returns
its awaitable synchronously after claiming the scope, so a second entry
started before the first was awaited fails at once with
:class:`EntryInProgressError`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Unpack

from django_rivet import clock

from . import (
    children,
    entries,
    flow,
    messages,
    published,
    schema,
    shapes,
    steps,
    streams,
)
from .execution import Run
from .scope import Scope
from .values import FirstFinished, Message, Queued, StepResult, seconds

__all__ = ["WorkflowContext"]


DEFAULT_TRY_CATCH = ("critical", "timeout", "exhausted", "join", "race", "child")


class WorkflowContext:
    """The durable API a workflow function calls, bound to one scope of one run.

    See the workflows guide (``workflows.md``) for every entry.
    """

    def __init__(self, scope: Scope) -> None:
        self._scope = scope
        self.messages = messages.Messages(scope)

    @classmethod
    def root_scope(cls, run: Run) -> Scope:
        """Return the root scope of ``run``, whose ``context`` is a new ctx."""
        return Scope(run, make_context=cls)

    # Identity ----------------------------------------------------------------

    @property
    def workflow_id(self) -> str:
        """Return the id of the running workflow."""
        return self._scope.run.workflow_id

    def is_evicted(self) -> bool:
        """Return whether the host asked this run to stop."""
        return self._scope.run.evicted()

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
        options = steps.step_options(
            max_retries,
            retry_backoff_base,
            retry_backoff_max,
            timeout,
            retry_on_timeout,
            rollback,
            ephemeral,
            transaction,
        )
        # A return annotation: the result is recorded as a value of the
        # domain, and given back as the annotated type (first run and replays).
        run = shapes.stepper(fn, steps.run_step, shapes.run_typed_step)
        return self._scope.enter(lambda: run(self._scope, name, fn, options))

    def try_step(
        self, name: str, fn: Callable[[], Any], **options: Any
    ) -> Coroutine[Any, Any, StepResult[Any]]:
        """Run a step like :meth:`step`, returning failures as a ``StepResult``."""
        opts = steps.StepOptions(**options)
        run = shapes.stepper(fn, steps.try_step, shapes.try_typed_step)
        return self._scope.enter(lambda: run(self._scope, name, fn, opts))

    def try_block(
        self,
        name: str,
        fn: Callable[[WorkflowContext], Any],
        *,
        catch: Iterable[str | type[BaseException]] = DEFAULT_TRY_CATCH,
    ) -> Coroutine[Any, Any, StepResult[Any]]:
        """Run ``fn(ctx)`` as a scope; step, join and race failures become results."""
        return self._scope.enter(
            lambda: flow.run_try_block(self._scope, name, fn, tuple(catch))
        )

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
        return self._scope.enter(
            lambda: flow.run_loop(
                self._scope, name, fn, state, history_prune_interval, size
            )
        )

    def join(
        self, name: str, branches: dict[str, Callable[[WorkflowContext], Any]]
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """Run every branch in parallel and return their outputs by name."""
        return self._scope.enter(
            lambda: flow.run_join(self._scope, name, dict(branches))
        )

    def race(
        self, name: str, branches: dict[str, Callable[[WorkflowContext], Any]]
    ) -> Coroutine[Any, Any, tuple[str, Any]]:
        """Run branches in parallel; return ``(winner, value)`` of the first."""
        return self._scope.enter(
            lambda: flow.run_race(self._scope, name, dict(branches))
        )

    def sleep(
        self, name: str, duration: float | timedelta
    ) -> Coroutine[Any, Any, None]:
        """Sleep durably for ``duration`` (seconds or a timedelta)."""
        seconds = (
            duration.total_seconds()
            if isinstance(duration, timedelta)
            else float(duration)
        )
        return self._scope.enter(
            lambda: entries.run_sleep(self._scope, name, lambda: clock.now() + seconds)
        )

    def sleep_until(
        self, name: str, moment: float | datetime
    ) -> Coroutine[Any, Any, None]:
        """Sleep durably until ``moment`` (a datetime or epoch seconds)."""
        deadline = (
            clock.to_timestamp(moment) if isinstance(moment, datetime) else moment
        )
        return self._scope.enter(
            lambda: entries.run_sleep(self._scope, name, lambda: float(deadline))
        )

    def rollback_checkpoint(self, name: str) -> Coroutine[Any, Any, None]:
        """Mark where rollbacks start; steps with ``rollback=`` need one first."""
        return self._scope.enter(
            lambda: entries.run_rollback_checkpoint(self._scope, name)
        )

    def removed(self, name: str, original_type: str) -> Coroutine[Any, Any, None]:
        """Stand in for an entry the code no longer makes, so replays still match."""
        if original_type not in schema.ENTRY_KINDS:
            raise ValueError(f"Unknown entry kind {original_type!r}")
        return self._scope.enter(
            lambda: entries.run_removed(self._scope, name, original_type)
        )

    def get_version(self, name: str, latest: int) -> Coroutine[Any, Any, int]:
        """Return ``latest`` for new work, 1 where history predates this gate."""
        return self._scope.enter(
            lambda: entries.run_get_version(self._scope, name, latest)
        )

    # Children, replies and published values -----------------------------------

    def child(
        self,
        name: str,
        workflow: str,
        input: Any = None,
        *,
        id: str | None = None,
        timeout: float | timedelta | None = None,
        **queued: Unpack[Queued],
    ) -> Coroutine[Any, Any, Any]:
        """Start the workflow ``workflow`` as a child and wait for its output.

        The child's id defaults to ``"<this workflow's id>/<location>"``, so a
        replay finds the same child instead of starting another. The wait is
        durable (the parent sleeps until the child ends). A child that fails
        or is cancelled raises :class:`ChildWorkflowError` here. A cancel of
        this workflow cancels the child (its rollbacks run). ``queue``,
        ``priority``, ``dedup_key`` and ``partition_key`` start it through a
        workflow queue, as ``workflows.start`` does.
        """
        spec = children.ChildOptions(
            workflow, input, id, False, seconds(timeout), queued or None
        )
        return self._scope.enter(
            lambda: children.run_child(self._scope, name, spec, wait=True)
        )

    def start_child(
        self,
        name: str,
        workflow: str,
        input: Any = None,
        *,
        id: str | None = None,
        detached: bool = False,
        timeout: float | timedelta | None = None,
        **queued: Unpack[Queued],
    ) -> Coroutine[Any, Any, str]:
        """Start the workflow ``workflow`` as a child; return its id at once.

        A ``detached`` child outlives a cancel of this workflow; any other
        child is cancelled with it. With ``queue`` (and ``priority``,
        ``dedup_key``, ``partition_key``) it is enqueued durably: it starts
        when the queue's limits let it.
        """
        spec = children.ChildOptions(
            workflow, input, id, detached, seconds(timeout), queued or None
        )
        return self._scope.enter(
            lambda: children.run_child(self._scope, name, spec, wait=False)
        )

    def wait_first(
        self, name: str, workflow_ids: Sequence[str]
    ) -> Coroutine[Any, Any, FirstFinished]:
        """Wait for the first of ``workflow_ids`` to end; return it and how.

        Durable, like ``ctx.child``'s wait, and recorded: a replay returns
        the same one. A :class:`FirstFinished` (``child_id``, ``state``,
        ``output``, ``error``); a child that failed is returned, not raised.
        """
        ids = list(workflow_ids)
        return self._scope.enter(lambda: children.wait_first(self._scope, name, ids))

    def reply(
        self, name: str, message: Message | Mapping[str, Any] | str, value: Any = None
    ) -> Coroutine[Any, Any, None]:
        """Answer ``message`` (a request) with ``value``: sent once, never on replay.

        The caller of ``handle.request(...)`` that sent ``message`` gets
        ``value``.
        """
        return self._scope.enter(
            lambda: published.run_reply(self._scope, name, message, value)
        )

    def set_event(self, key: str, value: Any) -> Coroutine[Any, Any, None]:
        """Publish ``value`` under ``key`` for ``handle.get_event``; last write wins.

        Each call is recorded (as the entry ``event:<key>``, then
        ``event:<key>#2``... within one scope), so a replay never publishes an
        older value again.
        """
        published.check_event_key(key)
        count = self._scope.count_event(key)
        entry_name = published.event_entry_name(key, count)
        return self._scope.enter(
            lambda: published.run_set_event(self._scope, entry_name, key, value)
        )

    # Streams ---------------------------------------------------------------------

    def write_stream(self, key: str, value: Any) -> Coroutine[Any, Any, None]:
        """Append ``value`` to the stream ``key``; readers follow it as it grows.

        From the workflow body a value is written exactly once, however often
        the workflow replays; from inside a step (an ``async`` step function)
        at least once: a retried step writes its values again. Values commit
        in groups, within about 20 ms (``workflows.md``, "Streams").
        """
        return self._stream(key, value, close=False)

    def close_stream(self, key: str) -> Coroutine[Any, Any, None]:
        """Close the stream ``key``: its readers end after its last value."""
        return self._stream(key, None, close=True)

    def _stream(
        self, key: str, value: Any, *, close: bool
    ) -> Coroutine[Any, Any, None]:
        streams.check_stream_key(key)
        scope = self._scope
        if streams.step_running():
            return streams.run_stream_write(scope, key, value, None, close)
        count = scope.count_stream("close" if close else "write", key)
        return scope.enter(
            lambda: streams.run_stream_write(scope, key, value, count, close)
        )
