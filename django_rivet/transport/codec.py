"""What a WebSocket flavour supplies: the codec of its frames.

:class:`~.sockets.ConnectionConsumer` owns everything about a connection;
a flavour (:mod:`.consumer`, django-rivet's own protocol;
:mod:`.rivetkit.consumer`, the official RivetKit client's) implements the
methods of :class:`FrameCodec` that raise ``NotImplementedError``: reading
the handshake, decoding a client frame, and encoding what the server sends.
The frames built on them (an action's output, an event) are checked against
the outgoing limit here, the same way for every flavour.
"""

from __future__ import annotations

import logging
from typing import Any

from ..actors.connections import ConnectResult
from ..conf import rivet_settings
from ..encoding import cbor_loads
from ..exceptions import InternalError, RequestTooLarge, RivetError
from ..splicing import Encoded
from .frames import ActionFrame, ConnectPlan, SubscriptionFrame
from .limits import outgoing_too_large

logger = logging.getLogger("django_rivet.transport")

__all__ = ["FrameCodec"]


class FrameCodec:
    """The frames of one protocol flavour, in the connection's ``encoding``."""

    #: The encoding of the connection's frames (set from the handshake).
    encoding: str

    def read_connect(self) -> ConnectPlan:
        """Read the handshake (``self.scope``); raise a ``RivetError`` to refuse."""
        raise NotImplementedError

    def decode_frame(self, data: bytes | str) -> ActionFrame | SubscriptionFrame:
        """Decode a client frame; raise ``RivetError`` or :class:`FrameError`."""
        raise NotImplementedError

    def encode_init(self, result: ConnectResult) -> bytes:
        """Encode the frame that tells the client it is admitted."""
        raise NotImplementedError

    def encode_value(self, value: Any) -> bytes:
        """Check an action's output against the value domain and encode it.

        Runs inside the invocation, before its transaction commits
        (``InvalidValue``: the action rolls back with ``actor/invalid_output``).
        """
        raise NotImplementedError

    def encode_output(self, action_id: Any, output: Encoded) -> bytes:
        """Encode an action's answer around its already-encoded output."""
        raise NotImplementedError

    def encode_error(self, error: RivetError, action_id: Any) -> bytes:
        """Encode an error frame (``action_id`` None: connection-level)."""
        raise NotImplementedError

    def encode_event(self, name: str, seq: int | None, args: list[Any]) -> bytes:
        """Encode an event frame (``seq`` None: a ``conn.send``)."""
        raise NotImplementedError

    def text_frames(self) -> bool:
        """Whether frames travel as text (else binary)."""
        return self.encoding == "json"

    def checked_output(self, value: Any) -> bytes:
        """Encode an action's output (:meth:`encode_value`) within the outgoing limit.

        Called in the invocation's thread, before commit: an output outside
        the domain, or too large to send, rolls the action back.
        """
        data = self.encode_value(value)
        too_large = outgoing_too_large(data)
        if too_large is not None:
            raise too_large
        return data

    def event_frame(self, name: str, seq: int | None, args: bytes) -> bytes:
        """Encode an event (CBOR ``args``) within the outgoing limit.

        Raises ``InternalError`` if it cannot be encoded, ``RequestTooLarge``
        if it is too large to send.
        """
        try:
            data = self.encode_event(name, seq, cbor_loads(bytes(args)))
        except Exception as exc:
            logger.exception("undeliverable event name=%r seq=%s", name, seq)
            raise InternalError(
                "An event could not be encoded", metadata={"event": name, "seq": seq}
            ) from exc
        limit = rivet_settings.MAX_OUTGOING_MESSAGE_BYTES
        if len(data) > limit:
            raise RequestTooLarge(
                f"Event {name!r} is {len(data)} bytes; the limit is {limit}",
                metadata={"event": name, "seq": seq, "limit": limit},
            )
        return data
