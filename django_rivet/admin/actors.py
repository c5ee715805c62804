"""The inspector for actors: rows, KV, connections, the event log.

Staff with the change permission also edit an actor's state and its KV
entries (:mod:`.editing`): each edit runs as an invocation, and the admin's
history records it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse

from ..actors import registry
from ..actors.migration import migrate_stored
from ..actors.operations import RunHook
from ..actors.rows import ActorRef
from ..actors.spine import invoke
from ..exceptions import ActorNotFound
from ..models import Actor, ActorEvent, ActorKV, Connection
from .editing import DELETE, ActorStateForm, EditKV, KVEntryForm, run_edit, show
from .rendering import ReadOnlyAdmin, cbor_display, render_key

# The longest value a history entry quotes (before and after an edit).
LOGGED_CHARS = 2000


class EditingAdmin(ReadOnlyAdmin):
    """A read-only admin whose change form edits through the runtime."""

    #: The permission (``app.codename``) that allows editing.
    change_permission = ""
    #: The form's fields shown when editing (the rest stay read-only).
    edit_fields: tuple[str, ...] = ()

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(self.change_permission)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fields = list(super().get_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            return [name for name in fields if name not in self.edit_fields]
        return fields

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm[Any]]:
        form = super().get_form(request, obj, change, **kwargs)
        form.request = request  # type: ignore[attr-defined]
        return form

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Not in Django's surrounding transaction: the edit is an invocation
        # with a transaction (and the actor's lock) of its own. Inside one
        # that had already read the page's rows, SQLite could not turn it
        # into a write once another writer committed (SQLITE_BUSY_SNAPSHOT,
        # at once, whatever the busy timeout): the edit failed as
        # `actor/busy` instead of waiting for the lock.
        # (Django's own view without its transaction: the stubs omit it.)
        response: HttpResponse = self._changeform_view(  # type: ignore[attr-defined]
            request, object_id, form_url, extra_context
        )
        return response

    def delete_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The deletion is an invocation too (see changeform_view).
        response: HttpResponse = self._delete_view(  # type: ignore[attr-defined]
            request, object_id, extra_context
        )
        return response

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any, change: bool
    ) -> None:
        """Nothing to save: the form's invocation wrote the change."""

    def log_edit(self, request: HttpRequest, obj: Any, what: str) -> None:
        """Record an edit in the admin history (``LogEntry``)."""
        self.log_change(request, obj, what[: LOGGED_CHARS * 2 + 200])


def quoted(value: Any) -> str:
    """Quote a value for the history, shortened."""
    text = show(value).replace("\n", " ")
    return text if len(text) <= LOGGED_CHARS else text[:LOGGED_CHARS] + "..."


