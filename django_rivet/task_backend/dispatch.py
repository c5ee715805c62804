"""The reverse direction: django-rivet's due work woken through Django tasks.

``RIVET["DISPATCH_BACKEND"] = "tasks"`` makes every wake-up of due work
(a schedule, a cron run, queue messages, a workflow run or admission) a
Django task, :func:`~.jobs.run_job`, enqueued on the ``TASKS`` backend
:attr:`TasksDispatch.alias` (``"default"``; subclass to pick another) with
``run_after`` the work's due time. So a project that already runs a tasks
worker (django-tasks-db's ``db_worker``, an RQ worker...) needs no Celery:
that worker runs django-rivet's work. As with Celery, the database stays the
source of truth: each job claims its row before acting, and the sweep
(``manage.py rivet_sweep`` on a schedule, or :func:`~.jobs.run_job` of ``"sweep"``)
repairs what the tasks backend lost.

The tasks backend must not be django-rivet's own ``RivetTaskBackend``: its
tasks are workflows, whose wake-ups would come back here (``rivet.E903``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage
from django.utils.module_loading import import_string

from .. import clock
from ..conf import docs_url
from . import compat

logger = logging.getLogger("django_rivet.dispatch")

__all__ = ["E903", "W903", "TasksDispatch"]

E903 = "RIVET['DISPATCH_BACKEND'] sends due work as Django tasks, but {problem}."
W903 = (
    "RIVET['DISPATCH_BACKEND'] sends due work as Django tasks on TASKS[{alias!r}], "
    "which cannot defer them (supports_defer is False): work due later waits "
    "for a sweep."
)
HINT = (
    "Name a TASKS backend of another library (not RivetTaskBackend) that "
    "supports run_after, and run its worker. See {docs}"
)


class TasksDispatch:
    """Enqueue ``run_job(job, args)`` on a Django tasks backend."""

    #: The ``TASKS`` alias the jobs are enqueued on.
    alias = "default"

    @property
    def eta_tasks(self) -> bool:
        """Whether each wake-up is one task for its due time (``run_after``)."""
        return bool(getattr(compat.task_backends[self.alias], "supports_defer", False))

    def wake(self, job: Any, args: list[Any], eta: float | None = None) -> bool:
        """Enqueue the job; log and return False when the backend refuses."""
        run_after: datetime | None = None
        if eta is not None and eta > clock.now() and self.eta_tasks:
            run_after = clock.to_datetime(eta)
        try:
            from .jobs import run_job

            found = run_job.using(backend=self.alias)
            if run_after is not None:
                found = found.using(run_after=run_after)
            found.enqueue(str(job), list(args))
        except Exception as exc:
            logger.warning(
                "could not enqueue job=%s args=%r error=%r; the sweeper will pick "
                "it up",
                job,
                args,
                exc,
            )
            return False
        return True

    def check(self) -> list[CheckMessage]:
        """Check the tasks backend the jobs go to (``rivet.E903``, ``W903``)."""
        hint = HINT.format(docs=docs_url("tasks", "the-reverse-direction"))
        entry = (getattr(settings, "TASKS", None) or {}).get(self.alias)
        problem = None
        if not compat.AVAILABLE:
            problem = "Django's Tasks framework is not installed"
        elif not isinstance(entry, dict):
            problem = f"TASKS has no {self.alias!r} backend"
        elif _is_rivet(entry.get("BACKEND")):
            problem = (
                f"TASKS[{self.alias!r}] is RivetTaskBackend, whose tasks are "
                "workflows woken through this dispatch: a loop"
            )
        if problem is not None:
            return [
                checks.Error(
                    E903.format(problem=problem),
                    hint=hint,
                    obj="settings.RIVET",
                    id="rivet.E903",
                )
            ]
        if not self.eta_tasks:
            return [
                checks.Warning(
                    W903.format(alias=self.alias),
                    hint=hint,
                    obj="settings.TASKS",
                    id="rivet.W903",
                )
            ]
        return []


def _is_rivet(path: Any) -> bool:
    from . import RivetTaskBackend

    try:
        found = import_string(str(path))
    except ImportError:
        return False
    return isinstance(found, type) and issubclass(found, RivetTaskBackend)
