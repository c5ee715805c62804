"""What every admin page of the inspector shares: rendering and read-only."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join

from .. import clock
from ..encoding import cbor_loads, json_dumps

__all__ = [
    "NOTED_CHANGE_LIST",
    "ReadOnlyAdmin",
    "cbor_display",
    "pretty",
    "pretty_cbor",
    "render_history",
    "render_key",
]


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
        return pretty(cbor_loads(raw))
    except Exception as exc:  # show the bytes rather than break the page
        return format_html("<pre>undecodable ({}): {}</pre>", exc, raw[:200].hex())


def cbor_display(field: str) -> Callable[[Any, Any], str]:
    """Return an admin column showing the CBOR bytes of ``field``, decoded."""

    @admin.display(description=field)
    def display(page: Any, obj: Any) -> str:
        return pretty_cbor(getattr(obj, field))

    return display


def render_key(data: Any) -> str:
    """Show a KV key as text when it is UTF-8, else as hex."""
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()


if TYPE_CHECKING:
    # ModelAdmin is generic only in django-stubs, not at run time.
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


#: A change list with a line of explanation above it (``rivet_note``).
NOTED_CHANGE_LIST = "admin/django_rivet/retention_change_list.html"


class ReadOnlyAdmin(_ModelAdmin):
    """View-only admin for runtime records."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def noted_changelist(
        self,
        request: HttpRequest,
        extra_context: dict[str, Any] | None,
        label: str,
        names: Iterable[str],
    ) -> HttpResponse:
        """Render the change list with a line naming ``names`` after ``label``.

        For what has no row yet: a page view (GET) writes nothing.
        """
        missing = sorted(names)
        note = f"{label}: {', '.join(missing)}." if missing else ""
        context = {"rivet_note": note, **(extra_context or {})}
        return super().changelist_view(request, context)

    def apply_each(
        self,
        request: HttpRequest,
        keys: Iterable[Any],
        verb: str,
        operation: Callable[[Any], Any],
        refused: str,
    ) -> list[tuple[Any, Any]]:
        """Run ``operation`` on each key; return ``(key, result)`` where it acted.

        An error is reported per key; so is a ``False`` result, with
        ``refused`` (formatted with ``key`` and ``verb``).
        """
        done = []
        for key in keys:
            try:
                result = operation(key)
            except Exception as exc:
                self.message_user(
                    request, f"Could not {verb} {key}: {exc}", messages.ERROR
                )
                continue
            if result is False:
                self.message_user(
                    request, refused.format(key=key, verb=verb), messages.WARNING
                )
            else:
                done.append((key, result))
        return done


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return f"{clock.to_datetime(timestamp):%Y-%m-%d %H:%M:%S.%f}"[:-3]


def _error(error: Any) -> str:
    """Render an error map, its traceback (if any) as text of its own."""
    if not error:
        return "-"
    if not isinstance(error, dict) or not error.get("traceback"):
        return pretty(error)
    summary = {key: value for key, value in error.items() if key != "traceback"}
    return format_html(
        "{}<details><summary>traceback</summary><pre>{}</pre></details>",
        pretty(summary),
        error["traceback"],
    )


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
                _error(entry.error),
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
