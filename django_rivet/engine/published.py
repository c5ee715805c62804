"""``ctx.reply`` and ``ctx.set_event``: values readers outside the workflow see.

Both are entries (``reply``, ``event``) recorded together with the value
they publish: the value is a key of the workflow's namespace (the
published-values family ``(5, ...)``, see ``docs/storage-format.md``),
written by the same flush as the entry and before it. A replay finds the
entry and publishes nothing: a reply is sent once, and a replay never
brings back an older event value. Readers (``handle.request``,
``handle.get_event``) read those keys; the engine never loads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import keys, schema
from .execution import RollbackStop, complete
from .scope import Scope
from .values import Message

__all__ = [
    "MAX_EVENT_KEY_LENGTH",
    "check_event_key",
    "event_entry_name",
    "message_id_of",
    "run_reply",
    "run_set_event",
]

MAX_EVENT_KEY_LENGTH = 255


def check_event_key(key: str) -> None:
    """Refuse an event key that is not a string of 1-255 characters."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_EVENT_KEY_LENGTH:
        raise ValueError(
            f"An event key is a string of 1-{MAX_EVENT_KEY_LENGTH} characters"
        )


def event_entry_name(key: str, count: int) -> str:
    """Return the entry name of the ``count``-th ``set_event(key)`` of a scope."""
    return f"event:{key}" if count == 1 else f"event:{key}#{count}"


def message_id_of(message: Message | Mapping[str, Any] | str) -> str:
    """Return the id of a received message (a ``Message``, its map, or the id)."""
    if isinstance(message, Message):
        return message.id
    if isinstance(message, Mapping) and "id" in message:
        return str(message["id"])
    if isinstance(message, str) and message:
        return message
    raise TypeError("ctx.reply needs the received message (or its id)")


async def run_reply(
    scope: Scope,
    name: str,
    message: Message | Mapping[str, Any] | str,
    value: Any,
) -> None:
    """Record and send the reply to ``message`` (once; a replay skips it)."""
    message_id = message_id_of(message)
    key = keys.reply_key(message_id)
    data = {"message_id": message_id}
    if await _publish(scope, name, "reply", data, key, value, f'Reply "{name}"'):
        on_reply = scope.run.on_reply
        if on_reply is not None:
            on_reply(message_id)


async def run_set_event(scope: Scope, entry_name: str, key: str, value: Any) -> None:
    """Record and publish ``value`` under ``key`` (a replay skips it)."""
    where = keys.event_key(key)
    await _publish(
        scope, entry_name, "event", {"key": key}, where, value, f'Event "{key}"'
    )


async def _publish(
    scope: Scope,
    name: str,
    kind: str,
    data: dict[str, Any],
    key: bytes,
    value: Any,
    what: str,
) -> bool:
    """Record the entry ``name`` and publish ``value`` at ``key`` with it.

    Returns False when history already has the entry (nothing is sent).
    """
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    if scope.existing(location, kind) is not None:
        return False
    if run.rollback:
        raise RollbackStop()
    stored = schema.roundtrip(value, what)
    entry = storage.create_entry(location, kind, data)
    storage.update(entry, what, value=stored)
    storage.publish(key, kind, stored, what)
    complete(storage, entry)
    await storage.flush()
    return True
