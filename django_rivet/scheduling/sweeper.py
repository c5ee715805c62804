"""The sweeper: one pass that repairs whatever the broker or a crash lost.

The database is the source of truth; Celery tasks only make work prompt. A
sweep (``rivet.sweep`` on Celery beat every ``SWEEP_INTERVAL`` seconds, the
``rivet_sweep`` command, or the worker loop) runs a list of steps:

- ``recover_stale_claims``: claims whose firer died before committing go back
  to pending (a cron job gets its lost run back);
- ``enqueue_upcoming``: work entering the ETA horizon gets its Celery task
  (only near-term work gets one when it is created; Celery dispatch only);
- ``fire_lost``: schedules, cron runs and queue messages overdue by more than
  one sweep interval are fired right here, in this process;
- ``workflows``: wake-ups and expired workflow leases get a run task;
- ``connections``: connections of processes that stopped heartbeating are
  removed (``on_disconnect`` runs);
- ``purge_finished``: finished workflows, fired schedules and processed
  queue messages past their retention are deleted, one bounded batch per
  table (:mod:`.retention`).

Every step is safe with many sweepers at once: each row is claimed with a
conditional update (``SKIP LOCKED`` batches on PostgreSQL) before anything is
done with it. The steps of other layers (workflow wake-ups and leases, the
transport's connection liveness check) are added with :func:`register_step`
by the app config at start-up: this module does not import those layers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import F, Q
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
from .retention import purge_pass
from .schedule_runs import fire_due_schedules, wake_schedule

logger = logging.getLogger("django_rivet.sweeper")

__all__ = [
    "SweepStep",
    "register_step",
    "steps",
    "sweep",
]

# Upper bound on the work one step does in one sweep, so a sweep stays short
# and several sweepers share a backlog.
STEP_BATCH = 500


@dataclass(frozen=True, slots=True)
class SweepStep:
    """One step of a sweep: ``run()`` returns how many rows it handled."""

    name: str
    run: Callable[[], int]


_steps: list[SweepStep] = []


def register_step(step: SweepStep, *, before: str | None = None) -> None:
    """Add a sweep step (replacing one of the same name)."""
    for index, existing in enumerate(_steps):
        if existing.name == step.name:
            _steps[index] = step
            return
    if before is not None:
        for index, existing in enumerate(_steps):
            if existing.name == before:
                _steps.insert(index, step)
                return
    _steps.append(step)


def steps() -> list[SweepStep]:
    """Return the registered steps, in order."""
    return list(_steps)


def sweep() -> dict[str, int]:
    """Run every step once; return ``{step name: rows handled}``.

    A failing step is logged and the others still run.
    """
    counts: dict[str, int] = {}
    for step in steps():
        started = time.monotonic()
        try:
            counts[step.name] = step.run()
        except Exception:
            logger.exception("sweep step failed step=%s", step.name)
            counts[step.name] = 0
        if counts[step.name]:
            logger.info(
                "sweep step=%s handled=%s seconds=%.3f",
                step.name,
                counts[step.name],
                time.monotonic() - started,
            )
    return counts


# -- the scheduling steps -------------------------------------------------------------
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


def enqueue_upcoming() -> int:
    """Send Celery ETA tasks for work that entered the ETA horizon."""
    if not dispatch.backend().eta_tasks:
        return 0
    horizon = clock.to_datetime(clock.now() + dispatch.ETA_HORIZON)
    sent = 0
    upcoming = Schedule.objects.filter(
        status=ScheduleStatus.PENDING, enqueued=False, run_at__lte=horizon
    ).order_by("run_at")
    for schedule_id, run_at in upcoming.values_list("id", "run_at")[:STEP_BATCH]:
        # The conditional update decides which sweeper sends the task.
        if Schedule.objects.filter(pk=schedule_id, enqueued=False).update(
            enqueued=True
        ):
            wake_schedule(schedule_id, clock.to_timestamp(run_at))
            sent += 1
    jobs = CronJob.objects.filter(next_run_at__lte=horizon).filter(
        Q(enqueued_for__isnull=True) | ~Q(enqueued_for=F("next_run_at"))
    )
    for job_id, next_run_at in jobs.values_list("id", "next_run_at")[:STEP_BATCH]:
        if CronJob.objects.filter(pk=job_id, next_run_at=next_run_at).update(
            enqueued_for=next_run_at
        ):
            wake_cron(job_id, clock.to_timestamp(next_run_at))
            sent += 1
    return sent


def fire_lost() -> int:
    """Fire work overdue by more than one sweep interval (its task was lost)."""
    grace = dispatch.grace_period().total_seconds()
    handled = fire_due_schedules(limit=STEP_BATCH, grace=grace)
    handled += run_due_cron(limit=STEP_BATCH, grace=grace)
    handled += deliver_due_queues(limit=STEP_BATCH, grace=grace)
    if handled:
        logger.info("fired lost work count=%s", handled)
    return handled


def purge_finished() -> int:
    """Delete one batch per table of what retention lets go; return the rows."""
    return sum(purge_pass(STEP_BATCH).values())


for _step in (
    SweepStep("recover_stale_claims", recover_stale_claims),
    SweepStep("enqueue_upcoming", enqueue_upcoming),
    SweepStep("fire_lost", fire_lost),
    SweepStep("purge_finished", purge_finished),
):
    register_step(_step)
