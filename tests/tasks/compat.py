"""``task`` and friends from ``django.tasks`` (Django >= 6) or the backport."""

from django_rivet.task_backend.compat import (  # noqa: F401
    SOURCE,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)

if SOURCE == "django.tasks":
    from django.tasks import TaskContext, default_task_backend, task  # noqa: F401
else:
    from django_tasks import TaskContext, default_task_backend, task  # noqa: F401
