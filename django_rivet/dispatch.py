"""Dispatch backends: what makes due work run promptly.

The database decides what is due (schedules, cron runs, queue messages,
workflow wake-ups); a dispatch backend only makes it run soon. Code that
creates due work calls :func:`wake_on_commit` (or :func:`wake`) with a job
name and its arguments, and the configured backend carries it out:

- :class:`CeleryBackend` sends the ``rivet.<job>`` Celery task, with an ETA
  for future work (production);
- :class:`WorkerBackend` wakes the in-process worker loop (the embedded
  worker of ``make run``, or ``manage.py rivet_worker``), which reads due
  times from the database itself;
- :class:`NullBackend` does nothing: a worker or sweeper elsewhere picks the
  work up within ``SWEEP_INTERVAL``;
- ``django_rivet.task_backend.dispatch.TasksDispatch`` (``"tasks"``)
  enqueues a Django task on another library's tasks backend.

``RIVET["DISPATCH_BACKEND"]`` picks one by name (``"celery"``, ``"worker"``,
``"none"``, ``"tasks"``) or dotted path; the default (``None``) is ``"worker"`` when
``EMBEDDED_WORKER`` is on, else ``"celery"`` when a Celery broker is
configured, else ``"none"`` (system check ``rivet.W004`` says so). The
style is that of Django's cache and email backends: the layers below the
scheduler and the workflow runtime call this interface and never import
them. This module imports only the foundation (``conf``, ``clock``).

Jobs: ``fire_schedule(schedule_id)``, ``run_cron(job_id, scheduled_at)``,
``deliver_queue(actor_id)``, ``run_workflow(workflow_id)``,
``admit_workflows(queue)`` (a workflow queue's rate window reopens) and
``tick_workflows()`` (a scheduled workflow's tick is due).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, Protocol

from django.core import checks
from django.core.checks import CheckMessage
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from . import clock
from .conf import rivet_settings
from .models import db

logger = logging.getLogger("django_rivet.dispatch")

__all__ = [
    "BACKENDS",
    "ETA_HORIZON",
    "CeleryBackend",
    "DispatchBackend",
    "Job",
    "NullBackend",
    "WorkerBackend",
    "backend",
    "celery_configured",
    "clear_worker_wakeup",
    "configured_name",
    "grace_period",
    "notify_worker",
    "on_worker_wake",
    "overridden",
    "use",
    "wait_for_work",
    "wake",
    "wake_on_commit",
    "within_eta_horizon",
]

Job = Literal[
    "fire_schedule",
    "run_cron",
    "deliver_queue",
    "run_workflow",
    "admit_workflows",
    "tick_workflows",
]

# Only work due within this many seconds gets a Celery ETA task when it is
# created; the sweeper sends the rest as their time approaches. Long ETAs sit
# in worker memory and outlive Redis's visibility timeout (redelivered).
ETA_HORIZON = 600.0


class DispatchBackend(Protocol):
    """Make a job run promptly. ``wake`` must never raise nor block long."""

    #: Whether due work gets one message per item, sent for its due time
    #: (the row then records what was sent, and the sweeper sends what
    #: enters the ETA horizon later). False: the runner reads due times
    #: from the database.
    eta_tasks: bool

    def wake(self, job: Job, args: list[Any], eta: float | None = None) -> bool:
        """Ask for ``job(*args)`` to run now, or at ``eta`` (epoch seconds).

        Returns False when the request could not be handed over (the
        database still holds the work; a sweep picks it up).
        """
        ...

    def check(self) -> list[CheckMessage]:
        """Return what is wrong with this backend's setup (system checks)."""
        ...


# -- the worker loop's wake-up -------------------------------------------------------
_worker_wakeup = threading.Event()


_worker_wake_hooks: list[Callable[[str, list[Any]], Any]] = []


def on_worker_wake(hook: Callable[[str, list[Any]], Any]) -> None:
    """Call ``hook(job, args)`` when work becomes due now for the in-process worker."""
    if hook not in _worker_wake_hooks:
        _worker_wake_hooks.append(hook)


def notify_worker() -> None:
    """Wake the worker loop of this process: new work may be due."""
    _worker_wakeup.set()


def clear_worker_wakeup() -> None:
    """Forget past wake-ups (the loop calls this before it looks for work)."""
    _worker_wakeup.clear()


def wait_for_work(timeout: float) -> None:
    """Sleep until :func:`notify_worker` or ``timeout`` seconds (the loop).

    A wake-up that arrived after :func:`clear_worker_wakeup` cuts it short.
    """
    _worker_wakeup.wait(timeout)


# -- backends -------------------------------------------------------------------------
class WorkerBackend:
    """Wake the in-process worker loop, which finds due work in the database."""

    eta_tasks = False

    def check(self) -> list[CheckMessage]:
        """Nothing to check: the loop reads the database itself."""
        return []

    def wake(self, job: Job, args: list[Any], eta: float | None = None) -> bool:
        """Wake the loop; it computes when the job is due by itself.

        Work due now is told to the :func:`on_worker_wake` hooks (the live
        windows of workflow runs close: the loop runs one thing at a time).
        """
        notify_worker()
        if eta is None or eta <= clock.now():
            for hook in list(_worker_wake_hooks):
                hook(job, args)
        return True


