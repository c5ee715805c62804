"""One connection consumer for both protocol flavours; each supplies a codec.

:class:`ConnectionConsumer` serves one socket to one actor, the way
Channels' ``JsonWebsocketConsumer`` specialises its base: this class owns
everything about the connection, and a flavour (:mod:`.consumer`, django-
rivet's own protocol; :mod:`.rivetkit.consumer`, the official RivetKit
client's) supplies the codec only (:class:`~.codec.FrameCodec`) -- reading
the handshake (``read_connect``), decoding a frame (``decode_frame``) and
encoding what the server sends (``encode_init``, ``encode_output``,
``encode_error``, ``encode_event``). A flavour overrides nothing else
without a comment saying why (docs/protocol.md lists the differences). What
the base owns:

* **Admission** through the runtime (the ``Connect`` operation: ``on_auth``,
  ``on_before_connect``, ``create_conn_state``, ``on_connect`` and the row),
  with the same close code for the same refusal in every flavour.
* **Frames in order, bounded.** Frames are taken from the server at once
  into a queue bounded by count and bytes (:class:`.flow.Inbound`; under
  daphne the socket is read only while the consumer takes them,
  :class:`.flow.DaphneReads`), then decoded and handled one at a time, in
  the order sent, after any replay: actions through the runtime
  (``on_auth`` per action), subscriptions through ``can_subscribe``.
* **Events exactly once, in order, or a coded notice**
  (:class:`.delivery.Stream`), with replay after ``since``: the connection's
  :class:`~.subscriptions.Subscriptions` follow the actor's events.
* **Flow control** (:mod:`.flow`): a socket that does not take a frame for
  ``SLOW_CONSUMER_TIMEOUT`` is closed with 4408.
* **Answers before closes**, and **cleanup on every exit path**: the row is
  removed and ``on_disconnect`` runs however the socket ends; a failing
  channel-layer read (a Redis restart) is retried instead of ending the
  consumer, which daphne would report as a 1011 close.

The guarantees rest on their order: answers before closes, replays under
the stream's lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any, ClassVar

from channels.consumer import AsyncConsumer, get_handler_name
from channels.db import aclose_old_connections
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

from ..actors.calls import Origin
from ..actors.connections import ConnAction, Connect
from ..actors.errors import public_error
from ..actors.lanes import ainvoke
from ..actors.rows import ActorRef
from ..conf import rivet_settings
from ..encoding import run_decoder
from ..events import channel_receive
from ..exceptions import (
    ConnectionExpired,
    RivetError,
)
from ..signals import socket_opened
from . import parsing
from .codec import FrameCodec
from .flow import DaphneReads, Inbound, Outbound
from .frames import (
    CLOSE_EXPIRED,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_TIMEOUT,
    DISCONNECT_REASONS,
    ActionFrame,
    ConnectPlan,
    FrameError,
    close_code_for,
    close_reason,
)
from .heartbeat import disconnect_cleanup, heartbeat
from .limits import outgoing_too_large
from .parsing import SUBPROTOCOL, event_name, handshake_request, masked_scope
from .sending import Sender
from .subscriptions import Subscriptions

logger = logging.getLogger("django_rivet.transport")

__all__ = ["ConnectionConsumer"]


# -- the consumer -----------------------------------------------------------------
class ConnectionConsumer(FrameCodec, Sender, AsyncConsumer):
    """One WebSocket connection to one actor; a flavour supplies the codec."""

    #: Names the flavour in logs and in the cache of encoded event frames.
    flavour: ClassVar[str] = "rivet"
    #: What ``on_auth`` reads in ``info.transport`` (``websocket_raw``: raw).
    transport: ClassVar[str] = "websocket"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.encoding = "json"
        self.actor_id: uuid.UUID | None = None
        self.conn_id: uuid.UUID | None = None
        self.ref: ActorRef | None = None
        self.origin = Origin(transport=self.transport)
        self.closed = False
        self.subscriptions = Subscriptions(self)
        self.outbound: Outbound | None = None
        self.inbound = Inbound(
            rivet_settings.MAX_PENDING_FRAMES,
            rivet_settings.MAX_PENDING_FRAME_BYTES,
        )
        self._reader: asyncio.Task[None] | None = None
        self._refusal: asyncio.Task[None] | None = None
        # While an action runs, a close the server asked for (ctx.destroy(),
        # conn.disconnect()) waits for its answer, so the caller learns the
        # outcome of the action that closed its own socket.
        self._in_action = False
        self._close_after_action: tuple[int, str] | None = None
        self._cleanup: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    async def event_undeliverable(self, error: RivetError) -> None:
        """Tell the client an event could not be sent to it (too large...)."""
        await self.send_error_frame(error)

    # -- serving ------------------------------------------------------------------
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve the socket; clean the connection up however this ends."""
        self.scope = scope
        # RIVET["CHANNEL_LAYER"]: the layer events.send_to_channel uses.
        self.channel_layer = get_channel_layer(rivet_settings.CHANNEL_LAYER)
        self.base_send = send
        self.outbound = Outbound(send)
        reads = DaphneReads.attach(receive, self.outbound.daphne)
        socket_opened.send(sender=type(self))  # starts the embedded worker
        sources = [receive if reads is None else reads.receive, self._stop_message]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            layer, name = self.channel_layer, self.channel_name
            sources.append(lambda: channel_receive(layer, name))
        try:
            await await_many_dispatch(sources, self.dispatch)
        except StopConsumer:
            pass
        except Exception:
            logger.exception("%s failed conn_id=%s", type(self).__name__, self.conn_id)
            await self._close(CLOSE_INTERNAL, "rivet.internal_error")
        finally:
            self.closed = True
            self.outbound.close()
            if reads is not None:
                reads.close()
            await self._run_cleanup()

    async def _stop_message(self) -> dict[str, Any]:
        await self._stopped.wait()
        return {"type": "rivet.stop"}

    async def rivet_stop(self, message: dict[str, Any]) -> None:
        """End the consumer: its socket did not take the close frame in time."""
        raise StopConsumer()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Route a message to its handler.

        Channels closes stale DB connections before every message. Here that
        happens at the start and end of a connection; in between a consumer
        reaches the database only through ``ainvoke`` and
        ``database_sync_to_async``, which close old connections themselves.
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        if message["type"] in ("websocket.connect", "websocket.disconnect"):
            await aclose_old_connections()
        await handler(message)

    # -- connect ------------------------------------------------------------------
    async def websocket_connect(self, message: dict[str, Any]) -> None:
        """Read the handshake, admit it through the runtime, send the init frame."""
        connect: Connect | None = None
        try:
            plan = self.read_connect()
            self.encoding = plan.encoding
            self.origin = Origin(
                transport=self.transport,
                user=self.scope.get("user"),
                headers=plan.headers,
                request=masked_scope(self.scope),
                params=plan.params,
                http_request=handshake_request(self.scope),
            )
            connect = self.connect_operation(plan)
            result = await ainvoke(plan.ref, connect, self.origin)
        except Exception as exc:
            await self._refuse(
                public_error(exc), connect is not None and connect.refused
            )
            return
        await self._accept()
        self.actor_id, self.conn_id = result.actor_id, result.conn_id
        self.ref = ActorRef(name=result.name, actor_id=result.actor_id)
        self.origin = dataclasses.replace(self.origin, conn_id=result.conn_id)
        heartbeat.add(result.conn_id, result.actor_id, self._row_gone)
        # The stream joins the process's feed of the actor now, so nothing
        # committed after the admission (result.head) can slip past it.
        self.subscriptions.follow(
            self.ref,
            self.origin,
            result.conn_id,
            result.head,
            set(connect.subscriptions) - set(result.refused),
            plan.since,
            f"{self.flavour}.{self.encoding}",
        )
        logger.debug(
            "connected flavour=%s actor_id=%s conn_id=%s",
            self.flavour,
            result.actor_id,
            result.conn_id,
        )
        init = self.encode_init(result)
        if init:
            await self.send_frame(init)
        for notice in result.notices(plan.since):
            await self.send_error_frame(notice)
        self._reader = asyncio.create_task(self._read_frames())

    def connect_operation(self, plan: ConnectPlan) -> Connect:
        """Return the operation admitting this connection."""
        return Connect(
            params=plan.params,
            channel_name=parsing.required_channel(self),
            encoding=plan.encoding,
            subscriptions=sorted(set(plan.subscriptions)),
            since=plan.since,
        )

    async def _accept(self) -> None:
        offered = SUBPROTOCOL in (self.scope.get("subprotocols") or [])
        await self.base_send(
            {
                "type": "websocket.accept",
                "subprotocol": SUBPROTOCOL if offered else None,
            }
        )

    async def _refuse(self, error: RivetError, refused: bool) -> None:
        code = close_code_for(error, refused)
        logger.info(
            "connection refused flavour=%s code=%s error=%s path=%r",
            self.flavour,
            code,
            error.qualified_code,
            masked_scope(self.scope)["path"],
        )
        # Accepted first: a close before accepting reaches browsers as 1006
        # with no reason, so the client could not tell why.
        await self._accept()
        await self.send_error_frame(error)
        await self._close(code, close_reason(error))

    # -- frames from the client -----------------------------------------------------
    async def websocket_receive(self, message: dict[str, Any]) -> None:
        """Queue one client frame, or refuse it (never waits: ``_refuse_frames``).

        A frame over ``MAX_INCOMING_MESSAGE_BYTES`` is not read at all: an
        error frame, then the close code 4413, which tells the client to fail
        its pending calls at once. So are frames beyond the pending bounds
        (4429).
        """
        if self.conn_id is None or self.closed or self._refusal is not None:
            return
        limit = rivet_settings.MAX_INCOMING_MESSAGE_BYTES
        refusal = self.inbound.take(message, limit)
        if refusal is not None:
            await self._refuse_frames(*refusal)

    async def _refuse_frames(self, error: RivetError, code: int) -> None:
        """Answer frames the server will not read with ``error``, then close.

        The answer may wait for the socket (flow control): it is sent from a
        task of its own, so this never stops taking the server's frames.
        """
        logger.info(
            "frames refused flavour=%s conn_id=%s error=%s",
            self.flavour,
            self.conn_id,
            error.qualified_code,
        )
        self.inbound.close()  # what is queued is not run either
        self._refusal = asyncio.create_task(self._send_refusal(error, code))

    async def _send_refusal(self, error: RivetError, code: int) -> None:
        # At once, also to a client that does not read (and sends past the
        # bounds): the error frame does not wait for room, and a running
        # action's answer has CLOSE_TIMEOUT to go first.
        await self.send_error_frame(error, urgent=True)
        await self._close_when_answered(code, close_reason(error))
        if not self.closed:
            await asyncio.sleep(CLOSE_TIMEOUT)
            await self._close(code, close_reason(error))

    async def _read_frames(self) -> None:
        # The replay after since runs here, not in websocket_connect: the
        # server's messages are still taken, and bounded, while it runs;
        # frames wait for it in self.inbound.
        try:
            await self.subscriptions.start()
        except Exception:
            logger.exception("replay failed conn_id=%s", self.conn_id)
            await self._close(CLOSE_INTERNAL, "rivet.internal_error")
        while (data := await self.inbound.get()) is not None:
            if self.closed:
                return
            try:
                await self.handle_frame(data)
            except FrameError as exc:
                await self.send_error_frame(exc.error, exc.action_id)
            except Exception as exc:  # a bad frame must not end the connection
                await self.send_error_frame(public_error(exc))

    async def handle_frame(self, data: bytes | str) -> None:
        """Decode one client frame and run it: an action or a subscription."""
        frame = await run_decoder(self.decode_frame, data)
        if isinstance(frame, ActionFrame):
            await self._run_action(frame)
        elif frame.subscribe:
            await self.subscriptions.subscribe(event_name(frame.event))
        else:
            self.subscriptions.unsubscribe(frame.event)

    async def _run_action(self, frame: ActionFrame) -> None:
        assert self.ref is not None
        self._in_action = True
        try:
            call = ConnAction(frame.name, frame.args, encoder=self.checked_output)
            output = await ainvoke(self.ref, call, self.origin)
            data = self.encode_output(frame.id, output)
            too_large = outgoing_too_large(data)
            if too_large is not None:
                raise FrameError(too_large, frame.id)
            await self.send_frame(data)
        except FrameError as exc:
            await self.send_error_frame(exc.error, exc.action_id)
        except Exception as exc:
            error = public_error(exc)
            await self.send_error_frame(error, frame.id)
            if isinstance(exc, ConnectionExpired):
                self._close_after_action = (CLOSE_EXPIRED, close_reason(error))
        finally:
            self._in_action = False
        if self._close_after_action is not None:
            await self._close(*self._close_after_action)

    # -- events ---------------------------------------------------------------------
    async def rivet_send(self, message: dict[str, Any]) -> None:
        """Deliver ``conn.send(...)``: to this connection only, no seq."""
        if self.closed:
            return
        try:
            data = self.event_frame(message["name"], None, message["args"])
        except RivetError as error:
            await self.event_undeliverable(error)
            return
        await self.send_frame(data)

    async def rivet_disconnect(self, message: dict[str, Any]) -> None:
        """Close on ``conn.disconnect()``, destruction or a stale sweep."""
        reason = DISCONNECT_REASONS.get(
            str(message.get("reason") or ""), "actor.disconnected"
        )
        logger.debug("server closes conn_id=%s reason=%s", self.conn_id, reason)
        await self._close_when_answered(CLOSE_NORMAL, reason)

    def _row_gone(self) -> None:
        # The heartbeat found this connection's row deleted (swept, or the
        # actor destroyed) and the message saying so was lost: close.
        asyncio.get_running_loop().create_task(
            self.rivet_disconnect({"reason": "gone"})
        )

    # -- disconnect ---------------------------------------------------------------
    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        """Drop queued frames, finish the running action, run ``on_disconnect``."""
        self.closed = True
        try:
            await self._run_cleanup()
        finally:
            raise StopConsumer()

    async def _run_cleanup(self) -> None:
        # Once, in a task of its own: if the server cancels this consumer
        # (daphne does 10 s after the socket closed), the row is still removed.
        if self._cleanup is None:
            self._cleanup = asyncio.get_running_loop().create_task(self._shutdown())
        try:
            await asyncio.shield(self._cleanup)
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - _shutdown logs its own failures
            logger.exception("cleanup failed conn_id=%s", self.conn_id)

    async def _shutdown(self) -> None:
        self.inbound.close()
        if self._refusal is not None:
            await asyncio.gather(self._refusal, return_exceptions=True)
        if self._reader is not None:
            try:
                await self._reader
            except Exception:
                logger.exception("frame reader failed conn_id=%s", self.conn_id)
        await self.subscriptions.close()
        if self.conn_id is None or self.ref is None:
            return
        await disconnect_cleanup(self.ref, self.conn_id)
        logger.debug("disconnected conn_id=%s", self.conn_id)
