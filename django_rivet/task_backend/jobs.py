"""The Django task that runs django-rivet's jobs (the ``"tasks"`` dispatch).

Imported only where that dispatch is used, and by the tasks worker that
imports ``run_job`` by its path: defining the task needs Django's Tasks
framework and the ``TASKS`` setting.
"""

from __future__ import annotations

from typing import Any

from . import compat

__all__ = ["run_job"]


@compat.task()
def run_job(job: str, args: list[Any]) -> Any:
    """Run one of django-rivet's jobs (the Celery task ``rivet.<job>``) here."""
    from .. import tasks

    return getattr(tasks, job)(*args)
