"""The admin inspector: runtime records, read-only and decoded.

Records are written by the runtime, never edited by hand: every model admin
here is view-only (staff with the view permission can look; nobody can add,
change or delete rows directly). Changes go through admin actions that call
the runtime, so they keep its guarantees (one at a time, atomic, hooks run).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from . import clock
from .encoding import cbor_loads, json_dumps
from .models import (
    Actor,
    ActorEvent,
    ActorKV,
    Connection,
    CronJob,
    CronRun,
    QueueMessage,
    Schedule,
    ScheduleStatus,
    Workflow,
    WorkflowMessage,
)


def pretty(value: Any) -> str:
    """Render a decoded value as indented JSON in a ``<pre>`` block."""
    try:
        text = json_dumps(value, indent=2)
    except (TypeError, ValueError):
        text = repr(value)
    return format_html("<pre>{}</pre>", text)


def pretty_cbor(data: Any) -> str:
    """Decode stored CBOR bytes and render them (or say why not)."""
    raw = bytes(data or b"")
    if not raw:
        return "-"
    try:
        return pretty(cbor_loads(raw, max_depth=400))
    except Exception as exc:  # show the bytes rather than break the page
        return format_html("<pre>undecodable ({}): {}</pre>", exc, raw[:200].hex())


def render_key(data: Any) -> str:
    """Show a KV key as text when it is UTF-8, else as hex."""
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only admin for runtime records."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Actor)
class ActorAdmin(ReadOnlyAdmin):
    list_display = ["name", "key", "id", "version", "kv_size", "updated_at"]
    list_filter = ["name"]
    search_fields = ["name", "key", "=id"]
    ordering = ["name", "key"]
    readonly_fields = (
        "id",
        "name",
        "key_parts",
        "decoded_state",
        "version",
        "event_seq",
        "kv_size",
        "created_at",
        "updated_at",
    )
    fields = readonly_fields
    actions = ["destroy_actors"]

    @admin.display(description="state")
    def decoded_state(self, obj: Actor) -> str:
        return pretty_cbor(obj.state)

    @admin.action(description="Destroy selected actors (runs on_destroy)")
    def destroy_actors(self, request: HttpRequest, queryset: QuerySet[Actor]) -> None:
        from .actors.runtime import ActorRef, RunHook, invoke

        destroyed = 0
        for actor_id in queryset.values_list("id", flat=True):
            try:
                invoke(ActorRef.by_id(actor_id), RunHook("destroy"))
            except Exception as exc:
                self.message_user(
                    request, f"Could not destroy {actor_id}: {exc}", messages.ERROR
                )
            else:
                destroyed += 1
        self.message_user(request, f"Destroyed {destroyed} actor(s).", messages.SUCCESS)

    def has_destroy_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.delete_actor")

    destroy_actors.allowed_permissions = ["destroy"]  # type: ignore[attr-defined]


@admin.register(ActorKV)
class ActorKVAdmin(ReadOnlyAdmin):
    list_display = ["actor", "shown_key", "size"]
    list_select_related = ["actor"]
    search_fields = ["=actor__id", "actor__name"]
    readonly_fields = ("actor", "shown_key", "decoded_value")
    fields = readonly_fields

    @admin.display(description="key")
    def shown_key(self, obj: ActorKV) -> str:
        return render_key(obj.key)

    @admin.display(description="bytes")
    def size(self, obj: ActorKV) -> int:
        return len(bytes(obj.key)) + len(bytes(obj.value))

    @admin.display(description="value")
    def decoded_value(self, obj: ActorKV) -> str:
        return pretty_cbor(obj.value)


@admin.register(Connection)
class ConnectionAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "actor",
        "server_id",
        "encoding",
        "created_at",
        "last_seen_at",
    ]
    list_select_related = ["actor"]
    list_filter = ["server_id"]
    readonly_fields = (
        "id",
        "actor",
        "channel_name",
        "server_id",
        "encoding",
        "subscriptions",
        "decoded_params",
        "decoded_state",
        "created_at",
        "last_seen_at",
    )
    fields = readonly_fields

    @admin.display(description="params")
    def decoded_params(self, obj: Connection) -> str:
        return pretty_cbor(obj.params)

    @admin.display(description="state")
    def decoded_state(self, obj: Connection) -> str:
        return pretty_cbor(obj.state)


@admin.register(ActorEvent)
class ActorEventAdmin(ReadOnlyAdmin):
    list_display = ["actor", "seq", "name", "created_at"]
    list_select_related = ["actor"]
    search_fields = ["=actor__id", "name"]
    readonly_fields = ("actor", "seq", "name", "decoded_args", "created_at")
    fields = readonly_fields

    @admin.display(description="args")
    def decoded_args(self, obj: ActorEvent) -> str:
        return pretty_cbor(obj.args)


# -- workflows (the workflow runtime) ---------------------------------------------
# -- schedules, cron and queues -------------------------------------------------
@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
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
        from .scheduler import fire_schedule

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
        "max_history",
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
class CronRunAdmin(ReadOnlyAdmin):
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
class QueueMessageAdmin(ReadOnlyAdmin):
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
# Rows and history are read-only; the actions go through the runtime's
# operations, which take the workflow's lease first, so they never race a run.


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return f"{clock.to_datetime(timestamp):%Y-%m-%d %H:%M:%S.%f}"[:-3]


def render_history(entries: list[Any]) -> str:
    """Render decoded history entries as a table."""
    if not entries:
        return "-"
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                entry.seq,
                entry.kind,
                entry.location,
                entry.status,
                entry.attempts,
                _when(entry.created_at),
                _when(entry.completed_at),
                pretty(entry.output),
                pretty(entry.error) if entry.error else "-",
            )
            for entry in entries
        ),
    )
    return format_html(
        "<table><thead><tr><th>#</th><th>kind</th><th>location</th><th>status</th>"
        "<th>attempts</th><th>created</th><th>completed</th><th>output</th>"
        "<th>error</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "name",
        "status",
        "wake_at",
        "waiting_for",
        "run_count",
        "retry_count",
        "updated_at",
    ]
    list_filter = ["status", "name"]
    search_fields = ["=id", "name"]
    ordering = ["-created_at"]
    readonly_fields = (
        "id",
        "name",
        "status",
        "engine_state",
        "created_at",
        "updated_at",
        "finished_at",
        "wake_at",
        "waiting_for",
        "cancel_requested",
        "lease_owner",
        "lease_expires_at",
        "run_count",
        "retry_count",
        "last_error",
        "decoded_input",
        "decoded_output",
        "decoded_error",
        "inbox",
        "decoded_history",
    )
    fields = readonly_fields
    actions = [
        "cancel_workflows",
        "recover_workflows",
        "wake_workflows",
        "replay_workflow",
        "send_message",
    ]

    def _snapshot(self, obj: Workflow) -> Any:
        from .workflows import WorkflowHandle

        # Several fields of one page show the snapshot: read it once.
        cache = getattr(obj, "_rivet_snapshot", None)
        if cache is None:
            cache = WorkflowHandle(obj.pk, obj.name).snapshot()
            setattr(obj, "_rivet_snapshot", cache)  # noqa: B010
        return cache

    @admin.display(description="engine state")
    def engine_state(self, obj: Workflow) -> str:
        return str(self._snapshot(obj).state)

    @admin.display(description="input")
    def decoded_input(self, obj: Workflow) -> str:
        return pretty(self._snapshot(obj).input)

    @admin.display(description="output")
    def decoded_output(self, obj: Workflow) -> str:
        return pretty(self._snapshot(obj).output)

    @admin.display(description="error")
    def decoded_error(self, obj: Workflow) -> str:
        error = self._snapshot(obj).error
        return pretty(error) if error else "-"

    @admin.display(description="inbox")
    def inbox(self, obj: Workflow) -> str:
        messages = obj.messages.order_by("id")[:50]
        return pretty([{"id": m.pk, "name": m.name} for m in messages])

    @admin.display(description="history")
    def decoded_history(self, obj: Workflow) -> str:
        from .workflows import WorkflowHandle

        try:
            return render_history(WorkflowHandle(obj.pk, obj.name).history())
        except Exception as exc:  # show why rather than break the page
            return format_html("<pre>undecodable history: {}</pre>", exc)

    # Actions -------------------------------------------------------------------

    def has_control_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.change_workflow")

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Workflow],
        verb: str,
        operation: Any,
    ) -> None:
        done = 0
        for workflow_id in queryset.values_list("id", flat=True):
            try:
                changed = operation(workflow_id)
            except Exception as exc:
                self.message_user(
                    request, f"Could not {verb} {workflow_id}: {exc}", messages.ERROR
                )
                continue
            if changed is False:
                self.message_user(
                    request,
                    f"Did not {verb} {workflow_id} (its status does not allow it).",
                    messages.WARNING,
                )
            else:
                done += 1
        self.message_user(request, f"{verb.capitalize()}: {done} workflow(s).")

    @admin.action(description="Cancel selected workflows")
    def cancel_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:
        from .workflow_runtime import operations

        self._each(request, queryset, "cancel", operations.cancel)

    @admin.action(description="Recover selected failed workflows")
    def recover_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:
        from .workflow_runtime import operations

        self._each(request, queryset, "recover", operations.recover)

    @admin.action(description="Wake selected workflows now")
    def wake_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:
        from .workflow_runtime import operations

        self._each(request, queryset, "wake", operations.wake)

    @admin.action(description="Replay the selected workflow from a step")
    def replay_workflow(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> TemplateResponse | None:
        from .workflows import WorkflowHandle

        if queryset.count() != 1:
            self.message_user(
                request, "Select exactly one workflow to replay.", messages.WARNING
            )
            return None
        obj = queryset.get()
        handle = WorkflowHandle(obj.pk, obj.name)
        if request.POST.get("apply"):
            entry_id = request.POST.get("entry_id") or None
            try:
                handle.replay_from(entry_id)
            except Exception as exc:
                self.message_user(
                    request, f"Could not replay {obj.pk}: {exc}", messages.ERROR
                )
            else:
                where = f"step {entry_id}" if entry_id else "the start"
                self.message_user(
                    request, f"Replaying {obj.pk} from {where}.", messages.SUCCESS
                )
            return None
        steps = [entry for entry in handle.history() if entry.kind == "step"]
        return TemplateResponse(
            request,
            "admin/django_rivet/workflow/replay_from.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Replay workflow {obj.pk}",
                "opts": self.model._meta,
                "workflow": obj,
                "steps": steps,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(description="Send a message to the selected workflows")
    def send_message(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> TemplateResponse | None:
        from .encoding import json_loads
        from .exceptions import MalformedRequest
        from .workflow_runtime import operations

        error = ""
        if request.POST.get("apply"):
            name = (request.POST.get("message_name") or "").strip()
            try:
                body = json_loads(request.POST.get("message_body") or "null")
            except (MalformedRequest, ValueError) as exc:
                error = f"The body is not valid JSON: {exc}"
            else:
                if not name:
                    error = "A message needs a name."
            if not error:
                self._each(
                    request,
                    queryset,
                    "send to",
                    lambda workflow_id: operations.send(workflow_id, name, body),
                )
                return None
        return TemplateResponse(
            request,
            "admin/django_rivet/workflow/send_message.html",
            {
                **self.admin_site.each_context(request),
                "title": "Send a message to workflows",
                "opts": self.model._meta,
                "workflows": list(queryset),
                "error": error,
                "message_name": request.POST.get("message_name", ""),
                "message_body": request.POST.get("message_body", ""),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )

    cancel_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    recover_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    wake_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    replay_workflow.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    send_message.allowed_permissions = ["control"]  # type: ignore[attr-defined]


@admin.register(WorkflowMessage)
class WorkflowMessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "workflow", "name", "created_at"]
    list_select_related = ["workflow"]
    search_fields = ["=workflow__id", "name"]
    readonly_fields = ("id", "workflow", "name", "shown_body", "created_at")
    fields = readonly_fields

    @admin.display(description="body")
    def shown_body(self, obj: WorkflowMessage) -> str:
        try:
            return pretty(obj.decoded_body())
        except Exception as exc:
            return format_html("<pre>undecodable: {}</pre>", exc)
