"""The admin inspector: runtime records, read-only and decoded.

Records are written by the runtime, never edited by hand: every model admin
here is view-only (staff with the view permission can look; nobody can add,
change or delete rows directly). Changes go through admin actions that call
the runtime, so they keep its guarantees (one at a time, atomic, hooks run).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from .encoding import cbor_loads, json_dumps
from .models import Actor, ActorEvent, ActorKV, Connection


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
    fields = [
        "id",
        "name",
        "key_parts",
        "decoded_state",
        "version",
        "event_seq",
        "kv_size",
        "created_at",
        "updated_at",
    ]
    readonly_fields = fields
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
    fields = ["actor", "shown_key", "decoded_value"]
    readonly_fields = fields

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
    fields = [
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
    ]
    readonly_fields = fields

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
    fields = ["actor", "seq", "name", "decoded_args", "created_at"]
    readonly_fields = fields

    @admin.display(description="args")
    def decoded_args(self, obj: ActorEvent) -> str:
        return pretty_cbor(obj.args)
