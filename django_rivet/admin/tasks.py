"""The inspector for Django's tasks (``RivetTaskBackend``): attempts, retry.

Each task is a ``rivet.task`` workflow; this list shows only those, with
Django's status, every attempt (worker, start, error with traceback) and a
"Retry now" action for failed ones, which recovers the workflow: its last
attempt runs again on a worker. The workflow's own page (history, input)
is linked from each task.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from ..models import DjangoTask, WorkflowStatus
from ..task_backend.results import recorded, status_of
from ..workflows import operations
from .rendering import ReadOnlyAdmin, pretty
from .workflows import workflow_link

__all__ = ["DjangoTaskAdmin"]


@admin.register(DjangoTask)
class DjangoTaskAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "task_status",
        "priority",
        "created_at",
        "finished_at",
        "run_count",
    ]
    list_filter = ["status"]
    search_fields = ["=id"]
    ordering = ["-created_at"]
    readonly_fields = (
        "id",
        "task_status",
        "workflow",
        "task",
        "arguments",
        "created_at",
        "finished_at",
        "lease_owner",
        "attempts",
        "return_value",
    )
    fields = readonly_fields
    actions = ["retry_tasks"]

    def _recorded(self, obj: DjangoTask) -> Any:
        # Several fields of one page read the record: once.
        cache = getattr(obj, "_rivet_task", None)
        if cache is None:
            cache = recorded(obj.pk)
            setattr(obj, "_rivet_task", cache)  # noqa: B010
        return cache

    @admin.display(description="status", ordering="status")
    def task_status(self, obj: DjangoTask) -> str:
        return f"{status_of(obj.status).value} ({obj.status})"

    @admin.display(description="workflow")
    def workflow(self, obj: DjangoTask) -> str:
        return workflow_link(obj.pk)

    @admin.display(description="task")
    def task(self, obj: DjangoTask) -> str:
        spec = self._recorded(obj)[0]
        return f"{spec.path} (queue {spec.queue_name!r}, priority {spec.priority})"

    @admin.display(description="arguments")
    def arguments(self, obj: DjangoTask) -> str:
        spec = self._recorded(obj)[0]
        return pretty({"args": spec.args, "kwargs": spec.kwargs})

    @admin.display(description="attempts")
    def attempts(self, obj: DjangoTask) -> str:
        attempts = self._recorded(obj)[1]
        if not attempts.worker_ids:
            return "-"
        errors = attempts.errors + [None] * len(attempts.worker_ids)
        return format_html(
            "<ol>{}</ol>",
            format_html_join(
                "",
                "<li>worker {}: {}</li>",
                (
                    (
                        worker,
                        "ran"
                        if error is None
                        else format_html(
                            "{}<pre>{}</pre>",
                            error.exception_class_path,
                            error.traceback,
                        ),
                    )
                    for worker, error in zip(attempts.worker_ids, errors, strict=False)
                ),
            ),
        )

    @admin.display(description="return value")
    def return_value(self, obj: DjangoTask) -> str:
        if obj.status != WorkflowStatus.COMPLETED:
            return "-"
        return pretty(self._recorded(obj)[2])

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.change_djangotask")

    @admin.action(description="Retry selected failed tasks now", permissions=["retry"])
    def retry_tasks(self, request: HttpRequest, queryset: QuerySet[DjangoTask]) -> None:
        done = self.apply_each(
            request,
            queryset.values_list("id", flat=True),
            "retry",
            operations.recover,
            "Did not retry {key} (it has not failed).",
        )
        self.message_user(request, f"Retrying {len(done)} task(s).")
