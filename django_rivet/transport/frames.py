"""What both protocol flavours share on the wire: close codes and decoded frames.

A flavour's codec (:mod:`.consumer`, :mod:`.rivetkit.consumer`) reads a
handshake into a :class:`ConnectPlan` and a client frame into an
:class:`ActionFrame` or a :class:`SubscriptionFrame`;
:class:`~.sockets.ConnectionConsumer` does the rest, and closes with the
codes below -- the same code for the same reason in every flavour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..actors.rows import ActorRef
from ..exceptions import Forbidden, RivetError

__all__ = [
    "DISCONNECT_REASONS",
    "ActionFrame",
    "ConnectPlan",
    "FrameError",
    "SubscriptionFrame",
    "close_code_for",
    "close_reason",
]

# Close codes (docs/protocol.md): 1000, or 4000 + the HTTP status of the
# reason. daphne's WebSocket stack refuses to send anything but 1000 and
# 3000-4999, so the standard 1009 (too big) and 1011 (internal error) are
# 4413 and 4500 here.
CLOSE_NORMAL = 1000
CLOSE_BAD_REQUEST = 4400
CLOSE_FORBIDDEN = 4403
CLOSE_SLOW_CONSUMER = 4408  # the client did not read for SLOW_CONSUMER_TIMEOUT
CLOSE_EXPIRED = 4410
CLOSE_TOO_LARGE = 4413
CLOSE_TOO_MANY = 4429  # too many connections, or too many frames waiting
CLOSE_INTERNAL = 4500
CLOSE_UNAVAILABLE = 4503  # actor/unavailable, actor/busy: retry later
# How long a close frame may take to leave (it waits behind unsent data).
CLOSE_TIMEOUT = 1.0
# Why the server closes a connection, as close reasons (``group.code``).
DISCONNECT_REASONS = {
    "destroyed": "actor.destroyed",
    "stale": "actor.connection_expired",
    "gone": "actor.connection_expired",
}


def close_code_for(error: RivetError, refused: bool = False) -> int:
    """Map a refused connect to its close code (4403 auth, 4400 request...)."""
    # 403: a refusal, also when on_auth raised a UserError (it keeps its code).
    if refused or isinstance(error, Forbidden) or error.http_status == 403:
        return CLOSE_FORBIDDEN
    if error.http_status == 503:
        return CLOSE_UNAVAILABLE
    if error.http_status >= 500:
        return CLOSE_INTERNAL
    if error.http_status == 429:
        return CLOSE_TOO_MANY
    return CLOSE_BAD_REQUEST


# -- what a codec hands the consumer ---------------------------------------------
@dataclass(slots=True)
class ConnectPlan:
    """What a handshake asks for, as the flavour's codec read it."""

    ref: ActorRef
    encoding: str
    headers: Mapping[str, str]
    params: Any = None
    # Subscriptions of the handshake (``*``: every event).
    subscriptions: list[str] = field(default_factory=list)
    # Replay the events after this seq first.
    since: int | None = None


@dataclass(frozen=True, slots=True)
class ActionFrame:
    """A decoded action call."""

    id: Any
    name: str
    args: Any


@dataclass(frozen=True, slots=True)
class SubscriptionFrame:
    """A decoded (un)subscription."""

    event: str
    subscribe: bool


class FrameError(Exception):
    """A frame's error that answers one action (its id could be read)."""

    def __init__(self, error: RivetError, action_id: Any) -> None:
        super().__init__(error.message)
        self.error = error
        self.action_id = action_id


def close_reason(error: RivetError) -> str:
    """A close reason, as the RivetKit client reads them (``group.code``)."""
    return f"{error.group}.{error.code}"[:120]
