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
import logging
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from .. import clock, observability
from ..exceptions import WorkflowNotFound
from ..models import (
    WORKFLOW_ACTIVE,
    WORKFLOW_FINISHED,
    Workflow,
    WorkflowStatus,
    db,
)
from ..workflow import (
    StepErrorEvent,
    StorageError,
    WorkflowDefinition,
    WorkflowOutcome,
    cancel_workflow,
    start_workflow,
)
from . import leases, queues, registry
from .driver import DjangoDriver, LeaseLost
from .leases import Heartbeat, Lease
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
]

# Runs of one workflow per call while it stays due at once (an eviction, a
# message arriving mid-run); then it goes back to the queue behind others.
MAX_PASSES = 20
RETRY_BACKOFF_BASE = 1.0
RETRY_BACKOFF_MAX = 300.0

T = TypeVar("T")


def retry_delay(retry_count: int) -> float:
    """Return the backoff before retrying after ``retry_count`` failed runs."""
    return float(min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE * 2 ** min(retry_count, 16)))


def run_private(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run engine code on an event loop private to this thread.

    Its driver (``private_loop=True``) does its database work inline, on this
    thread's connection and inside the caller's transaction if there is one.
    Call it from synchronous code (never from a thread running a loop).
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


# -- runs ------------------------------------------------------------------------------
def run(workflow_id: str, *, max_passes: int = MAX_PASSES) -> str | None:
    """Run ``workflow_id`` while it is due; return its status after the last run.

    Returns None when nothing ran (not due, finished, unknown, or another
    worker holds it). Never raises for the workflow's own failures.
    """
    status = None
    for _ in range(max_passes):
        lease = leases.claim(workflow_id)
        if lease is None:
            return status
        status, wake_at = observability.workflow_run(_run_claimed, lease)
        if wake_at is None or clock.to_timestamp(wake_at) > clock.now():
            return status
    # Still due after many passes: yield the worker to other workflows.
    now = clock.now_datetime()
    with db.atomic():
        rows = Workflow.objects.filter(pk=workflow_id, lease_token="")
        if rows.update(wake_at=now, **wake_fields(now)):
            schedule_wake(workflow_id, now)
    return status


def _run_claimed(lease: Lease) -> tuple[str, datetime | None]:
    """Run a claimed workflow once and release it; return (status, wake_at)."""
    if lease.cancel_requested:
        return cancel_claimed(lease)
    try:
        definition = registry.get(lease.name)
    except WorkflowNotFound:
        logger.error(
            "workflow definition missing workflow=%s name=%s",
            lease.workflow_id,
            lease.name,
        )
        return _release_for_retry(lease, f"Unknown workflow name {lease.name!r}")
    late_ms = 0.0
    if lease.wake_at is not None:
        late_ms = max(0.0, (clock.now() - clock.to_timestamp(lease.wake_at)) * 1000)
    driver = DjangoDriver(lease.workflow_id, lease_token=lease.token, private_loop=True)
    heartbeat = Heartbeat(lease, on_lost=lambda: None)
    try:
        outcome = run_private(_drive(lease, definition, driver, heartbeat))
    except StorageError as exc:
        if _lease_lost(exc):
            # Fenced out: a cancel was requested (the next claim carries it
            # out) or a successor took over after our lease expired.
            logger.info("workflow run fenced out workflow=%s", lease.workflow_id)
            return release(lease, status=WorkflowStatus.SLEEPING)
        logger.warning(
            "workflow storage error workflow=%s error=%s", lease.workflow_id, exc
        )
        return _release_for_retry(lease, str(exc))
    except Exception as exc:
        logger.exception("workflow run crashed workflow=%s", lease.workflow_id)
        return _release_for_retry(lease, f"{type(exc).__name__}: {exc}")
    finally:
        heartbeat.stop()
    logger.info(
        "workflow ran workflow=%s name=%s state=%s late_ms=%.0f",
        lease.workflow_id,
        lease.name,
        outcome.state,
        late_ms,
    )
    return _release_outcome(lease, driver, outcome)


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
) -> WorkflowOutcome:
    # The input was stored when the workflow started; the engine reads it.
    run = start_workflow(
        lease.workflow_id, definition.fn, None, driver, "yield", on_error=_log_event
    )
    loop = asyncio.get_running_loop()

    def evict() -> None:
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(run.evict)

    heartbeat.on_lost = evict
    heartbeat.start()
    return await run


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


