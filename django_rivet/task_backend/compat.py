"""Django's Tasks framework: ``django.tasks`` (Django >= 6.0) or the backport.

Django 5.2 projects get the same API from the ``django-tasks`` package
(``pip install django-rivet[tasks]``, import ``django_tasks``). Everything
the backend uses of either comes through this module, under the names of
``django.tasks``; :data:`AVAILABLE` says whether either is installed (the
system checks say so when a ``TASKS`` entry names this backend without
them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

if TYPE_CHECKING:
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
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
    try:
        from django.tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            Task,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        AVAILABLE, SOURCE = True, "django.tasks"
    except ImportError:
        try:
            from django_tasks import (
                DEFAULT_TASK_QUEUE_NAME,
                TaskContext,
                TaskResult,
                TaskResultStatus,
                task_backends,
            )
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_enqueued, task_finished, task_started
            from django_tasks.utils import normalize_json

            AVAILABLE, SOURCE = True, "django_tasks"
        except ImportError:
            AVAILABLE, SOURCE = False, ""

            class BaseTaskBackend:  # the backend class still imports
                def __init__(self, alias, params):
                    raise ImportError(
                        "RivetTaskBackend needs Django >= 6.0 (django.tasks) or "
                        "the django-tasks backport: pip install django-rivet[tasks]"
                    )
