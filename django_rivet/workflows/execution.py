"""Running workflows: claim, run until they pause, release.

:func:`run` is what the Celery task ``rivet.run_workflow``, the in-process
worker and ``testing.run_until_idle`` call. It claims the workflow's lease
(skipping it when another worker holds it or it is not due), runs the engine
in yield mode on a loop private to this thread until the workflow completes,
fails or pauses, and records on release where it stopped: the status, when
to wake (a sleep's deadline, a retry backoff, a message timeout) and which
messages it waits for; :mod:`.wakeups` makes it run again then.

Infrastructure trouble never fails a workflow: a storage outage, an unknown
workflow name (a worker running older code) or a raising rollback handler
release it with a retry after a backoff, and the next run resumes by replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

from .. import clock, observability
from ..engine import (
    StepErrorEvent,
    StorageError,
    WorkflowDefinition,
    WorkflowOutcome,
    WorkflowRun,
    cancel_workflow,
    start_workflow,
)
from ..engine.errors import cancellation
from ..exceptions import WorkflowNotFound
from ..models import Workflow, WorkflowStatus, db
from . import cancels, capacity, endings, leases, live, registry, versions
from .blocking import run_private
from .driver import DjangoDriver, LeaseLost
from .leases import Heartbeat, Lease
from .releases import (
    cancel_pending,
    release,
    release_for_retry,
    release_outcome,
    retry_delay,
)
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "MAX_PASSES",
    "cancel_claimed",
    "release",
    "retry_delay",
    "run",
    "run_due",
    "run_private",
    "run_if_idle",
]

# Runs of one workflow per call while it stays due at once (an eviction, a
# message arriving mid-run); then it goes back to the queue behind others.
MAX_PASSES = 20

T = TypeVar("T")


def run_if_idle(
    workflow_id: str,
    status: str,
    engine_call: Callable[[str, DjangoDriver], Coroutine[Any, Any, bool]],
) -> tuple[Lease, DjangoDriver] | None:
    """Run ``engine_call(workflow_id, driver)`` on an unheld workflow in ``status``.

    For the operations outside runs that rewrite history (recover, resume):
    the workflow's lease is taken first, so no worker runs it meanwhile.
    Returns the held lease and the driver when the engine call changed
    something (the caller releases the lease with the fields it sets);
    ``None``, changing nothing, when the workflow is in another status, a
    worker holds it, or the engine call declined.
    """
    found = Workflow.objects.filter(pk=workflow_id).values_list("status").first()
    if found is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    if found[0] != status:
        return None
    lease = leases.claim(workflow_id, run=False)
    if lease is None:
        return None
    driver = DjangoDriver(
        workflow_id, lease_token=lease.token, stop_on_cancel=False, private_loop=True
    )
    try:
        changed = run_private(engine_call(workflow_id, driver))
    except BaseException:
        leases.release(lease)
        raise
    if not changed:
        leases.release(lease)
        return None
    return lease, driver


# -- runs ------------------------------------------------------------------------------
def run(
    workflow_id: str,
    *,
    max_passes: int = MAX_PASSES,
    stop_after_reply: str | None = None,
    live_wait: float | None = None,
) -> str | None:
    """Run ``workflow_id`` while it is due; return its status after the last run.

    Returns None when nothing ran (not due, finished, unknown, or another
    worker holds it). Never raises for the workflow's own failures.
    ``stop_after_reply`` (a message id) ends the run right after the reply
    to that message is recorded (what a waiting ``handle.request`` runs);
    the workflow is then due again, for a worker to go on with. A workflow
    whose queue's ``worker_concurrency`` this process has reached is not
    run here (:mod:`.capacity`). ``live_wait``: the live window of its
    waits in seconds (0: none), ``RIVET["WORKFLOW_LIVE_WAIT"]`` by default.
    """
    with capacity.slot(workflow_id) as room:
        if not room:
            capacity.defer(workflow_id)
            return None
        return _run(workflow_id, max_passes, stop_after_reply, live_wait)


def _run(
    workflow_id: str,
    max_passes: int,
    stop_after_reply: str | None,
    live_wait: float | None = None,
) -> str | None:
    status = None
    went_live = False
    for _ in range(max_passes):
        lease = leases.claim(workflow_id)
        if lease is None:
            return status
        # Per pass: a worker shutting down closes the windows to come, and
        # one live pass per call (its budget, live.budget()) bounds how long
        # a chatty workflow holds this worker; the passes after it replay
        # and yield (the next dispatch runs it live again).
        if went_live:
            window = 0.0
        else:
            window = live.window() if live_wait is None else live_wait
            went_live = window > 0
        run_claimed = functools.partial(
            _run_claimed, stop_after_reply=stop_after_reply, live_wait=window
        )
        status, wake_at = observability.workflow_run(run_claimed, lease)
        if wake_at is None or clock.to_timestamp(wake_at) > clock.now():
            return status
    # Still due after many passes: yield the worker to other workflows.
    now = clock.now_datetime()
    with db.atomic():
        rows = Workflow.objects.filter(pk=workflow_id, lease_token="")
        if rows.update(wake_at=now, **wake_fields(now)):
            schedule_wake(workflow_id, now)
    return status


def _cancel_reason(lease: Lease) -> str | None:
    """Return why the claimed workflow must be cancelled now, if it must."""
    if lease.cancel_requested:
        return lease.cancel_reason or "cancelled"
    if lease.deadline_at is not None and lease.deadline_at <= clock.now_datetime():
        return "timeout"
    if lease.parent_id and not lease.detached:
        # The cascade's safety net: the parent's request may have been lost.
        if cancels.parent_cancelled(lease.parent_id):
            return "parent_cancelled"
    return None


def _run_claimed(
    lease: Lease, stop_after_reply: str | None = None, live_wait: float = 0.0
) -> tuple[str, datetime | None]:
    """Run a claimed workflow once and release it; return (status, wake_at)."""
    reason = _cancel_reason(lease)
    if reason is not None:
        return cancel_claimed(lease, reason)
    try:
        definition = registry.get(lease.name)
    except WorkflowNotFound:
        logger.error(
            "workflow definition missing workflow=%s name=%s",
            lease.workflow_id,
            lease.name,
        )
        return release_for_retry(lease, f"Unknown workflow name {lease.name!r}")
    late_ms = 0.0
    if lease.wake_at is not None:
        late_ms = max(0.0, (clock.now() - clock.to_timestamp(lease.wake_at)) * 1000)
    driver = DjangoDriver(
        lease.workflow_id,
        lease_token=lease.token,
        private_loop=True,
        history_mark=lease.history_mark,
    )
    failed = _drive_claimed(
        lease,
        definition,
        driver,
        stop_after_reply=stop_after_reply,
        live_wait=live_wait,
    )
    if isinstance(failed, tuple):
        return failed
    outcome = failed
    logger.info(
        "workflow ran workflow=%s name=%s state=%s late_ms=%.0f",
        lease.workflow_id,
        lease.name,
        outcome.state,
        late_ms,
    )
    return release_outcome(lease, driver, outcome)


def _drive_claimed(
    lease: Lease,
    definition: WorkflowDefinition,
    driver: DjangoDriver,
    *,
    cancel: str | None = None,
    stop_after_reply: str | None = None,
    live_wait: float = 0.0,
) -> WorkflowOutcome | tuple[str, datetime | None]:
    """Run the engine on a claimed workflow, with a heartbeat.

    Returns the outcome, or what releasing the lease returned when the run
    broke on infrastructure trouble (the workflow is retried later).
    """
    heartbeat = Heartbeat(lease, on_lost=lambda: None)
    # A cancel's run that breaks leaves the workflow cancelled, its cancel
    # still to be carried out by the next run.
    fields: dict[str, Any] = {}
    if cancel is not None:
        fields = {**cancel_pending(cancel), "error": endings.cancel_error(cancel)}
    try:
        return run_private(
            _drive(
                lease,
                definition,
                driver,
                heartbeat,
                cancel=cancel,
                stop_after_reply=stop_after_reply,
                live_wait=live_wait,
            )
        )
    except StorageError as exc:
        if _lease_lost(exc):
            # Fenced out: a cancel was requested (the next claim carries it
            # out) or a successor took over after our lease expired.
            logger.info("workflow run fenced out workflow=%s", lease.workflow_id)
            return release(lease, **{"status": WorkflowStatus.SLEEPING, **fields})
        logger.warning(
            "workflow storage error workflow=%s error=%s", lease.workflow_id, exc
        )
        return release_for_retry(lease, str(exc), **fields)
    except Exception as exc:
        logger.exception("workflow run crashed workflow=%s", lease.workflow_id)
        return release_for_retry(lease, f"{type(exc).__name__}: {exc}", **fields)
    finally:
        heartbeat.stop()
        driver.close_handoff()


def _lease_lost(error: BaseException) -> bool:
    """Tell whether ``error`` comes from a write refused by the lease check.

    The engine wraps any flush failure in a plain ``StorageError``; the
    refusal is its cause.
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, LeaseLost):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _drive(
    lease: Lease,
    definition: WorkflowDefinition,
    driver: DjangoDriver,
    heartbeat: Heartbeat,
    *,
    cancel: str | None = None,
    stop_after_reply: str | None = None,
    live_wait: float = 0.0,
) -> WorkflowOutcome:
    runs: list[WorkflowRun] = []
    heartbeating = not db.in_atomic_block()
    if not heartbeating or cancel is not None or stop_after_reply is not None:
        # No live window: inside a caller's transaction (no heartbeat keeps
        # the lease, and the transaction would stay open), for a cancel's
        # rollbacks, or for a requester waiting for its reply.
        live_wait = 0.0

    def on_reply(message_id: str) -> None:
        if message_id == stop_after_reply:
            runs[0].evict()  # the requester has its reply: stop here

    # The input was stored when the workflow started; the engine reads it.
    run = start_workflow(
        lease.workflow_id,
        definition.fn,
        None,
        driver,
        "yield",
        on_error=_log_event,
        on_reply=on_reply if stop_after_reply is not None else None,
        cancel=cancel,
        live_wait=live_wait,
        live_budget=live.budget(live_wait),
    )
    runs.append(run)
    loop = asyncio.get_running_loop()

    def evict() -> None:
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(run.evict)

    heartbeat.on_lost = evict
    if heartbeating:
        # Inside a caller's transaction (a request from an actor action)
        # nobody else can see or take the claim before it commits, and a
        # heartbeat on another connection would wait on our own row lock.
        heartbeat.start()
    timer = None
    if lease.deadline_at is not None and cancel is None:
        # Stop at the deadline (at the next entry): the next claim cancels.
        deadline = clock.to_timestamp(lease.deadline_at)
        timer = asyncio.ensure_future(_evict_at(deadline, run))
    try:
        with live.track(run):  # a worker shutting down closes its window
            return await run
    finally:
        if timer is not None:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)