@admin.register(Actor)
class ActorAdmin(EditingAdmin):
    list_display = [
        "name",
        "key",
        "id",
        "version",
        "shown_state_version",
        "kv_size",
        "updated_at",
    ]
    list_filter = ["name", "state_version"]
    search_fields = ["name", "key", "=id"]
    ordering = ["name", "key"]
    readonly_fields = (
        "id",
        "name",
        "key_parts",
        "decoded_state",
        "shown_state_version",
        "version",
        "event_seq",
        "kv_size",
        "created_at",
        "updated_at",
    )
    fields = (*readonly_fields, "state_json", "edited_version")
    form = ActorStateForm
    change_permission = "django_rivet.change_actor"
    edit_fields = ("state_json", "edited_version")
    actions = ["destroy_actors", "migrate_states"]

    decoded_state = cbor_display("state")

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """Say what the state was and became (the history shows it)."""
        if not getattr(form, "edited", False):
            return []
        data = form.cleaned_data
        return (
            f"Edited the state (version {data['edited_version']}) as an invocation: "
            f"{quoted(form.before)} -> {quoted(data['state'])}"
        )

    @admin.display(description="state version", ordering="state_version")
    def shown_state_version(self, obj: Actor) -> str:
        """The stored state's version, and whether the code is ahead or behind."""
        try:
            current = registry.get(obj.name).state_version
        except ActorNotFound:
            return str(obj.state_version)
        if obj.state_version < current:
            return f"{obj.state_version} (code: {current}; migrates on next load)"
        if obj.state_version > current:
            return (
                f"{obj.state_version} (code: {current}; refused: newer than the code)"
            )
        return str(obj.state_version)

    @admin.action(description="Migrate the selected actors' state (migrate_state)")
    def migrate_states(self, request: HttpRequest, queryset: QuerySet[Actor]) -> None:
        migrated = 0
        rows = queryset.values_list("name", "id")
        by_name: dict[str, list[Any]] = {}
        for name, actor_id in rows:
            by_name.setdefault(name, []).append(actor_id)
        for name, ids in sorted(by_name.items()):
            try:
                definition = registry.get(name)
            except ActorNotFound:
                self.message_user(
                    request,
                    f"No actor class is registered as {name!r}.",
                    messages.ERROR,
                )
                continue
            report = migrate_stored(definition, ids=ids)
            migrated += report.migrated
            for actor_id, error in report.failed:
                self.message_user(
                    request, f"Could not migrate {actor_id}: {error}", messages.ERROR
                )
        self.message_user(
            request, f"Migrated the state of {migrated} actor(s).", messages.SUCCESS
        )

    def has_migrate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_rivet.change_actor")

    migrate_states.allowed_permissions = ["migrate"]  # type: ignore[attr-defined]

    @admin.action(description="Destroy selected actors (runs on_destroy)")
    def destroy_actors(self, request: HttpRequest, queryset: QuerySet[Actor]) -> None:

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
class ActorKVAdmin(EditingAdmin):
    list_display = ["actor", "shown_key", "size"]
    list_select_related = ["actor"]
    search_fields = ["=actor__id", "actor__name"]
    readonly_fields = ("shown_key", "decoded_value")
    form = KVEntryForm
    raw_id_fields = ["actor"]
    change_permission = "django_rivet.change_actorkv"
    edit_fields = ("value_json",)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        if obj is None:
            return ["actor", "key_text", "value_json"]
        if not self.has_change_permission(request, obj):
            return ["actor", "shown_key", "decoded_value"]
        return ["actor", "shown_key", "decoded_value", "value_json"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: Any = None
    ) -> tuple[str, ...]:
        if obj is None:
            return ()
        return ("actor", *self.readonly_fields)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_rivet.add_actorkv")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_rivet.delete_actorkv")

    def save_model(
        self, request: HttpRequest, obj: ActorKV, form: Any, change: bool
    ) -> None:
        """Nothing to save: the form's invocation wrote the entry.

        A new entry is the row that invocation made (the admin links to it).
        """
        if not change:
            key = str(form.cleaned_data["key_text"]).encode("utf-8")
            written = ActorKV.objects.get(actor_id=obj.actor_id, key=key)
            obj.pk, obj.key, obj.value = written.pk, written.key, written.value

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """Say what the value became (the history shows it)."""
        if not getattr(form, "edited", False):
            return []
        verb = "Added" if add else "Edited"
        return f"{verb} the value as an invocation: {form.cleaned_data['value_json']}"[
            : LOGGED_CHARS + 100
        ]

    def delete_model(self, request: HttpRequest, obj: ActorKV) -> None:
        """Delete the entry through an invocation of its actor."""
        run_edit(request, obj.actor_id, EditKV(bytes(obj.key), DELETE))

    def delete_queryset(
        self, request: HttpRequest, queryset: QuerySet[ActorKV]
    ) -> None:
        """Delete each entry through an invocation of its actor."""
        for entry in queryset:
            self.delete_model(request, entry)

    @admin.display(description="key")
    def shown_key(self, obj: ActorKV) -> str:
        return render_key(obj.key)

    @admin.display(description="bytes")
    def size(self, obj: ActorKV) -> int:
        return len(bytes(obj.key)) + len(bytes(obj.value))

    decoded_value = cbor_display("value")


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
    list_filter = ["server_id", "actor__name"]
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

    decoded_params = cbor_display("params")

    decoded_state = cbor_display("state")


@admin.register(ActorEvent)
class ActorEventAdmin(ReadOnlyAdmin):
    list_display = ["actor", "seq", "name", "created_at"]
    list_select_related = ["actor"]
    search_fields = ["=actor__id", "name"]
    readonly_fields = ("actor", "seq", "name", "decoded_args", "created_at")
    fields = readonly_fields

    decoded_args = cbor_display("args")


# -- workflows (the workflow runtime) ---------------------------------------------
# -- schedules, cron and queues -------------------------------------------------