class NullBackend:
    """Do nothing: a worker or sweeper in another process runs the work."""

    eta_tasks = False

    def check(self) -> list[CheckMessage]:
        """Nothing to check (``rivet.W004`` says when nothing dispatches)."""
        return []

    def wake(self, job: Job, args: list[Any], eta: float | None = None) -> bool:
        """Leave the job to the next sweep."""
        return True


class CeleryBackend:
    """Send the ``rivet.<job>`` Celery task (``django_rivet.tasks``)."""

    eta_tasks = True

    def check(self) -> list[CheckMessage]:
        """Warn when Celery has no broker to send to (``rivet.W006``)."""
        if celery_configured():
            return []
        return [
            checks.Warning(W006, hint=W006_HINT, obj="settings.RIVET", id="rivet.W006")
        ]

    def wake(self, job: Job, args: list[Any], eta: float | None = None) -> bool:
        """Send the task; log and return False when the broker refuses.

        No retries, so a broker outage never stalls the caller: the
        database still holds the work and the sweeper sends it again.
        """
        from celery import current_app

        name = f"rivet.{job}"
        options: dict[str, Any] = {"retry": False}
        if eta is not None and eta > clock.now():
            options["eta"] = clock.to_datetime(eta)
        try:
            task = current_app.tasks.get(name)
            if task is not None:
                task.apply_async(args, **options)
            else:
                current_app.send_task(name, args, **options)
        except Exception as exc:
            logger.warning(
                "could not send task=%s args=%r error=%r; the sweeper will pick it up",
                name,
                args,
                exc,
            )
            return False
        return True


W006 = "RIVET['DISPATCH_BACKEND'] is 'celery', but Celery has no broker."
W006_HINT = (
    "Set CELERY_BROKER_URL and load the project's Celery app in every process "
    "(import it in the project package's __init__.py); until then due work "
    "waits for a sweep."
)

BACKENDS: dict[str, str] = {
    "celery": "django_rivet.dispatch.CeleryBackend",
    "worker": "django_rivet.dispatch.WorkerBackend",
    "none": "django_rivet.dispatch.NullBackend",
    # Due work as Django tasks on another library's backend (docs/tasks.md).
    "tasks": "django_rivet.task_backend.dispatch.TasksDispatch",
}


def celery_configured() -> bool:
    """Tell whether the current Celery app has a broker to publish to.

    Without one, Celery would try AMQP on localhost for seconds per task.
    """
    try:
        from celery import current_app

        conf = current_app.conf
        return bool(conf.broker_url or conf.broker_write_url)
    except Exception:  # pragma: no cover - a broken Celery configuration
        return False


def configured_name() -> str:
    """Return the backend the settings select (a name or a dotted path)."""
    name = rivet_settings.DISPATCH_BACKEND
    if name is not None:
        return str(name)
    if rivet_settings.EMBEDDED_WORKER:
        return "worker"
    return "celery" if celery_configured() else "none"


_backend: DispatchBackend | None = None
_override: DispatchBackend | None = None
_lock = threading.Lock()


def backend() -> DispatchBackend:
    """Return the dispatch backend of this process."""
    global _backend
    if _override is not None:
        return _override
    current = _backend
    if current is None:
        with _lock:
            if _backend is None:
                name = configured_name()
                _backend = import_string(BACKENDS.get(name, name))()
            current = _backend
    assert current is not None
    return current


def use(chosen: DispatchBackend | str | None) -> None:
    """Force a backend for this process (``None``: follow the settings).

    ``rivet_worker`` uses ``"worker"``: it runs everything itself, and a
    project running it usually has no broker to send to.
    """
    global _override
    if isinstance(chosen, str):
        _override = import_string(BACKENDS.get(chosen, chosen))()
    else:
        _override = chosen


def overridden() -> bool:
    """Tell whether this process chose its backend itself (:func:`use`)."""
    return _override is not None


@receiver(setting_changed)
def _reset_backend(*, setting: str, **kwargs: Any) -> None:
    global _backend
    if setting in ("RIVET", "CELERY_BROKER_URL"):
        _backend = None


# -- helpers for the code that creates due work ----------------------------------
def wake(job: Job, args: list[Any], eta: float | None = None) -> bool:
    """Hand ``job(*args)`` to the backend now (see :class:`DispatchBackend`)."""
    return backend().wake(job, args, eta)


def wake_on_commit(job: Job, args: list[Any], eta: float | None = None) -> None:
    """Hand the job over once the current transaction commits."""
    db.on_commit(lambda: wake(job, args, eta), robust=True)


def within_eta_horizon(when: float) -> bool:
    """Tell whether work due at ``when`` gets its ETA message now."""
    return backend().eta_tasks and when - clock.now() <= ETA_HORIZON


def grace_period() -> timedelta:
    """Return how late due work must be before a sweep presumes it lost."""
    return timedelta(seconds=rivet_settings.SWEEP_INTERVAL)
