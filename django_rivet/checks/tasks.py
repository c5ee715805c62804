"""Django's Tasks framework on django-rivet (rivet.E901, rivet.E902).

The ``TASKS`` entries naming :class:`~django_rivet.task_backend.RivetTaskBackend`:
``rivet.E902`` when neither ``django.tasks`` (Django >= 6.0) nor the
``django-tasks`` backport is installed; ``rivet.E901`` for an entry's
``QUEUES`` or ``OPTIONS`` -- the backend's own ``check()``, which Django's
tasks checks run, and which this check runs where they do not (the
backport's app not installed).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Tags, register

from ..task_backend import compat
from ..task_backend.options import E901, E901_HINT, options_problems
from .base import message

__all__ = ["BACKEND", "E901", "E901_HINT", "E902", "E902_HINT", "check_tasks"]

BACKEND = "django_rivet.task_backend.RivetTaskBackend"
E902 = (
    "TASKS[{alias!r}] names RivetTaskBackend, but Django's Tasks framework is missing."
)
E902_HINT = (
    "Django >= 6.0 ships it (django.tasks); on Django 5.2 install the "
    "django-tasks backport: pip install 'django-rivet[tasks]', and add "
    "'django_tasks' to INSTALLED_APPS."
)


def _entries() -> list[tuple[str, dict[str, Any]]]:
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return []
    return [
        (alias, entry)
        for alias, entry in tasks.items()
        if isinstance(entry, dict) and entry.get("BACKEND") == BACKEND
    ]


@register(Tags.compatibility)
def check_tasks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the ``TASKS`` entries that use django-rivet's backend."""
    found: list[CheckMessage] = []
    for alias, entry in _entries():
        if not compat.AVAILABLE:
            found.append(
                message(
                    "rivet.E902", E902.format(alias=alias), E902_HINT, "settings.TASKS"
                )
            )
        elif compat.SOURCE == "django_tasks" and not apps.is_installed("django_tasks"):
            queues = entry.get("QUEUES", [compat.DEFAULT_TASK_QUEUE_NAME])
            found += options_problems(alias, queues, entry.get("OPTIONS", {}))
    return found
