"""Run a workflow function against a driver: replay, pause, fail, roll back.

``run_workflow`` executes the function once (``mode="yield"``): it returns as
soon as the workflow completes, fails, or pauses (a long sleep, a message
wait, a retry backoff), after flushing and setting the driver alarm. With
``mode="live"`` it keeps the workflow in this process instead, waiting for the
deadline or a message and replaying again, until it completes or fails.
Either way a later call with the same id and driver resumes by replay.

``live_wait`` (seconds, either mode) opens a live window at each wait: the
wait happens inside the running coroutine, which goes on without replaying
when what it waits for comes within the window (``engine.live``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Literal

from django_rivet import clock

from . import history, keys, schema
from .context import WorkflowContext
from .driver import EngineDriver
from .errors import (
    EvictedError,
    RollbackCheckpointError,
    StepOutputError,
    StorageError,
    StorageLimitError,
    WorkflowCancelled,
    WorkflowInterrupt,
    cancellation,
    error_from_info,
    error_info,
    was_reported,
)
from .execution import Run, emit
from .fields import UNSET
from .live import LiveWindow
from .messages import ANY_MESSAGE
from .ops import (
    WorkflowSnapshot,
    cancel_workflow,
    finished_outcome,
    read_workflow,
    recover_workflow,
)
from .rollback import run_rollbacks
from .shapes import workflow_shapes
from .storage import Storage, driver_call
from .values import (
    ErrorHook,
    WorkflowErrorEvent,
    WorkflowOutcome,
)

__all__ = ["WorkflowRun", "run_workflow", "start_workflow"]

logger = logging.getLogger("django_rivet.workflow")

Mode = Literal["yield", "live"]
WorkflowFn = Callable[[WorkflowContext, Any], Awaitable[Any]]
HistoryHook = Callable[[list[history.HistoryEntry]], Any]
ReplyHook = Callable[[str], None]


async def run_workflow(
    workflow_id: str,
    fn: WorkflowFn,
    input: Any,
    driver: EngineDriver,
    mode: Mode = "yield",
    on_error: ErrorHook | None = None,
    *,
    on_history: HistoryHook | None = None,
    on_reply: ReplyHook | None = None,
    cancel: str | None = None,
    live_wait: float = 0.0,
) -> WorkflowOutcome:
    """Run (or resume) workflow ``workflow_id`` and return where it stands.

    ``cancel`` (a reason: ``cancelled``, ``parent_cancelled``, ``timeout``)
    cancels it instead: the rollback handlers of its completed steps run,
    newest first, then it ends ``cancelled`` (``rolling_back`` if a handler
    failed; a later run with ``cancel`` again or without retries it).
    ``on_reply(message_id)`` hears of each reply recorded (``ctx.reply``).
    ``live_wait`` (seconds, 0: off) waits in process that long at each wait
    before unwinding (``engine.live``).
    """
    return await start_workflow(
        workflow_id, fn, input, driver, mode, on_error,
        on_history=on_history, on_reply=on_reply, cancel=cancel,
        live_wait=live_wait,
    )  # fmt: skip


def start_workflow(
    workflow_id: str,
    fn: WorkflowFn,
    input: Any,
    driver: EngineDriver,
    mode: Mode = "yield",
    on_error: ErrorHook | None = None,
    *,
    on_history: HistoryHook | None = None,
    on_reply: ReplyHook | None = None,
    cancel: str | None = None,
    live_wait: float = 0.0,
    live_budget: float | None = None,
) -> WorkflowRun:
    """Start running a workflow in a task; await the returned run for its outcome."""
    run = WorkflowRun(
        workflow_id, fn, input, driver, mode, on_error, on_history,
        on_reply=on_reply, cancel=cancel, live_wait=live_wait,
        live_budget=live_budget,
    )  # fmt: skip
    run.start()
    return run


class WorkflowRun:
    """One in-process run of a workflow, with controls for the host.

    ``await run`` (or ``await run.result()``) gives the :class:`WorkflowOutcome`.
    ``live`` is the run's live window (None without ``live_wait``);
    ``live_budget`` bounds its total time live (see ``engine.live``).
    """

    def __init__(
        self,
        workflow_id: str,
        fn: WorkflowFn,
        input: Any,
        driver: EngineDriver,
        mode: Mode = "yield",
        on_error: ErrorHook | None = None,
        on_history: HistoryHook | None = None,
        *,
        on_reply: ReplyHook | None = None,
        cancel: str | None = None,
        live_wait: float = 0.0,
        live_budget: float | None = None,
    ) -> None:
        if mode not in ("yield", "live"):
            raise ValueError(f"mode must be 'yield' or 'live', not {mode!r}")
        if cancel is not None:
            cancellation(cancel)  # refuse an unknown reason now
        self.workflow_id = workflow_id
        self.fn = fn
        self.input = input
        self.driver = driver
        self.mode = mode
        self.on_error = on_error
        self.on_history = on_history
        self.on_reply = on_reply
        self.cancel_reason = cancel
        self._eviction = asyncio.Event()
        self._wake = asyncio.Event()
        self._cancelled = False
        self._task: asyncio.Task[WorkflowOutcome] | None = None
        self._storage: Storage | None = None
        self.live = LiveWindow(live_wait, live_budget) if live_wait > 0 else None

    def start(self) -> None:
        """Start the run in a task of the running event loop."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._main())

    async def result(self) -> WorkflowOutcome:
        """Wait for and return the outcome."""
        self.start()
        assert self._task is not None
        return await asyncio.shield(self._task)

    def __await__(self) -> Generator[Any, None, WorkflowOutcome]:
        return self.result().__await__()

    def evict(self) -> None:
        """Ask the run to stop at the next entry; it can resume elsewhere."""
        self._eviction.set()
        self._wake.set()

    def end_live(self) -> None:
        """Close the live window: a wait in it unwinds (as past its end) now."""
        if self.live is not None:
            self.live.close()

    async def cancel(self) -> None:
        """Cancel the workflow for good and stop this run."""
        self._cancelled = True
        self.evict()
        await cancel_workflow(self.workflow_id, self.driver)

    async def wake(self) -> None:
        """Wake a sleeping workflow now (live: this run; yield: via the alarm)."""
        self._wake.set()
        if self.mode == "yield":
            await self.driver.set_alarm(self.workflow_id, clock.now())

    async def send(self, name: str, body: Any = None) -> str:
        """Send a message to the workflow and wake it."""
        message_id = await self.driver.add_message(name, body)
        self._wake.set()
        return message_id

    async def snapshot(self) -> WorkflowSnapshot:
        """Return the stored state, output, error and input."""
        return await read_workflow(self.driver)

    async def recover(self) -> bool:
        """Reset a failed workflow's failed steps so that it runs again."""
        recovered = await recover_workflow(self.workflow_id, self.driver)
        self._wake.set()
        return recovered

    # Execution ------------------------------------------------------------------

    async def _main(self) -> WorkflowOutcome:
        while True:
            self._wake.clear()
            try:
                outcome = await self._execute()
            finally:  # nothing of this run may write after it ended
                if self._storage is not None:
                    self._storage.streams.stop()
            if self._cancelled and outcome.state != "cancelled":
                outcome = await self._finish_cancelled()
            if (
                self.mode == "yield"
                or outcome.state != "sleeping"
                or self._eviction.is_set()
            ):
                return outcome
            await self._wait(outcome)
            if self._eviction.is_set() and not self._cancelled:
                return outcome

    async def _finish_cancelled(self) -> WorkflowOutcome:
        await cancel_workflow(self.workflow_id, self.driver)
        return WorkflowOutcome("cancelled")

    async def _wait(self, outcome: WorkflowOutcome) -> None:
        """Block until the deadline, a matching message, a wake or an eviction."""
        waits: list[Awaitable[Any]] = [self._wake.wait()]
        if outcome.sleep_until is not None:
            waits.append(clock.wait_until(outcome.sleep_until))
        names = None
        if outcome.waiting_for:
            names = None if ANY_MESSAGE in outcome.waiting_for else outcome.waiting_for
            waiter = getattr(self.driver, "wait_for_messages", None)
            if waiter is not None:
                waits.append(waiter(names))
            else:
                poll = self.driver.worker_poll_interval
                waits.append(clock.wait_until(clock.now() + poll))
        tasks = [asyncio.ensure_future(wait) for wait in waits]
        try:
            await asyncio.sleep(0)  # let waiters register before the last check
            if outcome.waiting_for:
                arrived = await driver_call(
                    self.driver.receive_messages(names, 1, True), "receive messages"
                )
                if arrived:
                    return
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _execute(self) -> WorkflowOutcome:
        storage = self._storage = await Storage.load(self.driver)
        if self.on_history is not None:
            hook = self.on_history
            storage.on_flush = lambda: hook(_history(storage))
        if storage.state == "cancelled":
            return WorkflowOutcome("cancelled")
        previously_failed = storage.state == "failed"
        typed = workflow_shapes(self.fn)
        if not storage.has_field(keys.WORKFLOW_INPUT):
            try:
                stored = schema.roundtrip(
                    typed.dump_input(self.input, StepOutputError), "Workflow input"
                )
                storage.set_field(keys.WORKFLOW_INPUT, stored)
            except (StepOutputError, StorageLimitError) as error:
                return await self._fail(
                    storage, error, None, previously_failed, roll_back=False
                )
        input = storage.get_field(keys.WORKFLOW_INPUT)
        if self.cancel_reason is not None and storage.state not in (
            "rolling_back",
            "completed",
            "failed",
        ):
            return await self._cancel(storage, input, self.cancel_reason)
        if storage.state == "rolling_back":
            stored_error = error_from_info(storage.get_field(keys.WORKFLOW_ERROR))
            return await self._roll_back(storage, input, stored_error, False)
        if self.cancel_reason is not None:
            # It finished before the cancel reached it: that stands.
            return finished_outcome(storage)

        run = self._new_run(storage, rollback=False)
        scope = WorkflowContext.root_scope(run)
        storage.state = "running"
        try:
            output = await self.fn(scope.context, typed.load_input(input))
            scope.finish()
            output = schema.roundtrip(typed.dump_output(output), "Workflow output")
            storage.set_field(keys.WORKFLOW_OUTPUT, output)
        except WorkflowInterrupt as pause:
            return await self._pause(storage, pause)
        except StorageError:
            raise  # infrastructure, not the workflow's failure: the host retries
        except Exception as error:
            return await self._fail(storage, error, input, previously_failed)
        finally:
            scope.abandon()
        storage.state = "completed"
        storage.set_field(keys.WORKFLOW_ERROR, UNSET)
        try:
            await self._last_flush(storage)
        except StorageLimitError as error:
            return await self._fail(storage, error, input, previously_failed)
        await self._alarm(None)
        logger.debug("workflow completed workflow=%s", self.workflow_id)
        return WorkflowOutcome("completed", output=output)

    async def _last_flush(self, storage: Storage) -> None:
        """Flush what the run ends with (a driver may hold it: see driver)."""
        defer = getattr(self.driver, "defer_next_batch", None)
        if defer is not None:
            defer()
        await storage.flush()

    async def _alarm(self, wake_at: float | None) -> None:
        """Set the driver alarm at ``wake_at``, or clear it for None."""
        if wake_at is None:
            call = self.driver.clear_alarm(self.workflow_id)
        else:
            call = self.driver.set_alarm(self.workflow_id, wake_at)
        await driver_call(call, "alarm")

    def _new_run(self, storage: Storage, *, rollback: bool) -> Run:
        return Run(
            self.workflow_id,
            storage,
            self.driver,
            rollback=rollback,
            eviction=self._eviction,
            on_error=self.on_error,
            on_reply=self.on_reply,
            live=None if rollback else self.live,
        )

    async def _cancel(
        self, storage: Storage, input: Any, reason: str
    ) -> WorkflowOutcome:
        """Record the cancellation and roll back; it ends ``cancelled``."""
        error = cancellation(reason)
        storage.set_field(keys.WORKFLOW_ERROR, error_info(error))
        storage.state = "rolling_back"
        await storage.flush()
        logger.info(
            "workflow cancelling workflow=%s reason=%s", self.workflow_id, reason
        )
        return await self._roll_back(storage, input, error, False)

    async def _pause(
        self, storage: Storage, pause: WorkflowInterrupt
    ) -> WorkflowOutcome:
        storage.state = "sleeping"
        try:
            await self._last_flush(storage)
        except StorageLimitError as error:
            input = storage.get_field(keys.WORKFLOW_INPUT)
            return await self._fail(storage, error, input, False)
        if isinstance(pause, EvictedError):
            # Another worker should pick the workflow up again right away.
            now = clock.now()
            await self._alarm(now)
            return WorkflowOutcome("sleeping", sleep_until=now)
        await self._alarm(pause.deadline)
        logger.debug(
            "workflow sleeping workflow=%s until=%s waiting_for=%s",
            self.workflow_id,
            pause.deadline,
            pause.names,
        )
        return WorkflowOutcome(
            "sleeping", sleep_until=pause.deadline, waiting_for=list(pause.names)
        )

    async def _fail(
        self,
        storage: Storage,
        error: Exception,
        input: Any,
        previously_failed: bool,
        *,
        roll_back: bool = True,
    ) -> WorkflowOutcome:
        logger.info("workflow failed workflow=%s error=%r", self.workflow_id, error)
        storage.set_field(keys.WORKFLOW_ERROR, error_info(error))
        # A step with a rollback handler but no checkpoint fails without
        # rollback, and so does a run whose changes the driver refused as too
        # large (nothing would record the rollback's progress).
        roll_back = roll_back and not isinstance(error, RollbackCheckpointError)
        refused = await self._flush_failure(
            storage, "rolling_back" if roll_back else "failed"
        )
        if refused or not roll_back:
            await self._report_failure(error, previously_failed)
            return WorkflowOutcome("failed", error=error)
        return await self._roll_back(storage, input, error, previously_failed)

    async def _flush_failure(self, storage: Storage, state: str) -> bool:
        """Flush with ``state``; True if the driver refused it as too large.

        Then only the workflow fields are written, as ``failed``: the
        failure itself is always recorded, never retried forever.
        """
        storage.state = state
        try:
            if state == "failed":
                await self._last_flush(storage)
            else:
                await storage.flush()
        except StorageLimitError as exc:
            logger.warning(
                "workflow changes refused as too large workflow=%s error=%r",
                self.workflow_id,
                exc,
            )
            storage.state = "failed"
            await storage.flush(only_fields=True)
            return True
        return False

    async def _report_failure(self, error: BaseException, repeated: bool) -> None:
        # A step's terminal failure was reported by the step (once).
        if not repeated and not was_reported(error):
            await emit(self.on_error, WorkflowErrorEvent(self.workflow_id, error))

    async def _roll_back(
        self,
        storage: Storage,
        input: Any,
        error: BaseException,
        previously_failed: bool,
    ) -> WorkflowOutcome:
        """Run rollback handlers of completed steps, newest first; resumable."""
        run = self._new_run(storage, rollback=True)
        stopped = await run_rollbacks(run, self.fn, input, error)
        if stopped is not None:
            return stopped
        if isinstance(error, WorkflowCancelled):
            # A cancellation (a cancel, a parent's cancel, a deadline) rolls
            # back like a failure but ends cancelled, reported nowhere.
            storage.state = "cancelled"
            await storage.flush()
            return WorkflowOutcome("cancelled", error=error)
        storage.state = "failed"
        await storage.flush()
        await self._report_failure(error, previously_failed)
        return WorkflowOutcome("failed", error=error)


def _history(storage: Storage) -> list[history.HistoryEntry]:
    entries = sorted(storage.entries.values(), key=lambda entry: entry.seq)
    return [
        history.history_entry(entry, storage.metadata.get(entry.id), storage.names)
        for entry in entries
    ]