def release(lease: Lease, **fields: Any) -> tuple[str, datetime | None]:
    """Release ``lease`` writing ``fields``; schedule the next run if any.

    Returns the status and the wake-up time written (None when the workflow
    finished, or when the lease had been lost).
    """
    wake_at = fields.get("wake_at", lease.wake_at)
    status = fields.get("status", lease.status)
    if status in WORKFLOW_ACTIVE and "wake_at" in fields:
        fields.update(wake_fields(wake_at))
    written = leases.release(lease, **fields)
    if written is not None and status not in WORKFLOW_ACTIVE and lease.queue:
        queues.admit_on_commit(lease.queue)  # its slot is free
    if written is None or status not in WORKFLOW_ACTIVE:
        return status, None
    # release() made it due now if something arrived meanwhile.
    wake_at = written.get("wake_at", lease.wake_at)
    due_now = wake_at is not None and clock.to_timestamp(wake_at) <= clock.now()
    if not (lease.run and due_now):  # run() goes on with it right away
        schedule_wake(lease.workflow_id, wake_at)
    return status, wake_at


def _release_for_retry(
    lease: Lease, error: str, status: str = WorkflowStatus.SLEEPING
) -> tuple[str, datetime | None]:
    delay = retry_delay(lease.retry_count)
    return release(
        lease,
        status=status,
        wake_at=clock.to_datetime(clock.now() + delay),
        retry_count=lease.retry_count + 1,
        last_error=error[:2000],
    )


def _release_outcome(
    lease: Lease, driver: DjangoDriver, outcome: WorkflowOutcome
) -> tuple[str, datetime | None]:
    state = outcome.state
    now = clock.now_datetime()
    if state in WORKFLOW_FINISHED:
        return release(
            lease,
            status=state,
            wake_at=None,
            waiting_for=[],
            finished_at=now,
            retry_count=0,
            last_error="",
        )
    if state == "rolling_back":
        # A rollback handler raised: the next run retries it.
        return _release_for_retry(
            lease, f"Rollback failed: {outcome.error!r}", WorkflowStatus.ROLLING_BACK
        )
    wake = driver.alarm if driver.alarm_set else outcome.sleep_until
    return release(
        lease,
        status=WorkflowStatus.SLEEPING,
        wake_at=None if wake is None else clock.to_datetime(wake),
        waiting_for=list(outcome.waiting_for),
        retry_count=0,
        last_error="",
    )


def cancel_claimed(lease: Lease) -> tuple[str, datetime | None]:
    """Cancel the claimed workflow for good and release it."""
    driver = DjangoDriver(
        lease.workflow_id,
        lease_token=lease.token,
        stop_on_cancel=False,
        private_loop=True,
    )
    run_private(cancel_workflow(lease.workflow_id, driver))
    logger.info("workflow cancelled workflow=%s", lease.workflow_id)
    return release(
        lease,
        status=WorkflowStatus.CANCELLED,
        wake_at=None,
        waiting_for=[],
        finished_at=clock.now_datetime(),
        cancel_requested=False,
    )


# -- due work (the in-process worker, run_due) -----------------------------------------
def run_due(limit: int = 100) -> int:
    """Run up to ``limit`` due workflows (and expired leases) here; return how many."""
    now = clock.now_datetime()
    ids = list(
        Workflow.objects.runnable(now)
        .order_by("wake_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(1 for workflow_id in ids if run(workflow_id) is not None)
