"""The inspector for actors: rows, KV, connections, the event log."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..actors import registry
from ..actors.migration import migrate_stored
from ..actors.operations import RunHook
from ..actors.rows import ActorRef
from ..actors.spine import invoke
from ..exceptions import ActorNotFound
from ..models import Actor, ActorEvent, ActorKV, Connection
from .rendering import ReadOnlyAdmin, cbor_display, render_key


@admin.register(Actor)
class ActorAdmin(ReadOnlyAdmin):
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
    fields = readonly_fields
    actions = ["destroy_actors", "migrate_states"]

    decoded_state = cbor_display("state")

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
