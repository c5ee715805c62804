"""Who calls, and what ``on_auth`` is asked: :class:`Origin`, :class:`AuthInfo`.

The values that travel with a call, below everything that runs one: the
definitions type ``on_auth`` with :class:`AuthInfo`, ``ctx`` reads the
caller from :class:`Origin`, and the entry points (transport, scheduling,
the client) build them. Plain data; nothing here runs actor code.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser
    from django.http import HttpRequest

    User: TypeAlias = AbstractBaseUser | AnonymousUser

__all__ = ["INTERNAL", "AuthInfo", "AuthRequest", "Origin"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Who is calling; decides ``ctx.conn``, ``ctx.user``, ``ctx.fire_info``."""

    # http|websocket|websocket_raw|sse|schedule|cron|queue|internal
    transport: str = "internal"
    user: User | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    request: Any = None  # the HttpRequest, or the ASGI scope of a WebSocket
    # The HttpRequest of the call (for a WebSocket, a view of its handshake):
    # what ctx.request gives hooks and handlers.
    http_request: HttpRequest | None = None
    params: Any = None
    conn_id: uuid.UUID | None = None
    fire_info: dict[str, Any] | None = None

    @property
    def external(self) -> bool:
        """Tell whether ``on_auth`` guards this call."""
        return self.transport in EXTERNAL


INTERNAL = Origin()
#: The transports of callers ``on_auth`` guards.
EXTERNAL = frozenset({"http", "websocket", "websocket_raw", "sse"})


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """What an operation asks ``on_auth`` to allow.

    ``kind`` is ``"action"``, ``"connect"``, ``"queue"``, ``"request"`` (raw
    HTTP) or ``"actor"`` (creating, resolving or describing the actor).
    """

    kind: str
    action: str | None = None
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class AuthInfo:
    """What ``on_auth`` is told about the caller and the call."""

    transport: str
    user: User
    headers: Mapping[str, str]
    action: str | None
    params: Any
    request: Any
    kind: str = "action"
    queue: str | None = None
