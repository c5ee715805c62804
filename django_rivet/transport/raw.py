"""Raw WebSockets to an actor's ``on_websocket`` (docs/actors.md, "Raw WebSockets").

Two routes, one per addressing scheme, served by the same consumer as the
protocol connections (:class:`~.sockets.ConnectionConsumer`: admission,
frames in order and bounded, flow control, close codes, cleanup), with the
frames left to the actor:

* ``ws://host/rivet/actors/{name}/websocket[/{path}]?key=..`` -- django-
  rivet's own addressing (:class:`RivetRawConsumer`), conn params in the
  ``rivet_conn_params.<base64url(JSON)>`` subprotocol;
* ``ws://host/rivet/gateway/{target}/websocket[/{path}]`` -- what the
  official RivetKit client's ``handle.webSocket(path)`` opens
  (:class:`RivetKitRawConsumer`), tokens and params as on its ``connect``.

The handshake is admitted by ``on_auth`` (``info.transport ==
"websocket_raw"``, ``info.kind == "connect"``), the Origin check,
``on_before_connect``, ``create_conn_state`` and ``on_connect``; then
``on_websocket(ctx, websocket)`` runs in the same invocation. No frame of
django-rivet's is ever sent: no ``init``, no error frames (a refused
handshake is accepted, then closed with 4000 + the HTTP status of the
reason, as protocol sockets are), no events. Each frame the client sends
is one invocation (:class:`~django_rivet.actors.connections.WebSocketMessage`)
within the same limits as a protocol frame (``MAX_INCOMING_MESSAGE_BYTES``,
``MAX_PENDING_FRAMES``); what the actor sends arrives through the channel
layer and goes out under the same flow control.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from ..actors import websockets
from ..actors.connections import Connect, ConnectResult, WebSocketMessage
from ..actors.errors import public_error
from ..actors.lanes import ainvoke
from ..actors.websockets import WebSocket
from ..exceptions import ConnectionExpired, RivetError
from .consumer import RivetConsumer
from .frames import CLOSE_EXPIRED, ConnectPlan, close_reason
from .rivetkit.consumer import RivetKitConsumer

logger = logging.getLogger("django_rivet.transport")

__all__ = ["RawSocket", "RivetKitRawConsumer", "RivetRawConsumer"]


class RawSocket:
    """What makes a protocol consumer a raw one (mixed in before the flavour).

    Overrides, each with its reason: the admission (a raw socket, no
    subscriptions), the init frame (none), the frames in (to the actor's
    listeners) and out (the actor's bytes; no error frames, which the
    client's protocol would not understand), ``conn.send`` (no frame to put
    an event in).
    """

    transport: ClassVar[str] = "websocket_raw"
    flavour: ClassVar[str]
    websocket: WebSocket | None = None

    def connect_operation(self, plan: ConnectPlan) -> Connect:
        """Admit a raw socket: on_websocket runs after on_connect."""
        connect: Connect = super().connect_operation(plan)  # type: ignore[misc]
        self.websocket = WebSocket(None, connect.channel_name, owned=True)
        connect.websocket = self.websocket
        connect.encoding = websockets.ENCODING
        connect.subscriptions = []
        connect.since = None
        return connect

    def encode_init(self, result: ConnectResult) -> bytes:
        """Send nothing once admitted: the actor speaks first, if it likes."""
        return b""

    async def handle_frame(self, data: bytes | str) -> None:
        """Run the socket's listeners with the frame, in an invocation."""
        assert self.websocket is not None
        consumer: Any = self
        try:
            await ainvoke(
                consumer.ref, WebSocketMessage(self.websocket, data), consumer.origin
            )
        except ConnectionExpired as exc:
            await consumer._close(CLOSE_EXPIRED, close_reason(exc))
        except Exception as exc:
            # Rolled back and logged; the socket stays open, as after a
            # failed action on a protocol socket.
            error = public_error(exc)
            logger.info(
                "raw websocket message failed conn_id=%s error=%s",
                consumer.conn_id,
                error.qualified_code,
            )

    async def send_error_frame(
        self, error: RivetError, action_id: Any = None, urgent: bool = False
    ) -> None:
        """Send nothing: the client speaks the actor's protocol, not ours."""
        logger.info(
            "raw websocket error not sent flavour=%s error=%s",
            self.flavour,
            error.qualified_code,
        )

    async def rivet_raw_send(self, message: dict[str, Any]) -> None:
        """Send what the actor sent (``websocket.send``), under flow control."""
        frame = {"type": "websocket.send"}
        if message.get("bytes") is not None:
            frame["bytes"] = message["bytes"]
        else:
            frame["text"] = message.get("text") or ""
        consumer: Any = self
        await consumer.send_message(frame)

    async def rivet_raw_close(self, message: dict[str, Any]) -> None:
        """Close as the actor asked (``websocket.close``)."""
        consumer: Any = self
        await consumer._close_when_answered(
            int(message.get("code", 1000)), str(message.get("reason") or "")
        )

    async def rivet_send(self, message: dict[str, Any]) -> None:
        """Drop a ``conn.send``: a raw socket has no frame for events."""
        logger.debug("conn.send to a raw websocket dropped name=%s", message["name"])


class RivetRawConsumer(RawSocket, RivetConsumer):
    """A raw WebSocket addressed as django-rivet's own routes address actors."""

    flavour = "rivet.raw"


class RivetKitRawConsumer(RawSocket, RivetKitConsumer):
    """A raw WebSocket from the RivetKit client's ``handle.webSocket(path)``."""

    flavour = "rivetkit.raw"
