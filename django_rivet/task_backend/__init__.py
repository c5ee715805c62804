"""Django's Tasks framework on django-rivet: ``RivetTaskBackend``.

::

    TASKS = {
        "default": {
            "BACKEND": "django_rivet.task_backend.RivetTaskBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"max_retries": 0},
        }
    }

One class serves ``django.tasks`` (Django >= 6.0) and the ``django-tasks``
backport (Django 5.2; ``pip install django-rivet[tasks]``). Each enqueued
task is a durable workflow of the built-in ``rivet.task`` definition
(:mod:`.runner`), so it runs where django-rivet's work runs (Celery workers,
``rivet_worker``, the embedded worker) with its leases, crash recovery,
workflow queues, retention and admin; ``TaskResult.id`` is the workflow id.
See docs/tasks.md.

This package sits with the entry points: it uses the workflows' front door
and the retry policy of the scheduler, and nothing below imports it.
"""

from __future__ import annotations

from typing import Any, ParamSpec, TypeVar, cast

from asgiref.sync import sync_to_async
from django.core.checks import CheckMessage

from .. import clock
from ..workflows import operations, registry
from ..workflows import queues as workflow_queues
from . import compat
from .options import options_problems
from .results import TASK_WORKFLOW, Attempts, TaskSpec, read
from .runner import run_task

__all__ = ["TASK_WORKFLOW", "RivetTaskBackend", "register_workflow"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def register_workflow() -> None:
    """Register the built-in ``rivet.task`` workflow (app ready; idempotent)."""
    if registry.all_workflows().get(TASK_WORKFLOW) is not run_task:
        registry.definitions.register_discovered(run_task)


class RivetTaskBackend(compat.BaseTaskBackend):
    """Run Django tasks as django-rivet workflows (durable, retried, leased)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.max_retries = int(self.options.get("max_retries", 0) or 0)

    def enqueue(
        self, task: compat.Task[_P, _R], args: list[Any], kwargs: dict[str, Any]
    ) -> compat.TaskResult[_P, _R]:
        """Store the task as a workflow, in the caller's transaction.

        Its first run is dispatched when that transaction commits: a
        rollback means it never runs. A ``queue_name`` configured in
        ``RIVET["WORKFLOW_QUEUES"]`` gets that queue's limits (its priority
        order among them); other queues are unlimited.
        """
        self.validate_task(task)
        spec = TaskSpec(
            task.module_path,
            cast(list[Any], compat.normalize_json(list(args))),
            cast(dict[str, Any], compat.normalize_json(dict(kwargs))),
            self.alias,
            task.queue_name,
            task.priority,
            self.max_retries,
            None if task.run_after is None else clock.to_timestamp(task.run_after),
        )
        queue = task.queue_name
        limited = queue in workflow_queues.configured()
        result_id, _ = operations.start(
            run_task,
            spec.to_input(),
            queue=queue if limited else None,
            # Django's priorities run larger first; django-rivet's lower.
            priority=-task.priority if limited else 0,
            order=-task.priority,
            run_after=task.run_after,
        )
        result = Attempts().result(
            task,
            result_id,
            spec,
            compat.TaskResultStatus.READY,
            enqueued_at=clock.now_datetime(),
        )
        compat.task_enqueued.send(sender=type(self), task_result=result)
        return cast("compat.TaskResult[_P, _R]", result)

    def get_result(self, result_id: str) -> compat.TaskResult[..., Any]:
        """Return the task's result as stored now (``TaskResultDoesNotExist``)."""
        return read(result_id)

    async def aget_result(self, result_id: str) -> compat.TaskResult[..., Any]:
        """Async :meth:`get_result`."""
        return await sync_to_async(read)(result_id)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Check this backend's ``TASKS`` entry (``rivet.E901``)."""
        found = list(super().check(**kwargs))
        return found + options_problems(self.alias, self.queues, self.options)
