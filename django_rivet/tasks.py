"""Celery tasks of django-rivet: thin wrappers around the scheduler.

Arguments are ids and primitives. Every task re-checks due-ness and claims
its row before acting, so early, late, lost or duplicated deliveries are all
harmless; the sweep repairs what the broker lost. Register them with a normal
Celery app (``app.autodiscover_tasks()``) and add the sweep to beat::

    # mysite/celery.py
    from django_rivet.tasks import beat_schedule

    app.conf.beat_schedule = {**beat_schedule(), **app.conf.beat_schedule}

Run a worker with beat (``celery -A mysite worker -B``, or a separate
``celery -A mysite beat``). Several beats are safe: sweeps claim rows.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

logger = logging.getLogger("django_rivet.tasks")

__all__ = [
    "beat_schedule",
    "deliver_queue",
    "fire_schedule",
    "run_cron",
    "send",
    "sweep",
]


def send(task_name: str, args: list[Any], eta: float | None = None) -> bool:
    """Send the rivet task ``task_name`` now, or at ``eta`` (epoch seconds).

    Returns False, after logging why, when the broker refuses: the database
    still holds the work and the sweeper sends the task again, so a broker
    outage must not fail the commit that preceded it. No retries here, to
    keep a down broker from stalling the caller.
    """
    from . import clock

    task = globals()[task_name]
    options: dict[str, Any] = {"retry": False}
    if eta is not None and eta > clock.now():
        options["eta"] = clock.to_datetime(eta)
    try:
        task.apply_async(args, **options)
    except Exception as exc:
        logger.warning(
            "could not send task=%s args=%s error=%r; the sweeper will pick it up",
            task.name,
            args,
            exc,
        )
        return False
    return True


@shared_task(name="rivet.fire_schedule", ignore_result=True)
def fire_schedule(schedule_id: str) -> str:
    """Fire the schedule ``schedule_id`` if it is due and unclaimed."""
    from . import scheduler

    return scheduler.fire_schedule(schedule_id).value


@shared_task(name="rivet.run_cron", ignore_result=True)
def run_cron(job_id: int, scheduled_at: float | None = None) -> str:
    """Run the due run of cron job ``job_id`` (sent for ``scheduled_at``)."""
    from . import scheduler

    return scheduler.run_cron(job_id, scheduled_at).value


@shared_task(name="rivet.deliver_queue", ignore_result=True)
def deliver_queue(actor_id: str) -> int:
    """Deliver the pending queue messages of the actor ``actor_id``."""
    from . import scheduler

    return scheduler.deliver_queue(actor_id)


@shared_task(name="rivet.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Run one sweep (lost schedules, cron runs, messages, stale claims)."""
    from . import sweeper

    return sweeper.sweep()


def beat_schedule(interval: float | None = None) -> dict[str, dict[str, Any]]:
    """Return the Celery beat entry running ``rivet.sweep``.

    ``interval`` defaults to ``RIVET["SWEEP_INTERVAL"]`` (5 s). Merge it into
    ``app.conf.beat_schedule``.
    """
    if interval is None:
        from .conf import rivet_settings

        interval = float(rivet_settings.SWEEP_INTERVAL)
    return {
        "rivet-sweep": {
            "task": "rivet.sweep",
            "schedule": interval,
            # A sweep that waited longer than an interval is superseded by
            # the next one.
            "options": {"expires": interval},
        }
    }


# -- workflows (the workflow runtime) --------------------------------------------------
@shared_task(name="rivet.run_workflow", ignore_result=True)
def run_workflow(workflow_id: str) -> str | None:
    """Run workflow ``workflow_id`` until it pauses, if it is due and unclaimed."""
    from .workflow_runtime import execution

    return execution.run(workflow_id)


__all__ += ["run_workflow"]
