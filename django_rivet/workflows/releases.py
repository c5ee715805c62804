"""Releasing a workflow's lease after a run: where it stopped, what comes next.

A run (or an operation holding the lease) ends with :func:`release`: it
writes the status, when to wake and what the workflow waits for, and does
what that status means for the others -- wakes a parent waiting for this
child, frees the workflow's queue slot, asks a cancelled workflow's
children to cancel -- and makes the next run happen when there is one.
:func:`release_outcome` turns the engine's outcome into those fields,
:func:`release_for_retry` releases after infrastructure trouble with a
backoff. A cancel that came while the lease was held wins
(:func:`~.leases.release`): the workflow stays ``cancelled`` and the next
run carries the cancel out.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from .. import clock
from ..engine import WorkflowOutcome
from ..models import WORKFLOW_ACTIVE, WORKFLOW_FINISHED, WorkflowStatus, db
from . import cancels, children, endings, leases, queues, streams
from .driver import DjangoDriver, LeaseLost
from .leases import Lease
from .wakeups import schedule_wake, wake_fields

__all__ = [
    "cancel_pending",
    "release",
    "release_for_retry",
    "release_outcome",
    "retry_delay",
    "runs_again",
]

logger = logging.getLogger("django_rivet.workflows")

RETRY_BACKOFF_BASE = 1.0
RETRY_BACKOFF_MAX = 300.0


def retry_delay(retry_count: int) -> float:
    """Return the backoff before retrying after ``retry_count`` failed runs."""
    return float(min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_BASE * 2 ** min(retry_count, 16)))


def release(
    lease: Lease,
    driver: DjangoDriver | None = None,
    *,
    error: dict[str, Any] | None = None,
    **fields: Any,
) -> tuple[str, datetime | None]:
    """Release ``lease`` writing ``fields``; schedule the next run if any.

    ``driver``: the run's, whose held last batch is written in the same
    transaction (fenced: if the lease moved on, neither lands).

    Returns the status and the wake-up time written (None when the workflow
    finished, or when the lease had been lost). An active workflow with a
    deadline wakes at the deadline at the latest. A finished one wakes its
    parent and the other workflows waiting for it, and a cancelled one asks its
    non-detached children to cancel (after the commit). A workflow that ends
    here sends ``workflow_finished`` (with ``error``, the failure's or the
    cancel's description) after the commit, unless it had ended before
    (a cancel ends it at once).
    """
    wake_at = fields.get("wake_at", lease.wake_at)
    status = fields.get("status", lease.status)
    deadline = fields.get("deadline_at", lease.deadline_at)
    if status in WORKFLOW_ACTIVE and deadline is not None:
        # Wake at the deadline to be cancelled then (once it passed, the
        # cancel is under way: a retry keeps its backoff).
        late = wake_at is None or wake_at > deadline
        if late and deadline > clock.now_datetime():
            wake_at = fields["wake_at"] = deadline
    if runs_again(status, fields) and "wake_at" in fields:
        fields.update(wake_fields(wake_at))
    try:
        with db.atomic():
            held = None if driver is None else driver.write_held
            written = leases.release(lease, write=held, **fields)
            if written is not None:
                status = written.get("status", status)  # a cancel's stays
                asked = fields.get("status")
                awaited_by = written.pop("awaited_by", None)
                _after_release(lease, driver, status, asked, error, awaited_by)
                if driver is not None:  # its history, for its next run here
                    driver.history.keep(runs_again(status, written))
    except LeaseLost:
        # Fenced out as at any write (a cancel was requested, or a successor
        # took over): its last batch is dropped, as a failed flush would be.
        logger.info("workflow run fenced out workflow=%s", lease.workflow_id)
        return release(lease, status=WorkflowStatus.SLEEPING)
    if written is not None and status == WorkflowStatus.CANCELLED:
        # After the commit: the parent's row lock is gone by then, so
        # children ending concurrently (they lock theirs, then ours)
        # cannot deadlock with us.
        parent_id = lease.workflow_id
        db.on_commit(lambda: cancels.cancel_children(parent_id), robust=True)
    if written is None or not runs_again(status, written):
        return status, None
    # release() made it due now if something arrived meanwhile.
    wake_at = written.get("wake_at", lease.wake_at)
    due_now = wake_at is not None and clock.to_timestamp(wake_at) <= clock.now()
    if not (lease.run and due_now):  # run() goes on with it right away
        schedule_wake(lease.workflow_id, wake_at)
    return status, wake_at


def _after_release(
    lease: Lease,
    driver: DjangoDriver | None,
    status: str,
    asked: str | None,
    error: dict[str, Any] | None,
    awaited_by: list[Any] | None,
) -> None:
    """What the status written sets off, in the release's transaction.

    ``awaited_by``: the waiters the release read back (None: not read).
    """
    if status in WORKFLOW_FINISHED:
        children.notify_waiters(lease.workflow_id, lease.parent_id, awaited_by)
        if driver is not None and driver.streamed:
            # Its stream readers end once they read everything.
            ended = lease.workflow_id
            db.on_commit(lambda: streams.announce(ended, [], ended=True))
    if status not in WORKFLOW_ACTIVE and lease.queue:
        queues.admit_on_commit(lease.queue)  # its slot is free
    ends = status in WORKFLOW_FINISHED and lease.status not in WORKFLOW_FINISHED
    if ends and status == asked:  # (not a cancel's: that sent it already)
        endings.finished_on_commit(lease.workflow_id, lease.name, status, error)


def runs_again(status: str, fields: dict[str, Any]) -> bool:
    """Tell whether a release writing ``fields`` leaves work for a later run."""
    return status in WORKFLOW_ACTIVE or fields.get("cancel_requested") is True


def cancel_pending(reason: str) -> dict[str, Any]:
    """Return the fields of a workflow whose cancel a later run carries out."""
    return {
        "status": WorkflowStatus.CANCELLED,
        "cancel_requested": True,
        "cancel_reason": reason,
    }


def release_for_retry(
    lease: Lease, problem: str, **fields: Any
) -> tuple[str, datetime | None]:
    delay = retry_delay(lease.retry_count)
    return release(
        lease,
        **{"status": WorkflowStatus.SLEEPING, **fields},
        wake_at=clock.to_datetime(clock.now() + delay),
        retry_count=lease.retry_count + 1,
        last_error=problem[:2000],
    )


def release_outcome(
    lease: Lease, driver: DjangoDriver, outcome: WorkflowOutcome, **fields: Any
) -> tuple[str, datetime | None]:
    state = outcome.state
    now = clock.now_datetime()
    if state in WORKFLOW_FINISHED:
        return release(
            lease,
            driver,
            error=endings.failure(outcome.error),
            status=state,
            wake_at=None,
            waiting_for=[],
            finished_at=now,
            retry_count=0,
            last_error="",
            **fields,
        )
    if state == "rolling_back":
        # A rollback handler raised: the next run retries it.
        return release_for_retry(
            lease,
            f"Rollback failed: {outcome.error!r}",
            **{"status": WorkflowStatus.ROLLING_BACK, **fields},
        )
    wake = driver.alarm if driver.alarm_set else outcome.sleep_until
    return release(
        lease,
        driver,
        status=WorkflowStatus.SLEEPING,
        wake_at=None if wake is None else clock.to_datetime(wake),
        waiting_for=list(outcome.waiting_for),
        retry_count=0,
        last_error="",
        **fields,
    )
