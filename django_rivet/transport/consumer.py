"""django-rivet's own WebSocket protocol (docs/protocol.md): the codec of one flavour.

``ws://host/rivet/actors/{name}/connect?key=..&encoding=json|cbor``, with
the connection params in the subprotocol list
(``rivet_conn_params.<base64url(JSON)>``). Frames are maps with a ``type``:
``action``/``subscribe``/``unsubscribe`` from the client; ``init``,
``action_response``, ``event`` (with the actor's ``seq``) and ``error``
from the server.

Everything about the connection -- admission, the frame queue, actions,
subscriptions with ``can_subscribe``, delivery and replay, flow control,
limits, close codes and cleanup -- is :class:`~.sockets.ConnectionConsumer`'s;
this class reads the handshake and encodes and decodes frames, nothing else.
"""

from __future__ import annotations

from typing import Any

from ..actors.connections import WILDCARD, ConnectResult
from ..conf import rivet_settings
from ..encoding import Encoding, decode_message, encode, encode_value
from ..exceptions import Forbidden, InvalidArgs, MalformedRequest, RivetError
from ..splicing import Encoded, splice
from .frames import ActionFrame, ConnectPlan, FrameError, SubscriptionFrame
from .origins import origin_allowed
from .parsing import event_name, parse_connect_request, scope_headers
from .sockets import ConnectionConsumer

__all__ = ["RivetConsumer"]


class RivetConsumer(ConnectionConsumer):
    """One connection of django-rivet's own protocol to one actor."""

    flavour = "rivet"
    encoding: Encoding

    def read_connect(self) -> ConnectPlan:
        """Read the actor, encoding, replay options and params from the URL."""
        request = parse_connect_request(self.scope)
        # The encoding first: a refusal below is answered in it.
        self.encoding = request.encoding
        headers = scope_headers(self.scope)
        origin = headers.get("origin")
        if not origin_allowed(origin, self.scope):
            raise Forbidden("Origin not allowed", metadata={"origin": origin})
        return ConnectPlan(
            ref=request.ref(),
            encoding=request.encoding,
            headers=headers,
            params=request.params,
            subscriptions=request.subscriptions
            + ([WILDCARD] if request.wildcard else []),
            since=request.since,
        )

    def decode_frame(self, data: bytes | str) -> ActionFrame | SubscriptionFrame:
        """Decode an ``action``, ``subscribe`` or ``unsubscribe`` frame.

        An error in an action frame whose id can be read answers that action
        (the connection stays open).
        """
        frame, problem = decode_message(data, self.encoding)
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise problem or MalformedRequest("A frame is a map with a string 'type'")
        kind = frame["type"]
        if kind == "action":
            action_id = frame.get("id")
            if isinstance(action_id, bool) or not isinstance(action_id, int):
                raise problem or MalformedRequest(
                    "An action frame needs an integer 'id'"
                )
            if problem is not None:
                raise FrameError(problem, action_id)
            name, args = frame.get("name"), frame.get("args", [])
            if not isinstance(name, str) or not name:
                raise FrameError(
                    MalformedRequest("An action frame needs a string 'name'"),
                    action_id,
                )
            if not isinstance(args, list):
                raise FrameError(InvalidArgs("args must be a list"), action_id)
            return ActionFrame(action_id, name, args)
        if problem is not None:
            raise problem
        if kind in ("subscribe", "unsubscribe"):
            return SubscriptionFrame(
                event_name(frame.get("event")), kind == "subscribe"
            )
        raise MalformedRequest(
            f"Unknown message type {kind[:64]!r}", metadata={"type": kind[:64]}
        )

    def encode_init(self, result: ConnectResult) -> bytes:
        """Encode ``init``, with the head seq and the frame size limit."""
        return self._encode(
            {
                "type": "init",
                "actor_id": str(result.actor_id),
                "connection_id": str(result.conn_id),
                # Extensions: the last seq before this connection, so a client
                # that sees no event still knows where to resume from; the
                # frame size limit, so a client refuses oversized calls itself.
                "seq": result.head,
                "max_frame_bytes": rivet_settings.MAX_INCOMING_MESSAGE_BYTES,
            }
        )

    def encode_value(self, value: Any) -> bytes:
        """Check and encode an output in the connection's encoding."""
        return encode_value(value, self.encoding)

    def encode_output(self, action_id: Any, output: Encoded) -> bytes:
        """Encode ``action_response`` around the encoded output."""
        head = {"type": "action_response", "id": action_id}
        return splice(head, "output", output.data, self.encoding)

    def encode_error(self, error: RivetError, action_id: Any) -> bytes:
        """Encode ``error`` (with ``action_id`` when it answers an action)."""
        frame: dict[str, Any] = {"type": "error", **error.to_dict()}
        if action_id is not None:
            frame["action_id"] = action_id
        return self._encode(frame)

    def encode_event(self, name: str, seq: int | None, args: list[Any]) -> bytes:
        """Encode ``event`` (with its ``seq`` unless it is a ``conn.send``)."""
        frame: dict[str, Any] = {"type": "event", "name": name, "args": args}
        if seq is not None:
            frame["seq"] = seq
        return self._encode(frame)

    def _encode(self, frame: dict[str, Any]) -> bytes:
        return encode(frame, self.encoding)
