"""The WebSocket flavour the official RivetKit client speaks: its codec.

``ws://host/rivet/gateway/{target}/connect`` with the subprotocols
``rivet`` (selected by the server), ``rivet_encoding.{json|cbor|bare}``,
``rivet_conn_params.{percent-encoded JSON}`` and, for tokens,
``rivet_token.{token}``. Frames are ``{body: {tag, val}}`` in the chosen
encoding (:mod:`.protocol`): the server sends ``Init`` once admitted, then
``ActionResponse``/``Error`` (with the request's ``actionId``) and
``Event`` frames for the events the client subscribed to.

Everything about the connection is :class:`~..sockets.ConnectionConsumer`'s,
as for django-rivet's own protocol: admission through the runtime (the same
hooks, limits and close codes), actions in order, ``can_subscribe`` on every
subscription (``*`` included), delivery in ``seq`` order with
``actor/events_missed`` when the log no longer has an event, flow control
and cleanup. Close reasons read ``group.code``, as the client expects
(servers that pass close reasons on, such as uvicorn, deliver them; daphne 4
drops them, which is why an ``Error`` frame comes first). The protocol has
no replay after a reconnect and no ``seq`` in events.

One override, with its reason: :meth:`RivetKitConsumer.event_undeliverable`.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote

from django.utils.datastructures import CaseInsensitiveMapping

from ...actors.connections import ConnectResult
from ...actors.rows import ActorRef
from ...exceptions import Forbidden, MalformedRequest, RivetError
from ...splicing import Encoded
from ..frames import ActionFrame, ConnectPlan, SubscriptionFrame
from ..parsing import query_params, scope_headers
from ..sockets import ConnectionConsumer
from . import protocol
from .addressing import TOKEN_HEADER, decode_conn_params, gateway_target
from .cors import websocket_origin_allowed
from .protocol import ActionCall, WireEncoding

logger = logging.getLogger("django_rivet.transport")

__all__ = ["RivetKitConsumer"]

ENCODING_PREFIX = "rivet_encoding."
PARAMS_PREFIX = "rivet_conn_params."
TOKEN_PREFIX = "rivet_token."


def _subprotocol_value(subprotocols: list[str], prefix: str) -> str | None:
    values = [p[len(prefix) :] for p in subprotocols if p.startswith(prefix)]
    if len(values) > 1:
        raise MalformedRequest(f"More than one {prefix[:-1]} subprotocol")
    return values[0] if values else None


class RivetKitConsumer(ConnectionConsumer):
    """One RivetKit-client connection to one actor."""

    flavour = "rivetkit"
    encoding: WireEncoding

    def read_connect(self) -> ConnectPlan:
        """Read the gateway target, encoding, params and token."""
        subprotocols = list(self.scope.get("subprotocols") or [])
        # The encoding first: a refusal below is answered in it.
        self.encoding = protocol.parse_encoding(
            _subprotocol_value(subprotocols, ENCODING_PREFIX)
        )
        params_text = _subprotocol_value(subprotocols, PARAMS_PREFIX)
        params = decode_conn_params(
            None if params_text is None else unquote(params_text)
        )
        kwargs = self.scope.get("url_route", {}).get("kwargs", {})
        try:
            raw_query = self.scope.get("query_string", b"").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest("The query string is not UTF-8") from exc
        query = query_params(raw_query)
        target = gateway_target(str(kwargs.get("target", "")), query)
        headers = dict(scope_headers(self.scope))
        if not websocket_origin_allowed(headers.get("origin"), self.scope):
            raise Forbidden(
                "Origin not allowed", metadata={"origin": headers.get("origin")}
            )
        token = _subprotocol_value(subprotocols, TOKEN_PREFIX) or target.token
        if token is not None:
            # on_auth reads the client's token as a header, as over HTTP.
            headers[TOKEN_HEADER.lower()] = token
        if target.actor_id is not None:
            ref = ActorRef(actor_id=target.actor_id)
        else:
            assert target.name is not None
            create = target.mode == "get_or_create"
            ref = ActorRef.of(
                target.name,
                list(target.key),
                mode="get_or_create" if create else "get",
                input=target.input if create else None,
            )
        return ConnectPlan(
            ref=ref,
            encoding=self.encoding,
            headers=CaseInsensitiveMapping(headers),
            params=params,
        )

    def decode_frame(self, data: bytes | str) -> ActionFrame | SubscriptionFrame:
        """Decode an ``ActionRequest`` or a ``SubscriptionRequest``."""
        frame = protocol.decode_frame(data, self.encoding)
        if isinstance(frame, ActionCall):
            return ActionFrame(frame.id, frame.name, frame.args)
        return SubscriptionFrame(frame.event, frame.subscribe)

    def encode_init(self, result: ConnectResult) -> bytes:
        """Encode ``Init``."""
        return protocol.encode_init(
            str(result.actor_id), str(result.conn_id), self.encoding
        )

    def encode_value(self, value: Any) -> bytes:
        """Check and encode an output as the client reads it."""
        return protocol.encode_output_value(value, self.encoding)

    def encode_output(self, action_id: Any, output: Encoded) -> bytes:
        """Encode ``ActionResponse`` around the encoded output."""
        return protocol.encode_action_response(action_id, output.data, self.encoding)

    def encode_error(self, error: RivetError, action_id: Any) -> bytes:
        """Encode ``Error`` (``actionId`` null for the connection)."""
        return protocol.encode_error(error, action_id, self.encoding)

    def encode_event(self, name: str, seq: int | None, args: list[Any]) -> bytes:
        """Encode ``Event`` (the protocol carries no seq)."""
        return protocol.encode_event(name, args, self.encoding)

    async def event_undeliverable(self, error: RivetError) -> None:
        """Log an event too large (or unencodable) to send; send nothing.

        Override, because the official client fails every pending call when
        it receives a connection-level ``Error``: one oversized broadcast
        must not fail a client's unrelated calls. The own protocol's clients
        take the error frame instead.
        """
        logger.warning(
            "event not sent to a rivetkit client error=%s metadata=%r",
            error.qualified_code,
            error.metadata,
        )
