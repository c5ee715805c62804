"""The inspector for workflows: rows, decoded history, and their actions.

Rows and history are read-only; the actions go through the runtime's
operations, which take the workflow's lease first, so they never race a run.
A page view (GET) runs no workflow code and writes nothing: the replay
check, which runs the workflow's code against its history, is an action
(a POST, with the permission to control workflows), offered on the page as
a button.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ..encoding import json_loads
from ..exceptions import MalformedRequest
from ..models import (
    WORKFLOW_ACTIVE,
    Workflow,
    WorkflowMessage,
    WorkflowStatus,
    WorkflowStreamValue,
)
from ..workflows import control, operations, sends, versions
from ..workflows.client import WorkflowHandle
from .rendering import pretty, render_history
from .retention import RetentionAdmin, purge_note

# Streams on a workflow's page, and values shown of each (the newest).
STREAMS_SHOWN = 20
LAST_VALUES_SHOWN = 5


def _decoded(value: WorkflowStreamValue) -> Any:
    try:
        return value.decoded_value()
    except Exception as exc:  # show why rather than break the page
        return f"undecodable: {exc}"


@admin.register(Workflow)
class WorkflowAdmin(RetentionAdmin):
    retention_table = "Workflow"
    list_display = [
        "id",
        "name",
        "status",
        "version",
        "wake_at",
        "waiting_for",
        "run_count",
        "retry_count",
        "updated_at",
    ]
    list_filter = ["status", "name", "queue", "version"]
    search_fields = ["=id", "name"]
    ordering = ["-created_at"]
    readonly_fields = (
        "id",
        "name",
        "status",
        "engine_state",
        "parent",
        "children",
        "searchable_attributes",
        "queue",
        "application_version",
        "debounce",
        "replay_check",
        "created_at",
        "updated_at",
        "finished_at",
        "purge",
        "wake_at",
        "waiting_for",
        "deadline_at",
        "cancel_requested",
        "cancel_reason",
        "lease_owner",
        "lease_expires_at",
        "run_count",
        "retry_count",
        "last_error",
        "decoded_input",
        "decoded_output",
        "decoded_error",
        "inbox",
        "streams",
        "decoded_history",
    )
    fields = readonly_fields
    actions = [
        "check_replay",
        "cancel_workflows",
        "recover_workflows",
        "resume_workflows",
        "wake_workflows",
        "replay_workflow",
        "send_message",
    ]

    def _snapshot(self, obj: Workflow) -> Any:

        # Several fields of one page show the snapshot: read it once.
        cache = getattr(obj, "_rivet_snapshot", None)
        if cache is None:
            cache = WorkflowHandle(obj.pk, obj.name).snapshot()
            setattr(obj, "_rivet_snapshot", cache)  # noqa: B010
        return cache

    @admin.display(description="purged")
    def purge(self, obj: Workflow) -> str:
        return purge_note(obj)

    @admin.display(description="application version")
    def application_version(self, obj: Workflow) -> str:
        if not obj.version:
            return "- (any worker runs it)"
        here = versions.current()
        if obj.status in WORKFLOW_ACTIVE and here and obj.version != here:
            return (
                f"{obj.version} (waits for a worker of version {obj.version}: "
                f"this deployment is {here})"
            )
        return obj.version

    @admin.display(description="debounce")
    def debounce(self, obj: Workflow) -> str:
        if not obj.debounced:
            return "-"
        if obj.status != WorkflowStatus.QUEUED:
            return "debounced; started"
        cap = obj.debounce_deadline
        limit = "" if cap is None else f", at the latest {cap:%Y-%m-%d %H:%M:%S}"
        due = obj.run_after
        return (
            f"debounced (key {obj.dedup_key!r}): starts "
            f"{'-' if due is None else f'{due:%Y-%m-%d %H:%M:%S}'}{limit} "
            "unless another start of its key comes first"
        )

    @admin.display(description="engine state")
    def engine_state(self, obj: Workflow) -> str:
        return str(self._snapshot(obj).state)

    @admin.display(description="parent")
    def parent(self, obj: Workflow) -> str:
        if not obj.parent_id:
            return "-"
        detached = " (detached)" if obj.detached else ""
        return format_html("{}{}", workflow_link(obj.parent_id), detached)

    @admin.display(description="children")
    def children(self, obj: Workflow) -> str:
        rows = Workflow.objects.children_of(obj.pk).order_by("created_at", "id")
        found = list(rows.values_list("id", "name", "status")[:50])
        return _bullets(
            "<li>{} ({}, {})</li>",
            [
                (workflow_link(child_id), name, status)
                for child_id, name, status in found
            ],
        )

    @admin.display(description="attributes")
    def searchable_attributes(self, obj: Workflow) -> str:
        found = WorkflowHandle(obj.pk, obj.name).attributes
        return _bullets(
            "<li><code>{}</code> = {}</li>",
            [(key, repr(value)) for key, value in found.items()],
        )

    @admin.display(description="replay check")
    def replay_check(self, obj: Workflow) -> str:
        """Offer the replay check (``rivet_check_replay``) as a POST button.

        The check runs the workflow's code, so it is never run by a GET.
        The button submits the page's form (it carries the CSRF token) to
        the change list's ``check_replay`` action.
        """
        if obj.status not in WORKFLOW_ACTIVE:
            return "- (finished: nothing will replay it)"
        return format_html(
            '<input type="hidden" name="{}" value="{}">'
            '<button type="submit" class="button" name="action" '
            'value="check_replay" formaction="{}" formmethod="post">'
            "Check the replay now</button>"
            '<p class="help">Runs the workflow\'s code against its history, '
            "as the next run would (needs the permission to change "
            "workflows).</p>",
            helpers.ACTION_CHECKBOX_NAME,
            obj.pk,
            reverse("admin:django_rivet_workflow_changelist"),
        )

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

    @admin.display(description="streams")
    def streams(self, obj: Workflow) -> str:
        """Each stream: its length, whether it is closed, its last values."""
        found = []
        for stream in obj.streams.order_by("key")[:STREAMS_SHOWN]:
            last = stream.values.order_by("-offset")[:LAST_VALUES_SHOWN]
            values = {int(v.offset): _decoded(v) for v in reversed(last)}
            found.append(
                {
                    "key": stream.key,
                    "length": stream.length,
                    "closed": stream.closed,
                    f"last {LAST_VALUES_SHOWN} values": values,
                }
            )
        return pretty(found) if found else "-"

    @admin.display(description="history")
    def decoded_history(self, obj: Workflow) -> str:

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
        done = self.apply_each(
            request,
            queryset.values_list("id", flat=True),
            verb,
            operation,
            "Did not {verb} {key} (its status does not allow it).",
        )
        self.message_user(request, f"{verb.capitalize()}: {len(done)} workflow(s).")

    @admin.action(description="Cancel selected workflows")
    def cancel_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:

        self._each(request, queryset, "cancel", operations.cancel)

    @admin.action(description="Recover selected failed workflows")
    def recover_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:

        self._each(request, queryset, "recover", operations.recover)

    @admin.action(description="Resume selected cancelled workflows")
    def resume_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:

        self._each(request, queryset, "resume", control.resume)

    @admin.action(description="Wake selected workflows now")
    def wake_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> None:

        self._each(request, queryset, "wake", operations.wake)

    @admin.action(description="Check the replay against the deployed code")
    def check_replay(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> HttpResponseRedirect | None:
        for workflow_id in queryset.values_list("id", flat=True)[:MAX_CHECKS]:
            self.message_user(request, *_replay_verdict(workflow_id))
        ids = list(queryset.values_list("id", flat=True)[:2])
        if len(ids) != 1:
            return None
        # Back to the page the button is on.
        return HttpResponseRedirect(
            reverse("admin:django_rivet_workflow_change", args=[quote(ids[0])])
        )

    @admin.action(description="Replay the selected workflow from a step")
    def replay_workflow(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> TemplateResponse | None:

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
                    lambda workflow_id: sends.send(workflow_id, name, body),
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

    check_replay.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    cancel_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    recover_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    resume_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    wake_workflows.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    replay_workflow.allowed_permissions = ["control"]  # type: ignore[attr-defined]
    send_message.allowed_permissions = ["control"]  # type: ignore[attr-defined]


# Workflows one replay-check action checks at most (each runs its code).
MAX_CHECKS = 20


def _replay_verdict(workflow_id: str) -> tuple[str, int]:
    """Return the replay check's message for ``workflow_id`` and its level."""
    try:
        found = control.check(workflow_id)
    except Exception as exc:  # report why rather than fail the request
        return f"Workflow {workflow_id}: the replay check failed: {exc}", messages.ERROR
    if found is None:
        return f"Workflow {workflow_id} replays cleanly against the deployed code.", (
            messages.SUCCESS
        )
    where = found.location or "<root>"
    return (
        f"Workflow {workflow_id} diverges at {where} ({found.code}): {found.reason}",
        messages.WARNING,
    )


def _bullets(item: str, rows: list[tuple[Any, ...]]) -> str:
    """Return ``rows`` as an HTML list of ``item``, or "-" for none."""
    if not rows:
        return "-"
    return format_html("<ul>{}</ul>", format_html_join("", item, rows))


def workflow_link(workflow_id: str) -> str:
    url = reverse("admin:django_rivet_workflow_change", args=[quote(workflow_id)])
    return format_html('<a href="{}">{}</a>', url, workflow_id)


@admin.register(WorkflowMessage)
class WorkflowMessageAdmin(RetentionAdmin):
    retention_table = "WorkflowMessage"
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
