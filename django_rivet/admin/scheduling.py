"""The inspector for schedules, cron jobs and their runs, queue messages.

Failed schedules and messages (filter by status ``failed``) show their last
error and traceback; "Retry now" runs them again through the scheduler.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from ..models import CronJob, CronRun, QueueMessage, Schedule, ScheduleStatus
from ..scheduling import retries
from ..scheduling.cron import history_limit
from ..scheduling.queue_delivery import retry_messages
from ..scheduling.schedule_runs import fire_schedule, retry_schedules
from .rendering import ReadOnlyAdmin, cbor_display, pretty
from .retention import RetentionAdmin


@admin.display(description="traceback")
def _shown_traceback(page: Any, obj: Any) -> str:
    text = obj.traceback
    return format_html("<pre>{}</pre>", text) if text else "-"


def _report_retried(
    admin_page: RetentionAdmin, request: HttpRequest, retried: int, selected: int
) -> None:
    admin_page.message_user(
        request,
        f"Retrying {retried}; {selected - retried} not failed.",
        messages.SUCCESS if retried else messages.WARNING,
    )


@admin.register(Schedule)
class ScheduleAdmin(RetentionAdmin):
    retention_table = "Schedule"
    list_display = [
        "run_at",
        "actor",
        "action",
        "status",
        "attempts",
        "fired_at",
        "finished_at",
        "short_error",
    ]
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
        "attempts",
        "retries",
        "error",
        "shown_traceback",
    )
    fields = readonly_fields
    actions = ["fire_now", "retry_now"]

    decoded_args = cbor_display("args")

    @admin.display(description="last error")
    def short_error(self, obj: Schedule) -> str:
        return obj.error[:120] or "-"

    @admin.display(description="max retries")
    def retries(self, obj: Schedule) -> str:
        allowed = retries.retries_allowed(obj.max_retries)
        return str(allowed) if obj.max_retries is not None else f"{allowed} (setting)"

    shown_traceback = _shown_traceback

    @admin.action(description="Retry selected failed schedules now")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        _report_retried(self, request, retry_schedules(queryset), queryset.count())

    retry_now.allowed_permissions = ["fire"]  # type: ignore[attr-defined]

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
        "retry_at",
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
        "max_retries",
        "retry_at",
        "retry_for",
        "attempts",
        "created_at",
        "updated_at",
        "recent_runs",
    )
    fields = readonly_fields

    @admin.display(description="cadence")
    def cadence(self, obj: CronJob) -> str:
        return obj.expression or f"every {obj.interval:g} s"

    decoded_args = cbor_display("args")

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
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td></tr>",
            (
                (
                    r.scheduled_at,
                    r.fired_at or "-",
                    r.finished_at or "-",
                    r.result,
                    r.attempts,
                    r.error,
                )
                for r in runs
            ),
        )
        return format_html(
            "<table><thead><tr><th>scheduled</th><th>fired</th><th>finished</th>"
            "<th>result</th><th>attempts</th><th>error</th></tr></thead>"
            "<tbody>{}</tbody></table>",
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
        "attempts",
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
        "attempts",
        "error",
        "shown_traceback",
    )
    fields = readonly_fields

    shown_traceback = _shown_traceback


@admin.register(QueueMessage)
class QueueMessageAdmin(RetentionAdmin):
    retention_table = "QueueMessage"
    list_display = [
        "id",
        "actor",
        "queue",
        "status",
        "attempts",
        "created_at",
        "finished_at",
        "short_error",
    ]
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
        "attempts",
        "retry_at",
        "shown_error",
        "shown_traceback",
        "created_at",
        "finished_at",
    )
    fields = readonly_fields
    actions = ["retry_now"]

    decoded_body = cbor_display("body")

    decoded_response = cbor_display("response")

    @admin.display(description="error")
    def shown_error(self, obj: QueueMessage) -> str:
        return pretty(obj.error) if obj.error else "-"

    @admin.display(description="last error")
    def short_error(self, obj: QueueMessage) -> str:
        return str((obj.error or {}).get("detail", "-"))[:120]

    shown_traceback = _shown_traceback

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.change_queuemessage")

    @admin.action(description="Retry selected failed messages now")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[QueueMessage]) -> None:
        _report_retried(self, request, retry_messages(queryset), queryset.count())

    retry_now.allowed_permissions = ["retry"]  # type: ignore[attr-defined]


# -- workflows ---------------------------------------------------------------------
