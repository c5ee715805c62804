"""The inspector for workflow queues and workflows on a schedule.

A queue's page shows its limits, its depth (queued workflows), how many run
(started, not finished) and how long the oldest has waited, each count
linking to the workflows. Workflow schedules, the code's (``cron=``) and
those created at run time (``workflows.schedules``), are listed together
and can be paused, resumed and triggered; those created at run time can be
added (through ``workflows.schedules.create``) and deleted too (the code's
follow the code).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.timesince import timesince

from .. import clock
from ..exceptions import RivetError
from ..models import (
    WORKFLOW_ADMITTED,
    ScheduledWorkflow,
    Workflow,
    WorkflowQueue,
    WorkflowStatus,
)
from ..workflows import queues, scheduled, schedules
from .rendering import NOTED_CHANGE_LIST, ReadOnlyAdmin


def _workflows_link(text: Any, **filters: str) -> str:
    url = reverse("admin:django_rivet_workflow_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, urlencode(filters), text)


def _count(**filters: Any) -> Coalesce:
    rows = (
        Workflow.objects.exclude(queue="")  # the partial indexes' condition
        .filter(queue=OuterRef("name"), **filters)
        .order_by()
        .values("queue")
        .annotate(count=Count("pk"))
        .values("count")[:1]
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


@admin.register(WorkflowQueue)
class WorkflowQueueAdmin(ReadOnlyAdmin):
    list_display = ["name", "limits", "depth", "running", "oldest_wait"]
    readonly_fields = ("name", "limits", "depth", "running", "oldest_wait")
    fields = readonly_fields
    ordering = ["name"]

    change_list_template = NOTED_CHANGE_LIST

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A queue's row is written by its first admission pass.
        used = WorkflowQueue.objects.values_list("name", flat=True)
        unused = set(queues.configured()) - set(used)
        return self.noted_changelist(
            request, extra_context, "Configured, not used yet", unused
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowQueue]:
        oldest = (
            Workflow.objects.filter(
                queue=OuterRef("name"), status=WorkflowStatus.QUEUED
            )
            .order_by("created_at")
            .values("created_at")[:1]
        )
        rows: QuerySet[WorkflowQueue] = (
            super()
            .get_queryset(request)
            .annotate(
                queued_count=_count(status=WorkflowStatus.QUEUED),
                running_count=_count(status__in=WORKFLOW_ADMITTED),
                oldest_queued_at=Subquery(oldest),
            )
        )
        return rows

    @admin.display(description="limits")
    def limits(self, obj: WorkflowQueue) -> str:
        config = queues.configured().get(obj.name)
        if config is None:
            return "not configured (its workflows wait)"
        parts = []
        for each, counted, rated in (
            ("", config.concurrency, config.rate_limit),
            (
                "per partition: ",
                config.partition_concurrency,
                config.partition_rate_limit,
            ),
        ):
            if counted is not None:
                parts.append(f"{each}concurrency {counted}")
            if rated is not None:
                parts.append(f"{each}{rated[0]} starts per {rated[1]:g} s")
        if config.worker_concurrency is not None:
            parts.append(f"{config.worker_concurrency} per worker process")
        return ", ".join(parts) or "none"

    @admin.display(description="depth (queued)", ordering="queued_count")
    def depth(self, obj: Any) -> str:
        return _workflows_link(
            obj.queued_count, queue=obj.name, status__exact=WorkflowStatus.QUEUED
        )

    @admin.display(description="running", ordering="running_count")
    def running(self, obj: Any) -> str:
        return _workflows_link(
            obj.running_count,
            queue=obj.name,
            status__in=",".join(str(status) for status in WORKFLOW_ADMITTED),
        )

    @admin.display(description="oldest wait", ordering="oldest_queued_at")
    def oldest_wait(self, obj: Any) -> str:
        if obj.oldest_queued_at is None:
            return "-"
        return timesince(obj.oldest_queued_at, clock.now_datetime())


# The list's columns; the change page adds the context and the row's times.
_SCHEDULED_COLUMNS = (
    "name",
    "workflow_name",
    "expression",
    "timezone",
    "queue",
    "next_tick_at",
    "paused",
    "last_tick_at",
    "last_workflow",
    "kind",
)


# What the add form asks: a schedule created at run time.
_ADD_FIELDS = (
    "name",
    "workflow_name",
    "expression",
    "timezone",
    "context",
    "queue",
    "catch_up",
)


class ScheduleAddForm(forms.ModelForm):  # type: ignore[type-arg]
    """Creates the schedule with ``workflows.schedules.create`` as it validates.

    Whatever refuses it (a taken name, an unknown workflow or queue, an
    expression that cannot be scheduled) is a form error naming it.
    """

    class Meta:
        model = ScheduledWorkflow
        fields = _ADD_FIELDS
        labels = {"expression": "Cron", "timezone": "Time zone"}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            schedules.create(
                data["name"],
                data["workflow_name"],
                data["expression"],
                tz=data.get("timezone") or "UTC",
                context=data.get("context"),
                queue=data.get("queue") or None,
                catch_up=bool(data.get("catch_up")),
            )
        except (RivetError, ValueError, TypeError) as exc:
            raise ValidationError(str(exc)) from exc
        return data

    def validate_unique(self) -> None:
        """Nothing: ``create`` refused a taken name already."""


@admin.register(ScheduledWorkflow)
class ScheduledWorkflowAdmin(ReadOnlyAdmin):
    list_display = _SCHEDULED_COLUMNS
    list_filter = ["paused", "from_code", "workflow_name"]
    search_fields = ["name", "workflow_name"]
    readonly_fields = (
        *_SCHEDULED_COLUMNS,
        "context",
        "catch_up",
        "created_at",
        "updated_at",
    )
    fields = readonly_fields
    actions = [
        "pause_schedules",
        "resume_schedules",
        "trigger_schedules",
        "delete_schedules",
    ]

    change_list_template = NOTED_CHANGE_LIST

    # -- adding a schedule created at run time (the only edit: the code's
    # follow the code, the others change by actions or apply()) --
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_rivet.add_scheduledworkflow")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields if obj is not None else _ADD_FIELDS

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else ()

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = ScheduleAddForm
        return super().get_form(request, obj, change, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: ScheduledWorkflow, form: Any, change: bool
    ) -> None:
        # The form created the row as it validated; read it back.
        obj.refresh_from_db()

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The code's rows follow the code at every worker round and sweep
        # (and before each action).
        written = ScheduledWorkflow.objects.values_list("name", flat=True)
        label = "In the code, written at the next worker round or sweep"
        new = set(scheduled.definitions()) - set(written)
        return self.noted_changelist(request, extra_context, label, new)

    @admin.display(description="last workflow")
    def last_workflow(self, obj: ScheduledWorkflow) -> str:
        if not obj.last_workflow_id:
            return "-"
        url = reverse("admin:django_rivet_workflow_change", args=[obj.last_workflow_id])
        return format_html('<a href="{}">{}</a>', url, obj.last_workflow_id)

    @admin.display(description="from")
    def kind(self, obj: ScheduledWorkflow) -> str:
        if not obj.from_code:
            return "run time"
        if obj.name in scheduled.definitions():
            return "the code"
        return "the code (removed)"

    def has_control_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.change_scheduledworkflow")

    def _each(
        self, request: HttpRequest, queryset: QuerySet[ScheduledWorkflow], verb: str
    ) -> None:
        operation = {
            "pause": scheduled.pause,
            "resume": scheduled.resume,
            "trigger": scheduled.trigger,
            "delete": schedules.delete,
        }[verb]
        done = [
            result if isinstance(result, str) else name
            for name, result in self.apply_each(
                request,
                queryset.values_list("name", flat=True),
                verb,
                operation,
                "{key} was not {verb}d: nothing to do.",
            )
        ]
        if done:
            self.message_user(request, f"{verb.capitalize()}: {', '.join(done)}.")

    @admin.action(description="Pause the selected schedules")
    def pause_schedules(
        self, request: HttpRequest, queryset: QuerySet[ScheduledWorkflow]
    ) -> None:
        self._each(request, queryset, "pause")

    @admin.action(description="Resume the selected schedules (from the next tick)")
    def resume_schedules(
        self, request: HttpRequest, queryset: QuerySet[ScheduledWorkflow]
    ) -> None:
        self._each(request, queryset, "resume")

    @admin.action(description="Trigger the selected schedules now")
    def trigger_schedules(
        self, request: HttpRequest, queryset: QuerySet[ScheduledWorkflow]
    ) -> None:
        self._each(request, queryset, "trigger")

    @admin.action(description="Delete the selected schedules (run time ones)")
    def delete_schedules(
        self, request: HttpRequest, queryset: QuerySet[ScheduledWorkflow]
    ) -> None:
        self._each(request, queryset, "delete")

    pause_schedules.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    resume_schedules.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    trigger_schedules.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    delete_schedules.allowed_permissions = ["control"]  # type: ignore[attr-defined]
