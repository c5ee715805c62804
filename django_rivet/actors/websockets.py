"""Raw WebSockets: the ``websocket`` an actor's ``on_websocket`` hook is given.

A raw WebSocket carries whatever protocol the actor speaks (a CRDT sync, a
game loop, a terminal), as RivetKit's ``onWebSocket`` does: the transport
admits it like any connection (``on_auth`` with ``info.transport ==
"websocket_raw"``, ``on_before_connect``, ``create_conn_state``,
``on_connect``, a ``Connection`` row), then calls ``on_websocket(ctx,
websocket)`` in the same invocation, where the actor registers what runs
for each message::

    async def on_websocket(self, ctx, websocket):
        def relay(ctx, message):
            for other in ctx.websockets:
                if other != websocket:
                    other.send(message)

        websocket.add_event_listener("message", relay)

Each message the client sends is one invocation (:class:`MessageOperation`,
run by the transport), one at a time with the actor's other work, with
``ctx.conn`` the socket's connection: state changes are saved as after an
action. ``send`` and ``close`` take effect once the invocation commits
(never after a rollback), through the channel layer, so sockets held by
other processes are reached too (``ctx.websockets``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .. import events
from ..conf import rivet_settings
from ..exceptions import ActorReadOnly, RequestTooLarge

__all__ = [
    "CLOSE_MESSAGE",
    "ENCODING",
    "SEND_MESSAGE",
    "WebSocket",
]

#: The ``Connection.encoding`` of a raw WebSocket.
ENCODING = "raw"
#: Channel-layer messages to the consumer holding a raw socket.
SEND_MESSAGE = "rivet.raw_send"
CLOSE_MESSAGE = "rivet.raw_close"
#: Listener kinds ``add_event_listener`` takes.
EVENTS = frozenset({"message"})

Listener = Callable[..., Any]


class Running(Protocol):
    """The invocation a send or close waits for (``context.Running``)."""

    readonly: bool

    def after_commit(self, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` once the invocation's transaction commits."""
        ...


class WebSocket:
    """A raw WebSocket connected to the actor, held by any process.

    ``id`` is its connection's id (``ctx.conn.id`` in its own invocations).
    Two handles of one socket are equal.
    """

    def __init__(
        self,
        id: uuid.UUID | None,
        channel_name: str,
        *,
        owned: bool = False,
        running: Running | None = None,
    ) -> None:
        self.id = id
        self.channel_name = channel_name
        # The handle on_websocket is given, kept by the consumer holding the
        # socket: the only one listeners can be added to.
        self._owned = owned
        self._listeners: dict[str, list[Listener]] = {}
        self._running = running

    # -- what a handler calls ------------------------------------------------------
    def send(self, data: bytes | bytearray | memoryview | str) -> None:
        """Send ``data`` to the client once the invocation commits.

        ``bytes`` go as a binary frame, ``str`` as a text frame; larger than
        ``MAX_OUTGOING_MESSAGE_BYTES`` is ``request/too_large`` at once.
        """
        if isinstance(data, str):
            message: dict[str, Any] = {"type": SEND_MESSAGE, "text": data}
            size = len(data.encode("utf-8"))
        elif isinstance(data, bytes | bytearray | memoryview):
            message = {"type": SEND_MESSAGE, "bytes": bytes(data)}
            size = len(message["bytes"])
        else:
            raise TypeError(
                f"A WebSocket sends bytes or str, not {type(data).__name__}"
            )
        limit = rivet_settings.MAX_OUTGOING_MESSAGE_BYTES
        if size > limit:
            raise RequestTooLarge(
                f"The message is {size} bytes; the limit is {limit}",
                metadata={"size": size, "limit": limit},
            )
        self._deliver(message, "send on a WebSocket")

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the socket once the invocation commits.

        ``code`` is 1000 or 3000-4999 (what every server can send).
        """
        if (
            isinstance(code, bool)
            or not isinstance(code, int)
            or not (code == 1000 or 3000 <= code <= 4999)
        ):
            raise ValueError(f"A close code is 1000 or 3000-4999, not {code!r}")
        if len(reason.encode("utf-8")) > 123:
            raise ValueError("A close reason is at most 123 bytes")
        message = {"type": CLOSE_MESSAGE, "code": code, "reason": reason}
        self._deliver(message, "close a WebSocket")

    def add_event_listener(self, kind: str, listener: Listener) -> Listener:
        """Run ``listener(ctx, message)`` for each message the client sends.

        ``kind`` is ``"message"``; ``message`` is ``bytes`` (a binary frame)
        or ``str`` (a text frame). Each runs in an invocation of its own,
        one at a time with the actor's other work. Only the ``websocket``
        given to ``on_websocket`` takes listeners (the socket's process
        runs them); ``on_disconnect`` tells when a socket goes away.
        """
        if kind not in EVENTS:
            raise ValueError(
                f"WebSocket listeners are for {sorted(EVENTS)}, not {kind!r} "
                "(a socket that closes runs on_disconnect)"
            )
        if not self._owned:
            raise RuntimeError(
                "Listeners are added in on_websocket, to the websocket it is given"
            )
        if not callable(listener):
            raise TypeError("add_event_listener takes a callable")
        self._listeners.setdefault(kind, []).append(listener)
        return listener

    def remove_event_listener(self, kind: str, listener: Listener) -> None:
        """Stop running ``listener`` for ``kind``."""
        with contextlib.suppress(ValueError):
            self._listeners.get(kind, []).remove(listener)

    # -- the runtime's side ------------------------------------------------------------
    def listeners(self, kind: str) -> list[Listener]:
        """Return the listeners of ``kind``, in the order added."""
        return list(self._listeners.get(kind, ()))

    @contextlib.contextmanager
    def running_in(self, running: Running) -> Iterator[None]:
        """Let sends and closes during ``running`` wait for its commit."""
        previous, self._running = self._running, running
        try:
            yield
        finally:
            self._running = previous

    def _deliver(self, message: dict[str, Any], what: str) -> None:
        running = self._running
        if running is not None and running.readonly:
            raise ActorReadOnly.refusing(what)
        if running is None:
            events.send_to_channel(self.channel_name, message)
        else:
            running.after_commit(events.send_to_channel, self.channel_name, message)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WebSocket) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<WebSocket {self.id}>"
