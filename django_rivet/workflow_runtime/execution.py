"""Running workflows: claim, run until they pause, release, wake up later.

:func:`run` is what the Celery task ``rivet.run_workflow``, the in-process
worker and ``testing.run_until_idle`` call. It claims the workflow's lease
(skipping it when another worker holds it or it is not due), runs the engine
in yield mode until the workflow completes, fails or pauses, and records on
release where it stopped: the status, when to wake (a sleep's deadline, a
retry backoff, a message timeout) and which messages it waits for. A wake-up
within :data:`~django_rivet.scheduler.ETA_HORIZON` gets a Celery ETA task
when the release commits (or wakes the in-process worker); later ones are
sent by the sweeper as they come near, which also re-sends lost tasks and
hands expired leases (crashed workers) to a new run.

Infrastructure trouble never fails a workflow: a storage outage, an unknown
workflow name (a worker running older code) or a raising rollback handler
release it with a retry after a backoff, and the next run resumes by replay.

The operations handles and the admin use (cancel, recover, replay from a
step, send, wake) live here too; each takes the lease first when it writes
history, so it never races a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import F, Min, Q

from .. import clock
from ..exceptions import WorkflowNotFound
from ..models import (
    WORKFLOW_ACTIVE,
    WORKFLOW_FINISHED,
    Workflow,
    WorkflowMessage,
    WorkflowStatus,
)
from ..workflow import (
    HistoryEntry,
    ReplayRefusedError,
    StepErrorEvent,
    StorageError,
    WorkflowDefinition,
    WorkflowOutcome,
    cancel_workflow,
    recover_workflow,
    replay_from,
    start_workflow,
)
from . import leases, registry
from .driver import DjangoDriver, LeaseLost, encode_body
from .leases import Heartbeat, Lease

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "MAX_PASSES",
    "cancel",
    "next_due_at",
    "recover",
    "replay",
    "retry_delay",
    "run",
    "run_due",
    "send",
    "sweep",
    "wake",
]

# Runs of one workflow per call while it stays due at once (an eviction, a
# message arriving mid-run); then it goes back to the queue behind others.
MAX_PASSES = 20
RETRY_BACKOFF_BASE = 1.0
RETRY_BACKOFF_MAX = 300.0
SWEEP_BATCH = 500

T = TypeVar("T")


def retry_delay(retry_count: int) -> float:
    """Return the backoff before retrying after ``retry_count`` failed runs."""
    return min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE * 2 ** min(retry_count, 16))


# -- wake-ups --------------------------------------------------------------------------
def _uses_celery() -> bool:
    from ..scheduler import uses_celery

    return uses_celery()


def _eta_horizon() -> float:
    from ..scheduler import ETA_HORIZON

    return ETA_HORIZON


def wake_fields(wake_at: datetime | None) -> dict[str, Any]:
    """Return the row bookkeeping for a Celery task sent for ``wake_at``.

    Only wake-ups within the ETA horizon get a task now; the sweeper sends
    the others later (long ETAs outlive the broker's visibility timeout).
    """
    if wake_at is None or not _uses_celery():
        return {}
    if clock.to_timestamp(wake_at) - clock.now() > _eta_horizon():
        return {}
    return {"enqueued_for": wake_at, "enqueued_at": clock.now_datetime()}


def _send_task(workflow_id: str, eta: float | None) -> None:
    from .. import tasks

    options: dict[str, Any] = {"retry": False}
    if eta is not None and eta > clock.now():
        options["eta"] = clock.to_datetime(eta)
    try:
        tasks.run_workflow.apply_async([workflow_id], **options)
    except Exception as exc:
        # The row says when to run; the sweeper sends the task again.
        logger.warning(
            "could not enqueue workflow=%s error=%r; the sweeper will pick it up",
            workflow_id,
            exc,
        )


def schedule_wake(workflow_id: str, wake_at: datetime | None) -> None:
    """Make the workflow run at ``wake_at``, once the transaction commits.

    Sends a Celery ETA task when :func:`wake_fields` recorded one, or wakes
    the in-process worker when Celery is not used.
    """
    if wake_at is None:
        return
    if not _uses_celery():
        from .. import worker

        transaction.on_commit(worker.notify, robust=True)
        return
    if not wake_fields(wake_at):
        return
    eta = clock.to_timestamp(wake_at)
    transaction.on_commit(lambda: _send_task(workflow_id, eta), robust=True)


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
        status, wake_at = _run_claimed(lease)
        if wake_at is None or clock.to_timestamp(wake_at) > clock.now():
            return status
    # Still due after many passes: yield the worker to other workflows.
    now = clock.now_datetime()
    with transaction.atomic():
        rows = Workflow.objects.filter(pk=workflow_id, lease_token="")
        if rows.update(wake_at=now, **wake_fields(now)):
            schedule_wake(workflow_id, now)
    return status


def _run_claimed(lease: Lease) -> tuple[str, datetime | None]:
    """Run a claimed workflow once and release it; return (status, wake_at)."""
    if lease.cancel_requested:
        return _cancel_claimed(lease)
    try:
        definition = registry.get(lease.name)
    except WorkflowNotFound:
        logger.error(
            "workflow definition missing workflow=%s name=%s",
            lease.workflow_id,
            lease.name,
        )
        return _release_for_retry(lease, f"Unknown workflow name {lease.name!r}")
    driver = DjangoDriver(lease.workflow_id, lease_token=lease.token, private_loop=True)
    heartbeat = Heartbeat(lease, on_lost=lambda: None)
    try:
        outcome = run_private(_drive(lease, definition, driver, heartbeat))
    except LeaseLost:
        # Fenced out: a cancel was requested (the next claim carries it out)
        # or a successor took over after our lease expired.
        return _release(lease, status=WorkflowStatus.SLEEPING)
    except StorageError as exc:
        logger.warning(
            "workflow storage error workflow=%s error=%s", lease.workflow_id, exc
        )
        return _release_for_retry(lease, str(exc))
    except Exception as exc:
        logger.exception("workflow run crashed workflow=%s", lease.workflow_id)
        return _release_for_retry(lease, f"{type(exc).__name__}: {exc}")
    finally:
        heartbeat.stop()
    return _release_outcome(lease, driver, outcome)


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


def _release(lease: Lease, **fields: Any) -> tuple[str, datetime | None]:
    wake_at = fields.get("wake_at", lease.wake_at)
    status = fields.get("status", lease.status)
    if status in WORKFLOW_ACTIVE and "wake_at" in fields:
        fields.update(wake_fields(wake_at))
    written = leases.release(lease, **fields)
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
    return _release(
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
        return _release(
            lease,
            status=state,
            wake_at=None,
            waiting_for=[],
            finished_at=now,
            retry_count=0,
            last_error="",
        )
    if state == WorkflowStatus.ROLLING_BACK:
        # A rollback handler raised: the next run retries it.
        return _release_for_retry(
            lease, f"Rollback failed: {outcome.error!r}", WorkflowStatus.ROLLING_BACK
        )
    wake = driver.alarm if driver.alarm_set else outcome.sleep_until
    return _release(
        lease,
        status=WorkflowStatus.SLEEPING,
        wake_at=None if wake is None else clock.to_datetime(wake),
        waiting_for=list(outcome.waiting_for),
        retry_count=0,
        last_error="",
    )


def _cancel_claimed(lease: Lease) -> tuple[str, datetime | None]:
    driver = DjangoDriver(
        lease.workflow_id,
        lease_token=lease.token,
        stop_on_cancel=False,
        private_loop=True,
    )
    run_private(cancel_workflow(lease.workflow_id, driver))
    logger.info("workflow cancelled workflow=%s", lease.workflow_id)
    return _release(
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


def next_due_at() -> float | None:
    """Return when the next workflow is due or the next lease expires."""
    times = [
        Workflow.objects.active()
        .filter(lease_token="")
        .aggregate(at=Min("wake_at"))["at"],
        Workflow.objects.exclude(lease_token="").aggregate(at=Min("lease_expires_at"))[
            "at"
        ],
    ]
    found = [clock.to_timestamp(at) for at in times if at is not None]
    return min(found) if found else None


# -- the sweep step --------------------------------------------------------------------
def sweep() -> int:
    """Send Celery tasks for upcoming, lost and crashed workflow runs.

    Upcoming: a wake-up entered the ETA horizon and has no task yet. Lost:
    due for longer than a sweep interval although a task was sent (the
    broker or a worker lost it). Crashed: the lease expired. Each row is
    marked with a conditional update first, so concurrent sweepers send one
    task. Without Celery the in-process worker runs them itself.
    """
    if not _uses_celery():
        return 0
    from ..scheduler import grace_period

    now = clock.now_datetime()
    stale = now - grace_period()
    horizon = clock.to_datetime(clock.now() + _eta_horizon())
    unleased = Workflow.objects.active().filter(lease_token="")
    upcoming = unleased.filter(wake_at__lte=horizon).filter(
        Q(enqueued_for__isnull=True) | ~Q(enqueued_for=F("wake_at"))
    )
    lost = unleased.filter(wake_at__lte=stale).filter(
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=stale)
    )
    crashed = (
        Workflow.objects.expired_leases(now)
        .active()
        .filter(Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=stale))
    )
    sent = 0
    for rows in (upcoming, lost, crashed):
        found = rows.order_by("wake_at").values_list("pk", "wake_at")[:SWEEP_BATCH]
        for workflow_id, wake_at in found:
            # The conditional update decides which sweeper sends the task.
            marked = rows.filter(pk=workflow_id).update(
                enqueued_for=wake_at, enqueued_at=now
            )
            if marked:
                eta = None if wake_at is None else clock.to_timestamp(wake_at)
                _send_task(workflow_id, eta)
                sent += 1
    if sent:
        logger.info("workflow sweep sent=%s", sent)
    return sent


# -- operations (handles, admin) -------------------------------------------------------
def _require(workflow_id: str) -> None:
    if not Workflow.objects.filter(pk=workflow_id).exists():
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")


def wake(workflow_id: str) -> bool:
    """Make an active workflow run now; return False if it has finished."""
    now = clock.now_datetime()
    with transaction.atomic():
        woken = (
            Workflow.objects.active()
            .filter(pk=workflow_id)
            .update(wake_at=now, wake_signal=F("wake_signal") + 1, **wake_fields(now))
        )
        if not woken:
            _require(workflow_id)
            return False
        schedule_wake(workflow_id, now)
    return True


def send(workflow_id: str, name: str, body: Any = None) -> str:
    """Store a message in the workflow's inbox and wake it if it waits for it.

    Returns the message id. Raises ``TypeError`` for a body that cannot be
    stored and ``workflow/not_found`` for an unknown workflow.
    """
    data = encode_body(body)
    now = clock.now_datetime()
    with transaction.atomic():
        # The signal bump comes first: it locks the row, so a run releasing
        # concurrently either sees it (and runs again) or released before
        # (and its waiting_for is what we read next).
        rows = Workflow.objects.filter(pk=workflow_id)
        if not rows.update(wake_signal=F("wake_signal") + 1):
            raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
        status, waiting_for = rows.values_list("status", "waiting_for").get()
        message = WorkflowMessage.objects.create(
            workflow_id=workflow_id, name=name, body=data
        )
        wanted = name in waiting_for or "*" in waiting_for
        if status in WORKFLOW_ACTIVE and wanted:
            rows.update(wake_at=now, **wake_fields(now))
            schedule_wake(workflow_id, now)
    logger.debug("workflow message sent workflow=%s name=%s", workflow_id, name)
    return str(message.pk)


def cancel(workflow_id: str) -> bool:
    """Cancel an active workflow; return False if it had already finished.

    A workflow nobody runs is cancelled right here. One that a worker is
    running is marked: the worker is fenced out at its next write and the
    next claim cancels it.
    """
    now = clock.now_datetime()
    with transaction.atomic():
        requested = (
            Workflow.objects.active()
            .filter(pk=workflow_id)
            .update(
                cancel_requested=True,
                wake_at=now,
                wake_signal=F("wake_signal") + 1,
                **wake_fields(now),
            )
        )
        if not requested:
            _require(workflow_id)
            return False
        lease = leases.claim(workflow_id, run=False)
        if lease is None:
            schedule_wake(workflow_id, now)
            return True
        _cancel_claimed(lease)
    return True


def recover(workflow_id: str) -> bool:
    """Let a failed workflow run again from its failed steps.

    Returns False (changing nothing) unless the workflow is failed and no
    worker holds it.
    """
    row = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True)
    status = row.first()
    if status is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    if status != WorkflowStatus.FAILED:
        return False
    lease = leases.claim(workflow_id, run=False)
    if lease is None:
        return False
    driver = DjangoDriver(
        workflow_id, lease_token=lease.token, stop_on_cancel=False, private_loop=True
    )
    try:
        recovered = run_private(recover_workflow(workflow_id, driver))
    except BaseException:
        leases.release(lease)
        raise
    if not recovered:
        leases.release(lease)
        return False
    _release_rewound(lease, driver)
    logger.info("workflow recovered workflow=%s", workflow_id)
    return True


def replay(workflow_id: str, entry_id: str | None = None) -> list[HistoryEntry]:
    """Delete a step and everything recorded after it, and run from there.

    Without ``entry_id`` the whole history goes (the input stays). Returns
    the remaining history. Raises ``ReplayRefusedError`` while a worker runs
    the workflow, and ``EntryNotFoundError`` for an unknown entry.
    """
    _require(workflow_id)
    lease = leases.claim(workflow_id, run=False)
    if lease is None:
        raise ReplayRefusedError("Cannot replay the workflow while it is running")
    driver = DjangoDriver(
        workflow_id, lease_token=lease.token, stop_on_cancel=False, private_loop=True
    )
    try:
        remaining = run_private(replay_from(workflow_id, driver, entry_id))
    except BaseException:
        leases.release(lease)
        raise
    _release_rewound(lease, driver)
    logger.info("workflow replayed workflow=%s entry=%s", workflow_id, entry_id)
    return remaining


def _release_rewound(lease: Lease, driver: DjangoDriver) -> None:
    """Release after recover/replay: the workflow sleeps and is due now."""
    wake = driver.alarm if driver.alarm_set else clock.now()
    _release(
        lease,
        status=WorkflowStatus.SLEEPING,
        wake_at=None if wake is None else clock.to_datetime(wake),
        waiting_for=[],
        finished_at=None,
        cancel_requested=False,
        retry_count=0,
        last_error="",
    )
