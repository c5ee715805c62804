"""The WebSocket flavour the official RivetKit client speaks.

``ws://host/rivet/gateway/{target}/connect`` with the subprotocols
``rivet`` (selected by the server), ``rivet_encoding.{json|cbor|bare}``,
``rivet_conn_params.{percent-encoded JSON}`` and, for tokens,
``rivet_token.{token}``. Frames are ``{body: {tag, val}}`` in the chosen
encoding (:mod:`.protocol`): the server sends ``Init`` once admitted, then
``ActionResponse``/``Error`` (with the request's ``actionId``) and
``Event`` frames for the events the client subscribed to.

Admission, actions and the goodbye go through the invocation spine with
the same operations as django-rivet's own consumer (``Connect``,
``ConnAction``, ``Disconnect``), so ``on_auth``, ``on_before_connect``,
``create_conn_state``, ``on_connect`` and ``on_disconnect`` run as they do
there, one at a time with the actor's other work. A refused connection gets
an ``Error`` frame, then a close whose reason is ``group.code`` (servers
that pass close reasons on, such as uvicorn, deliver it; daphne 4 drops it,
which is why the ``Error`` frame comes first).

Delivery follows the own consumer's rules (:mod:`..delivery`): one action
at a time per connection, in order; events in ``seq`` order and once, gaps
filled from the event log, ``actor/events_missed`` (an ``Error`` frame) when
the log no longer has them; cleanup on every exit path. The protocol has no
replay after a reconnect, so events are only those broadcast while
subscribed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any
from urllib.parse import parse_qs, unquote

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from django.utils.datastructures import CaseInsensitiveMapping

from ...actors.errors import public_error
from ...actors.invocation import Origin
from ...actors.rows import ActorRef
from ...actors.spine import ainvoke
from ...conf import rivet_settings
from ...encoding import cbor_loads, run_decoder
from ...events import LoggedEvent
from ...exceptions import (
    ConnectionExpired,
    Forbidden,
    InternalError,
    MalformedRequest,
    RequestTooLarge,
    RivetError,
)
from ...models import Connection
from ..connections import ConnAction, Connect, disconnect_cleanup, heartbeat
from ..delivery import Pressure, Stream
from ..parsing import event_name, scope_headers
from ..sockets import SocketConsumer
from . import protocol
from .addressing import TOKEN_HEADER, decode_conn_params, gateway_target
from .cors import websocket_origin_allowed
from .protocol import ActionCall, WireEncoding

logger = logging.getLogger("django_rivet.transport")

__all__ = ["RivetKitConsumer"]

SUBPROTOCOL = "rivet"
ENCODING_PREFIX = "rivet_encoding."
PARAMS_PREFIX = "rivet_conn_params."
TOKEN_PREFIX = "rivet_token."
MAX_SUBSCRIPTIONS = 256
# Actions waiting behind the running one; beyond this the consumer stops
# reading frames (TCP backpressure) instead of buffering without bound.
MAX_PENDING_ACTIONS = 64

# The own protocol's close codes (docs/protocol.md); daphne refuses close
# codes outside 1000 and 3000-4999.
CLOSE_NORMAL = 1000
CLOSE_BAD_REQUEST = 4400
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_MANY_CONNECTIONS = 4429
CLOSE_INTERNAL = 4500
# The client did not read for SLOW_CONSUMER_TIMEOUT.
CLOSE_SLOW_CONSUMER = 4408
# Why the server closes a connection, as the client's close reasons read.
DISCONNECT_REASONS = {
    "destroyed": "actor.destroyed",
    "stale": "actor.connection_expired",
}


def _subprotocol_value(subprotocols: list[str], prefix: str) -> str | None:
    values = [p[len(prefix) :] for p in subprotocols if p.startswith(prefix)]
    if len(values) > 1:
        raise MalformedRequest(f"More than one {prefix[:-1]} subprotocol")
    return values[0] if values else None


def _save_subscriptions(conn_id: uuid.UUID, names: list[str]) -> None:
    Connection.objects.filter(pk=conn_id).update(subscriptions=names)


class RivetKitConsumer(SocketConsumer):
    """One RivetKit-client connection to one actor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.encoding: WireEncoding = "json"
        self.actor_id: uuid.UUID | None = None
        self.conn_id: uuid.UUID | None = None
        self.origin = Origin(transport="websocket")
        self.subscriptions: set[str] = set()
        self.closed = False
        self._actions: asyncio.Queue[ActionCall | None] = asyncio.Queue(
            MAX_PENDING_ACTIONS
        )
        self._worker: asyncio.Task[None] | None = None
        self._save_task: asyncio.Task[None] | None = None
        self._subscriptions_dirty = False
        self.stream: Stream | None = None
        self.pressure: Pressure | None = None
        self._cleanup: asyncio.Task[None] | None = None

    async def close_internal(self) -> None:
        """Close after an unexpected error (4500, ``rivet.internal_error``)."""
        await self._close(CLOSE_INTERNAL, "rivet.internal_error")

    # -- connect ------------------------------------------------------------------
    async def websocket_connect(self, message: dict[str, Any]) -> None:
        """Parse the request, admit it through the spine, send ``Init``."""
        subprotocols = list(self.scope.get("subprotocols") or [])
        offered = SUBPROTOCOL in subprotocols
        connect: Connect | None = None
        try:
            self.encoding = protocol.parse_encoding(
                _subprotocol_value(subprotocols, ENCODING_PREFIX)
            )
            params_text = _subprotocol_value(subprotocols, PARAMS_PREFIX)
            params = decode_conn_params(
                None if params_text is None else unquote(params_text)
            )
            kwargs = self.scope.get("url_route", {}).get("kwargs", {})
            query = parse_qs(
                self.scope.get("query_string", b"").decode("utf-8", "replace"),
                keep_blank_values=True,
            )
            target = gateway_target(str(kwargs.get("target", "")), query)
            headers = dict(scope_headers(self.scope))
            if not websocket_origin_allowed(headers.get("origin"), self.scope):
                raise Forbidden(
                    "Origin not allowed", metadata={"origin": headers.get("origin")}
                )
            token = _subprotocol_value(subprotocols, TOKEN_PREFIX) or target.token
            if token is not None:
                headers[TOKEN_HEADER.lower()] = token
            self.origin = Origin(
                transport="websocket",
                user=self.scope.get("user"),
                headers=CaseInsensitiveMapping(headers),
                request=self.scope,
                params=params,
            )
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
            connect = Connect(
                params=params, channel_name=self.channel_name, encoding=self.encoding
            )
            result = await ainvoke(ref, connect, self.origin)
        except Exception as exc:
            await self._refuse(exc, offered, connect is not None and connect.refused)
            return
        await self.accept(subprotocol=SUBPROTOCOL if offered else None)
        self.actor_id, self.conn_id = result.actor_id, result.conn_id
        self.origin = Origin(
            transport="websocket",
            user=self.origin.user,
            headers=self.origin.headers,
            request=self.scope,
            params=self.origin.params,
            conn_id=result.conn_id,
        )
        heartbeat.add(result.conn_id, result.actor_id, self._row_gone)
        self.stream = Stream(result.actor_id, result.head, self)
        logger.debug(
            "rivetkit connected actor_id=%s conn_id=%s", result.actor_id, result.conn_id
        )
        await self._send_raw(
            protocol.encode_init(
                str(result.actor_id), str(result.conn_id), self.encoding
            )
        )
        self.stream.start()
        self._worker = asyncio.create_task(self._action_loop())

    async def _refuse(self, exc: BaseException, offered: bool, refused: bool) -> None:
        error = public_error(exc)
        # 403: a refusal, also when on_auth raised a UserError (kept as is).
        if refused or isinstance(error, Forbidden) or error.http_status == 403:
            code = CLOSE_FORBIDDEN
        elif error.http_status >= 500:
            code = CLOSE_INTERNAL
        elif error.http_status == 429:
            code = CLOSE_TOO_MANY_CONNECTIONS
        else:
            code = CLOSE_BAD_REQUEST
        logger.info(
            "rivetkit connection refused code=%s error=%s path=%r",
            code,
            error.qualified_code,
            self.scope.get("path"),
        )
        await self.accept(subprotocol=SUBPROTOCOL if offered else None)
        await self._send_error(error, None)
        await self._close(code, f"{error.group}.{error.code}")

    # -- frames from the client ----------------------------------------------------
    async def websocket_receive(self, message: dict[str, Any]) -> None:
        """Check the size, decode and route one client frame."""
        if self.conn_id is None or self.closed:
            return
        data = message.get("bytes")
        if data is None:
            data = message.get("text") or ""
        limit = int(rivet_settings.MAX_INCOMING_MESSAGE_BYTES)
        size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8"))
        try:
            if size > limit:
                raise RequestTooLarge(
                    f"The frame is {size} bytes; the limit is {limit}",
                    metadata={"size": size, "limit": limit},
                )
            frame = await run_decoder(protocol.decode_frame, data, self.encoding)
            if isinstance(frame, ActionCall):
                await self._actions.put(frame)
            elif frame.subscribe:
                self._subscribe(event_name(frame.event))
            else:
                self._unsubscribe(frame.event)
        except Exception as exc:  # a bad frame must not kill the connection
            await self._send_error(public_error(exc), None)

    async def _action_loop(self) -> None:
        while True:
            call = await self._actions.get()
            if call is None:
                return
            try:
                output = await ainvoke(
                    ActorRef(actor_id=self.actor_id),
                    ConnAction(call.name, call.args),
                    self.origin,
                )
                data = protocol.encode_action_response(call.id, output, self.encoding)
            except Exception as exc:
                await self._send_error(public_error(exc), call.id)
                if isinstance(exc, ConnectionExpired):
                    await self._close(CLOSE_NORMAL, "actor.connection_expired")
                continue
            await self._send_checked(data, call.id)

    # -- subscriptions ------------------------------------------------------------
    def _subscribe(self, event: str) -> None:
        if event in self.subscriptions:
            return
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise MalformedRequest(f"At most {MAX_SUBSCRIPTIONS} subscriptions")
        self.subscriptions.add(event)
        self._schedule_save()

    def _unsubscribe(self, event: str) -> None:
        if event in self.subscriptions:
            self.subscriptions.discard(event)
            self._schedule_save()

    def _schedule_save(self) -> None:
        # A burst of subscription frames (one per event after Init) collapses
        # into one UPDATE.
        self._subscriptions_dirty = True
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.create_task(self._save_subscriptions())

    async def _save_subscriptions(self) -> None:
        while self._subscriptions_dirty and not self.closed:
            self._subscriptions_dirty = False
            assert self.conn_id is not None
            try:
                await database_sync_to_async(_save_subscriptions)(
                    self.conn_id, sorted(self.subscriptions)
                )
            except Exception:
                logger.exception("saving subscriptions failed conn_id=%s", self.conn_id)

    # -- events -------------------------------------------------------------------
    # The EventSink side of self.stream (transport/delivery.py).
    @property
    def frame_key(self) -> str:
        """Cache key of this connection's encoded event frames."""
        return f"rivetkit.{self.encoding}"

    def wants_event(self, name: str) -> bool:
        """Whether this connection is subscribed to ``name``."""
        return name in self.subscriptions

    def event_names(self) -> list[str] | None:
        """The subscribed names, for log queries."""
        return sorted(self.subscriptions)

    def encode_event(self, event: LoggedEvent) -> bytes:
        """Encode an ``Event`` frame; an oversized one becomes an error."""
        return self._event_frame(event.name, event.args)

    async def send_data(self, data: bytes) -> None:
        """Send an encoded frame (the stream's events)."""
        await self._send_raw(data)

    async def send_error(self, error: RivetError) -> None:
        """Send a connection-level ``Error`` frame (not for an oversized event).

        The official client fails its pending calls on a connection-level
        ``Error``: an event too large to send is only logged, as before.
        """
        if isinstance(error, RequestTooLarge):
            logger.warning("event too large metadata=%r", error.metadata)
            return
        await self._send_error(error, None)

    def _event_frame(self, name: str, args: bytes) -> bytes:
        try:
            values = cbor_loads(bytes(args))
            data = protocol.encode_event(name, values, self.encoding)
        except Exception as exc:
            logger.exception("undeliverable event name=%r", name)
            raise InternalError(
                "An event could not be encoded", metadata={"event": name}
            ) from exc
        limit = int(rivet_settings.MAX_OUTGOING_MESSAGE_BYTES)
        if len(data) > limit:
            raise RequestTooLarge(
                f"Event {name!r} is {len(data)} bytes; the limit is {limit}",
                metadata={"event": name, "limit": limit},
            )
        return data

    async def rivet_send(self, message: dict[str, Any]) -> None:
        """Deliver ``conn.send(...)`` to this connection."""
        if self.closed:
            return
        try:
            data = self._event_frame(message["name"], message["args"])
        except RivetError as error:
            await self._send_error(error, None)
            return
        await self._send_raw(data)

    async def rivet_disconnect(self, message: dict[str, Any]) -> None:
        """Close on ``conn.disconnect()``, destruction or a stale sweep."""
        reason = DISCONNECT_REASONS.get(
            message.get("reason") or "", "actor.disconnected"
        )
        await self._close(CLOSE_NORMAL, reason)

    def _row_gone(self) -> None:
        # The heartbeat found the row deleted and the close message was lost.
        asyncio.get_running_loop().create_task(
            self.rivet_disconnect({"reason": "stale"})
        )

    # -- sending ------------------------------------------------------------------
    async def _send_checked(self, data: bytes, action_id: int) -> None:
        limit = int(rivet_settings.MAX_OUTGOING_MESSAGE_BYTES)
        if len(data) > limit:
            await self._send_error(
                RequestTooLarge(
                    f"The response is {len(data)} bytes; the limit is {limit}",
                    metadata={"size": len(data), "limit": limit},
                ),
                action_id,
            )
            return
        await self._send_raw(data)

    async def _send_error(self, error: RivetError, action_id: int | None) -> None:
        await self._send_raw(protocol.encode_error(error, action_id, self.encoding))

    async def _send_raw(self, data: bytes) -> None:
        if self.closed:
            return
        pressure = self.pressure
        if pressure is not None and pressure.paused:
            # The client does not read: wait, and give up on it after a while.
            if not await pressure.wait(float(rivet_settings.SLOW_CONSUMER_TIMEOUT)):
                logger.warning(
                    "closing a slow rivetkit consumer conn_id=%s", self.conn_id
                )
                await self._close(CLOSE_SLOW_CONSUMER, "rivet.slow_consumer")
                return
            if self.closed:
                return
        if self.encoding == "json":
            await self.send(text_data=data.decode("utf-8"))
        else:
            await self.send(bytes_data=data)

    async def _close(self, code: int, reason: str) -> None:
        if not self.closed:
            self.closed = True
            await self.close(code=code, reason=reason)

    # -- disconnect ---------------------------------------------------------------
    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        """Drop queued actions, finish the running one, run ``on_disconnect``."""
        self.closed = True
        try:
            await self._run_cleanup()
        finally:
            raise StopConsumer()

    async def _run_cleanup(self) -> None:
        # Once, in a task of its own, so a cancelled consumer still cleans up.
        if self._cleanup is None:
            self._cleanup = asyncio.get_running_loop().create_task(self._shutdown())
        await asyncio.shield(self._cleanup)

    async def _shutdown(self) -> None:
        if self._worker is not None:
            while not self._actions.empty():
                self._actions.get_nowait()
            self._actions.put_nowait(None)
            try:
                await self._worker
            except Exception:
                logger.exception("action worker failed conn_id=%s", self.conn_id)
        if self._save_task is not None:
            await asyncio.gather(self._save_task, return_exceptions=True)
        if self.stream is not None:
            await self.stream.close()
        if self.conn_id is None or self.actor_id is None:
            return
        await disconnect_cleanup(ActorRef(actor_id=self.actor_id), self.conn_id)
