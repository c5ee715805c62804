"""Django's Tasks framework: ``django.tasks`` (Django >= 6.0) or the backport.

Django 5.2 projects get the same API from the ``django-tasks`` package
(``pip install django-rivet[tasks]``, import ``django_tasks``). Everything
the backend uses of either comes through this module, under the names of
``django.tasks``; :data:`AVAILABLE` says whether either is installed (the
system checks say so when a ``TASKS`` entry names this backend without
them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "AVAILABLE",
    "DEFAULT_TASK_QUEUE_NAME",
    "SOURCE",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

# Where each name lives: (module, name) in django.tasks, then in the backport.
_WHERE: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "DEFAULT_TASK_QUEUE_NAME": (("django.tasks", ""), ("django_tasks", "")),
    "Task": (("django.tasks", ""), ("django_tasks.base", "")),
    "TaskContext": (("django.tasks", ""), ("django_tasks", "")),
    "TaskResult": (("django.tasks", ""), ("django_tasks", "")),
    "TaskResultStatus": (("django.tasks", ""), ("django_tasks", "")),
    "task_backends": (("django.tasks", ""), ("django_tasks", "")),
    "task": (("django.tasks", ""), ("django_tasks", "")),
    "BaseTaskBackend": (("django.tasks.backends.base", ""),) * 2,
    "TaskError": (("django.tasks.base", ""), ("django_tasks.base", "")),
    "InvalidTask": (
        ("django.tasks.exceptions", ""),
        ("django_tasks.exceptions", "InvalidTaskError"),
    ),
    "TaskResultDoesNotExist": (("django.tasks.exceptions", ""),) * 2,
    "task_enqueued": (("django.tasks.signals", ""),) * 2,
    "task_finished": (("django.tasks.signals", ""),) * 2,
    "task_started": (("django.tasks.signals", ""),) * 2,
    "normalize_json": (("django.utils.json", ""), ("django_tasks.utils", "")),
}


def _load(which: int) -> dict[str, Any]:
    """Import every name from django.tasks (0) or the backport (1)."""
    found = {}
    for name, places in _WHERE.items():
        module, attribute = places[which]
        module = module.replace("django.tasks", "django_tasks") if which else module
        found[name] = getattr(importlib.import_module(module), attribute or name)
    return found


if TYPE_CHECKING:
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    AVAILABLE = True
    SOURCE = "django.tasks"
else:
    AVAILABLE, SOURCE = False, ""
    for _index, _source in enumerate(("django.tasks", "django_tasks")):
        try:
            globals().update(_load(_index))
        except ImportError:
            continue
        AVAILABLE, SOURCE = True, _source
        break
    else:

        class BaseTaskBackend:  # the backend class still imports
            def __init__(self, alias, params):
                raise ImportError(
                    "RivetTaskBackend needs Django >= 6.0 (django.tasks) or "
                    "the django-tasks backport: pip install django-rivet[tasks]"
                )
