"""Wake-ups: dispatch for due workflows, and the sweep that repairs them.

The ``Workflow`` row is the source of truth for when a workflow runs next
(``wake_at``, and ``lease_expires_at`` while a worker holds it); dispatch
only makes that prompt. With the Celery backend a wake-up within
:data:`~django_rivet.dispatch.ETA_HORIZON` gets a ``rivet.run_workflow`` ETA
task once the transaction that decided it commits; later ones are sent by
:func:`sweep` as they come near, which also re-sends tasks that look lost and
hands workflows whose lease expired (a crashed worker) to a new run. With
the worker backend the in-process loop is woken and reads due times itself.
Each run re-checks and claims the row, so early, late, lost or duplicated
wake-ups are all harmless.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Min, Q

from .. import clock, dispatch
from ..models import Workflow, db
from . import versions

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["next_due_at", "schedule_wake", "send_task", "sweep", "wake_fields"]

SWEEP_BATCH = 500
LOST_RESEND = timedelta(seconds=60)


def wake_fields(wake_at: datetime | None) -> dict[str, Any]:
    """Return the row bookkeeping for a Celery task sent for ``wake_at``.

    Only wake-ups within the ETA horizon get a task now; the sweeper sends
    the others later (long ETAs outlive the broker's visibility timeout).
    """
    if wake_at is None or not dispatch.within_eta_horizon(clock.to_timestamp(wake_at)):
        return {}
    return {"enqueued_for": wake_at, "enqueued_at": clock.now_datetime()}


def send_task(workflow_id: str, eta: float | None) -> None:
    """Send ``rivet.run_workflow`` now, or with an ETA (errors are logged)."""
    dispatch.wake("run_workflow", [workflow_id], eta)


def schedule_wake(workflow_id: str, wake_at: datetime | None) -> None:
    """Make the workflow run at ``wake_at``, once the transaction commits.

    Sends a Celery ETA task when :func:`wake_fields` recorded one, or wakes
    the in-process worker with the worker backend.
    """
    if wake_at is None:
        return
    if dispatch.backend().eta_tasks and not wake_fields(wake_at):
        return
    eta = clock.to_timestamp(wake_at)
    db.on_commit(lambda: send_task(workflow_id, eta), robust=True)


def next_due_at() -> float | None:
    """Return when the next workflow is due or the next lease expires."""
    times = [
        Workflow.objects.unsettled()
        .filter(versions.runs_here(), lease_token="")
        .aggregate(at=Min("wake_at"))["at"],
        Workflow.objects.exclude(lease_token="").aggregate(at=Min("lease_expires_at"))[
            "at"
        ],
    ]
    found = [clock.to_timestamp(at) for at in times if at is not None]
    return min(found) if found else None


def sweep() -> int:
    """Send Celery tasks for upcoming, lost and crashed workflow runs.

    Upcoming: a wake-up entered the ETA horizon and has no task yet. Lost:
    due for longer than a sweep interval although a task was sent (the
    broker or a worker lost it). Crashed: the lease expired. Both are re-sent
    at most every :data:`LOST_RESEND` while they stay that way. Each row is
    marked with a conditional update first, so concurrent sweepers send one
    task. Without Celery the in-process worker runs them itself.
    """
    if not dispatch.backend().eta_tasks:
        return 0
    grace_period = dispatch.grace_period
    now = clock.now_datetime()
    stale = now - grace_period()
    # A workflow whose task sits behind a backlog looks lost too: re-send
    # at most once a minute per workflow, so a busy queue does not snowball.
    resend = now - max(grace_period(), LOST_RESEND)
    horizon = clock.to_datetime(clock.now() + dispatch.ETA_HORIZON)
    unleased = Workflow.objects.unsettled().filter(lease_token="")
    upcoming = unleased.filter(wake_at__lte=horizon).filter(
        Q(enqueued_for__isnull=True) | ~Q(enqueued_for=F("wake_at"))
    )
    lost = unleased.filter(wake_at__lte=stale).filter(
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=resend)
    )
    crashed = (
        Workflow.objects.expired_leases(now)
        .unsettled()
        .filter(
            Q(enqueued_at__isnull=True)
            | Q(enqueued_at__lt=F("lease_expires_at"))  # not sent since it expired
            | Q(enqueued_at__lt=resend)
        )
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
                send_task(workflow_id, eta)
                sent += 1
    if sent:
        logger.info("workflow sweep sent=%s", sent)
    return sent
