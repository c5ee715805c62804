"""Due and lost work of schedules, cron and queues, for the upkeep loops.

The sweeper and the in-process worker (:mod:`django_rivet.upkeep`) list
these among their steps:

- :func:`recover_stale_claims`: claims whose firer died before committing go
  back to pending (a cron job gets its lost run back);
- :func:`enqueue_upcoming`: work entering the ETA horizon gets its Celery
  task (only near-term work gets one when it is created; Celery dispatch
  only);
- :func:`fire_lost`: schedules, cron runs and queue messages overdue by more
  than one sweep interval are fired right here, in this process;
- :func:`next_due_at`: when the next schedule, cron run or queue message is
  due, so the worker can sleep until then.

Every one is safe with many sweepers at once: each row is claimed with a
conditional update before anything is done with it.
"""

from __future__ import annotations

import logging

from django.db.models import F, Min, Q
from django.db.models.functions import Least

from .. import clock, dispatch
from ..models import (
    CronJob,
    QueueMessage,
    QueueMessageStatus,
    Schedule,
    ScheduleStatus,
    db,
)
from .claims import claim_lease
from .cron import wake_cron
from .cron_runs import run_due_cron
from .queue_delivery import deliver_due_queues
from .schedule_runs import fire_due_schedules, wake_schedule

logger = logging.getLogger("django_rivet.sweeper")

__all__ = [
    "STEP_BATCH",
    "enqueue_upcoming",
    "fire_lost",
    "next_due_at",
    "recover_stale_claims",
]

# Upper bound on the work one step does in one sweep, so a sweep stays short
# and several sweepers share a backlog.
STEP_BATCH = 500


def recover_stale_claims() -> int:
    """Return claims older than the claim lease to pending."""
    before = clock.to_datetime(clock.now() - claim_lease())
    released = {"claim_token": None, "claimed_at": None}
    with db.atomic():
        count = Schedule.objects.stale_claims(before).update(
            status=ScheduleStatus.PENDING, **released
        )
        # The lost run is due again: next_run_at goes back to it.
        count += (
            CronJob.objects.stale_claims(before)
            .filter(running_for__isnull=False)
            .update(
                running=False,
                next_run_at=Least(F("next_run_at"), F("running_for")),
                running_for=None,
                enqueued_for=None,
                **released,
            )
        )
        count += (
            CronJob.objects.stale_claims(before)
            .filter(running_for__isnull=True)
            .update(running=False, **released)
        )
        count += QueueMessage.objects.stale_claims(before).update(
            status=QueueMessageStatus.PENDING, **released
        )
    if count:
        logger.warning("recovered stale claims count=%s", count)
    return count


def enqueue_upcoming(limit: int = STEP_BATCH) -> int:
    """Send Celery ETA tasks for work that entered the ETA horizon."""
    if not dispatch.backend().eta_tasks:
        return 0
    horizon = clock.to_datetime(clock.now() + dispatch.ETA_HORIZON)
    sent = 0
    upcoming = Schedule.objects.filter(
        status=ScheduleStatus.PENDING, enqueued=False, run_at__lte=horizon
    ).order_by("run_at")
    for schedule_id, run_at in upcoming.values_list("id", "run_at")[:limit]:
        # The conditional update decides which sweeper sends the task.
        if Schedule.objects.filter(pk=schedule_id, enqueued=False).update(
            enqueued=True
        ):
            wake_schedule(schedule_id, clock.to_timestamp(run_at))
            sent += 1
    jobs = CronJob.objects.filter(next_run_at__lte=horizon).filter(
        Q(enqueued_for__isnull=True) | ~Q(enqueued_for=F("next_run_at"))
    )
    for job_id, next_run_at in jobs.values_list("id", "next_run_at")[:limit]:
        if CronJob.objects.filter(pk=job_id, next_run_at=next_run_at).update(
            enqueued_for=next_run_at
        ):
            wake_cron(job_id, clock.to_timestamp(next_run_at))
            sent += 1
    return sent


def fire_lost(limit: int = STEP_BATCH) -> int:
    """Fire work overdue by more than one sweep interval (its task was lost)."""
    grace = dispatch.grace_period().total_seconds()
    handled = fire_due_schedules(limit=limit, grace=grace)
    handled += run_due_cron(limit=limit, grace=grace)
    handled += deliver_due_queues(limit=limit, grace=grace)
    if handled:
        logger.info("fired lost work count=%s", handled)
    return handled


def next_due_at() -> float | None:
    """Return when the next schedule, cron run or queue message is due."""
    now = clock.now_datetime()
    times = [
        Schedule.objects.filter(status=ScheduleStatus.PENDING).aggregate(
            at=Min("run_at")
        )["at"],
        *CronJob.objects.aggregate(
            at=Min("next_run_at"), retry=Min("retry_at")
        ).values(),
        # Heads waiting for a retry are due then, not now (no busy loop).
        QueueMessage.objects.pending().aggregate(at=Min("retry_at"))["at"],
    ]
    if QueueMessage.objects.deliverable(now).exists():
        times.append(now)
    found = [clock.to_timestamp(t) for t in times if t is not None]
    return min(found) if found else None