async def _evict_at(deadline: float, run: WorkflowRun) -> None:
    await clock.wait_until(deadline)
    run.evict()


def _log_event(event: Any) -> None:
    if isinstance(event, StepErrorEvent):
        logger.info(
            "workflow step attempt failed workflow=%s step=%s attempt=%s "
            "will_retry=%s error=%r",
            event.workflow_id,
            event.step_name,
            event.attempt,
            event.will_retry,
            event.error,
        )
    else:
        logger.warning(
            "workflow error workflow=%s event=%s error=%r",
            event.workflow_id,
            type(event).__name__,
            event.error,
        )


def cancel_claimed(
    lease: Lease, reason: str = "cancelled"
) -> tuple[str, datetime | None]:
    """Cancel the claimed workflow for good (its rollbacks run) and release it.

    ``reason`` is ``cancelled``, ``parent_cancelled`` or ``timeout``. A
    rollback handler that raises leaves it ``cancelled`` with its cancel
    still pending (``cancel_requested``), retried later like any rollback.
    """
    driver = DjangoDriver(
        lease.workflow_id,
        lease_token=lease.token,
        stop_on_cancel=False,
        private_loop=True,
        history_mark=lease.history_mark,
    )
    try:
        definition = registry.get(lease.name)
    except WorkflowNotFound:
        definition = None
    if definition is None:
        # No code to roll back with (a worker on older code): just stop it.
        run_private(cancel_workflow(lease.workflow_id, driver))
        outcome = WorkflowOutcome("cancelled", error=cancellation(reason))
    else:
        result = _drive_claimed(lease, definition, driver, cancel=reason)
        if isinstance(result, tuple):
            return result  # retried later; the row still asks for the cancel
        outcome = result
    logger.info(
        "workflow cancelled workflow=%s reason=%s state=%s",
        lease.workflow_id,
        reason,
        outcome.state,
    )
    if outcome.state == "rolling_back":
        return release_for_retry(
            lease,
            f"Rollback failed: {outcome.error!r}",
            error=endings.cancel_error(reason),
            **cancel_pending(reason),
        )
    if outcome.state != "cancelled" and lease.cancel_requested:
        # It finished after cancel() returned, before the cancel reached it
        # (between its last write and its release): the cancel stands, as
        # the caller was told, with nothing to roll back.
        run_private(cancel_workflow(lease.workflow_id, driver))
        outcome = WorkflowOutcome("cancelled", error=cancellation(reason))
    cleared: dict[str, Any] = {"cancel_requested": False}
    if outcome.state == "cancelled":
        cleared["cancel_reason"] = reason  # else it finished before the cancel
    return release_outcome(lease, driver, outcome, **cleared)


# -- due work (the in-process worker, run_due) -----------------------------------------
def run_due(limit: int = 100) -> int:
    """Run up to ``limit`` due workflows (and expired leases) here; return how many.

    Lowest ``priority`` first (a queue's admission order, or a task's), then
    the longest due.
    """
    now = clock.now_datetime()
    ids = list(
        Workflow.objects.runnable(now)
        .filter(versions.runs_here())
        .order_by("priority", "wake_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(1 for workflow_id in ids if run(workflow_id) is not None)
