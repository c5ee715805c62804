"""The inspector for schedules, cron jobs and their runs, queue messages."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from ..models import CronJob, CronRun, QueueMessage, Schedule, ScheduleStatus
from ..scheduling.cron import history_limit
from ..scheduling.schedule_runs import fire_schedule
from .rendering import ReadOnlyAdmin, pretty, pretty_cbor
from .retention import RetentionAdmin


@admin.register(Schedule)
class ScheduleAdmin(RetentionAdmin):
    retention_table = "Schedule"
    list_display = ["run_at", "actor", "action", "status", "fired_at", "finished_at"]
    list_filter = ["status", "action"]
    list_select_related = ["actor"]
    search_fields = ["=id", "=actor__id", "actor__name", "action"]
    ordering = ["-run_at"]
    readonly_fields = (
        "id",
        "actor",
        "action",
        "decoded_args",
        "run_at",
        "status",
        "enqueued",
        "created_at",
        "fired_at",
        "finished_at",
        "error",
    )
    fields = readonly_fields
    actions = ["fire_now"]

    @admin.display(description="args")
    def decoded_args(self, obj: Schedule) -> str:
        return pretty_cbor(obj.args)

    def has_fire_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.change_schedule")

    @admin.action(description="Fire selected pending schedules now")
    def fire_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:

        outcomes: dict[str, int] = {}
        pending = queryset.filter(status=ScheduleStatus.PENDING)
        for schedule_id in pending.values_list("id", flat=True):
            outcome = fire_schedule(schedule_id, force=True).value
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        skipped = queryset.count() - sum(outcomes.values())
        summary = ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items()))
        self.message_user(
            request,
            f"Fired: {summary or 'nothing'}; {skipped} not pending.",
            messages.WARNING if "error" in outcomes else messages.SUCCESS,
        )

    fire_now.allowed_permissions = ["fire"]  # type: ignore[attr-defined]


@admin.register(CronJob)
class CronJobAdmin(ReadOnlyAdmin):
    list_display = [
        "actor",
        "name",
        "kind",
        "cadence",
        "action",
        "next_run_at",
        "running",
    ]
    list_filter = ["kind", "running"]
    list_select_related = ["actor"]
    search_fields = ["=actor__id", "actor__name", "name", "action"]
    readonly_fields = (
        "actor",
        "name",
        "kind",
        "expression",
        "interval",
        "timezone",
        "action",
        "decoded_args",
        "kept_history",
        "next_run_at",
        "running",
        "created_at",
        "updated_at",
        "recent_runs",
    )
    fields = readonly_fields

    @admin.display(description="cadence")
    def cadence(self, obj: CronJob) -> str:
        return obj.expression or f"every {obj.interval:g} s"

    @admin.display(description="args")
    def decoded_args(self, obj: CronJob) -> str:
        return pretty_cbor(obj.args)

    @admin.display(description="max history")
    def kept_history(self, obj: CronJob) -> str:
        keep = history_limit(obj.max_history)
        shown = "all runs" if keep is None else f"{keep} runs"
        return shown if obj.max_history is not None else f"{shown} (CRON_HISTORY)"

    @admin.display(description="history (latest 50)")
    def recent_runs(self, obj: CronJob) -> str:
        runs = obj.runs.order_by("-scheduled_at")[:50]
        if not runs:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    r.scheduled_at,
                    r.fired_at or "-",
                    r.finished_at or "-",
                    r.result,
                    r.error,
                )
                for r in runs
            ),
        )
        return format_html(
            "<table><thead><tr><th>scheduled</th><th>fired</th><th>finished</th>"
            "<th>result</th><th>error</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )


@admin.register(CronRun)
class CronRunAdmin(RetentionAdmin):
    retention_table = "CronRun"
    list_display = [
        "scheduled_at",
        "job",
        "action",
        "result",
        "fired_at",
        "finished_at",
    ]
    list_filter = ["result"]
    list_select_related = ["job", "job__actor"]
    search_fields = ["job__name", "=job__actor__id", "action"]
    ordering = ["-scheduled_at"]
    readonly_fields = (
        "job",
        "action",
        "scheduled_at",
        "fired_at",
        "finished_at",
        "result",
        "error",
    )
    fields = readonly_fields


@admin.register(QueueMessage)
class QueueMessageAdmin(RetentionAdmin):
    retention_table = "QueueMessage"
    list_display = ["id", "actor", "queue", "status", "created_at", "finished_at"]
    list_filter = ["status", "queue"]
    list_select_related = ["actor"]
    search_fields = ["=actor__id", "actor__name", "queue"]
    ordering = ["-id"]
    readonly_fields = (
        "id",
        "actor",
        "queue",
        "status",
        "decoded_body",
        "decoded_response",
        "shown_error",
        "created_at",
        "finished_at",
    )
    fields = readonly_fields

    @admin.display(description="body")
    def decoded_body(self, obj: QueueMessage) -> str:
        return pretty_cbor(obj.body)

    @admin.display(description="response")
    def decoded_response(self, obj: QueueMessage) -> str:
        return pretty_cbor(obj.response)

    @admin.display(description="error")
    def shown_error(self, obj: QueueMessage) -> str:
        return pretty(obj.error) if obj.error else "-"


# -- workflows ---------------------------------------------------------------------
