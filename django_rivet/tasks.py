"""Celery tasks of django-rivet: thin entry points over the runtime.

Arguments are ids and primitives. Every task re-checks due-ness and claims
its row before acting, so early, late, lost or duplicated deliveries are all
harmless; the sweep repairs what the broker lost. The ``celery`` dispatch
backend sends them (:mod:`django_rivet.dispatch`). Register them with a
normal Celery app (``app.autodiscover_tasks()``) and add the sweep to beat::

    # mysite/celery.py
    from django_rivet.tasks import beat_schedule

    app.conf.beat_schedule = {**beat_schedule(), **app.conf.beat_schedule}

Run a worker with beat (``celery -A mysite worker -B``, or a separate
``celery -A mysite beat``). Several beats are safe: sweeps claim rows.

The project's ``celery.py`` imports this module (for :func:`beat_schedule`)
while Celery configures itself, which can be before Django's apps are
loaded; so the tasks import the runtime when they run, not at import time.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_shutting_down

from .conf import rivet_settings

__all__ = [
    "admit_workflows",
    "beat_schedule",
    "deliver_queue",
    "fire_schedule",
    "run_cron",
    "run_workflow",
    "sweep",
    "tick_workflows",
]


@shared_task(name="rivet.fire_schedule", ignore_result=True)
def fire_schedule(schedule_id: str) -> str:
    """Fire the schedule ``schedule_id`` if it is due and unclaimed."""
    from .scheduling import schedule_runs

    return schedule_runs.fire_schedule(schedule_id).value


@shared_task(name="rivet.run_cron", ignore_result=True)
def run_cron(job_id: int, scheduled_at: float | None = None) -> str:
    """Run the due run of cron job ``job_id`` (sent for ``scheduled_at``)."""
    from .scheduling import cron_runs

    return cron_runs.run_cron(job_id, scheduled_at).value


@shared_task(name="rivet.deliver_queue", ignore_result=True)
def deliver_queue(actor_id: str) -> int:
    """Deliver the pending queue messages of the actor ``actor_id``."""
    from .scheduling import queue_delivery

    return queue_delivery.deliver_queue(actor_id)


@shared_task(name="rivet.run_workflow", ignore_result=True)
def run_workflow(workflow_id: str) -> str | None:
    """Run workflow ``workflow_id`` until it pauses, if it is due and unclaimed."""
    from .workflows import execution

    return execution.run(workflow_id)


@worker_shutting_down.connect(dispatch_uid="django_rivet.end_live_windows")
def end_live_windows(**kwargs: Any) -> None:
    """A Celery worker shutting down: runs in a live window unwind at once."""
    from .workflows import live

    live.end_all()


@shared_task(name="rivet.admit_workflows", ignore_result=True)
def admit_workflows(queue: str) -> int:
    """Start the queued workflows of ``queue`` its limits allow now."""
    from .workflows import queues

    return queues.admit(queue)


@shared_task(name="rivet.tick_workflows", ignore_result=True)
def tick_workflows() -> int:
    """Start the workflows of due ticks of ``@workflow(cron=...)`` schedules."""
    from .workflows import scheduled

    return scheduled.run_due_ticks()


@shared_task(name="rivet.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Run one sweep (lost schedules, cron runs, messages, stale claims...)."""
    from .upkeep import sweeper

    return sweeper.sweep()


def beat_schedule(interval: float | None = None) -> dict[str, dict[str, Any]]:
    """Return the Celery beat entry running ``rivet.sweep``.

    ``interval`` defaults to ``RIVET["SWEEP_INTERVAL"]`` (5 s). Merge it into
    ``app.conf.beat_schedule``.
    """
    if interval is None:
        interval = rivet_settings.SWEEP_INTERVAL
    return {
        "rivet-sweep": {
            "task": "rivet.sweep",
            "schedule": interval,
            # A sweep that waited longer than an interval is superseded by
            # the next one.
            "options": {"expires": interval},
        }
    }
