"""One connection consumer for both protocol flavours; each supplies a codec.

:class:`ConnectionConsumer` serves one socket to one actor, the way
Channels' ``JsonWebsocketConsumer`` specialises its base: this class owns
everything about the connection, and a flavour (:mod:`.consumer`, django-
rivet's own protocol; :mod:`.rivetkit.consumer`, the official RivetKit
client's) supplies the codec only -- reading the handshake
(:meth:`~ConnectionConsumer.read_connect`), decoding a frame
(:meth:`~ConnectionConsumer.decode_frame`) and encoding what the server
sends (``encode_init``, ``encode_output``, ``encode_error``,
``encode_event``). A flavour overrides nothing else without a comment
saying why (docs/protocol.md lists the differences). What the base owns:

* **Admission** through the runtime (the ``Connect`` operation: ``on_auth``,
  ``on_before_connect``, ``create_conn_state``, ``on_connect`` and the row),
  with the same close code for the same refusal in every flavour.
* **Frames in order, bounded.** Frames are taken from the server at once
  into a queue bounded by count and bytes (:class:`.flow.Inbound`), then
  decoded and handled one at a time, in the order sent: actions through the
  runtime (``on_auth`` per action), subscriptions through ``can_subscribe``.
* **Events exactly once, in order, or a coded notice**
  (:class:`.delivery.Stream`), with replay after ``since``.
* **Flow control** (:mod:`.flow`): a socket that does not take a frame for
  ``SLOW_CONSUMER_TIMEOUT`` is closed with 4408.
* **Answers before closes**, and **cleanup on every exit path**: the row is
  removed and ``on_disconnect`` runs however the socket ends; a failing
  channel-layer read (a Redis restart) is retried instead of ending the
  consumer, which daphne would report as a 1011 close.

The consumer is one piece on purpose (about 640 lines): the frame queue,
subscriptions, delivery and the close rules share one connection's state,
and their ordering (answers before closes, replays under the stream's lock)
is what the guarantees rest on.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import uuid
from typing import Any, ClassVar

from channels.consumer import AsyncConsumer, get_handler_name
from channels.db import aclose_old_connections, database_sync_to_async
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

from ..actors import registry
from ..actors.calls import Origin
from ..actors.connections import (
    WILDCARD,
    ConnAction,
    Connect,
    ConnectResult,
    Subscribe,
    save_subscriptions,
)
from ..actors.errors import public_error
from ..actors.lanes import ainvoke
from ..actors.rows import ActorRef
from ..conf import rivet_settings
from ..encoding import Encoded, cbor_loads, run_decoder
from ..events import LoggedEvent
from ..exceptions import (
    ConnectionExpired,
    EventLogTruncated,
    InternalError,
    MalformedRequest,
    RequestTooLarge,
    RivetError,
    TooManyFrames,
)
from .delivery import Stream
from .feeds import channel_receive
from .flow import Inbound, Outbound
from .frames import (
    CLOSE_EXPIRED,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_SLOW_CONSUMER,
    CLOSE_TOO_LARGE,
    CLOSE_TOO_MANY,
    DISCONNECT_REASONS,
    ActionFrame,
    ConnectPlan,
    FrameError,
    SubscriptionFrame,
    close_code_for,
    close_reason,
)
from .heartbeat import disconnect_cleanup, heartbeat
from .limits import outgoing_too_large
from .parsing import (
    MAX_SUBSCRIPTIONS,
    SUBPROTOCOL,
    event_name,
    handshake_request,
    loggable_path,
)

logger = logging.getLogger("django_rivet.transport")

__all__ = ["ConnectionConsumer"]

# How long a close frame may take to leave (it waits behind unsent data).
CLOSE_TIMEOUT = 1.0


# -- the consumer -----------------------------------------------------------------
class ConnectionConsumer(AsyncConsumer):
    """One WebSocket connection to one actor; a flavour supplies the codec."""

    #: Names the flavour in logs and in the cache of encoded event frames.
    flavour: ClassVar[str] = "rivet"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.encoding = "json"
        self.actor_id: uuid.UUID | None = None
        self.conn_id: uuid.UUID | None = None
        self.ref: ActorRef | None = None
        self.origin = Origin(transport="websocket")
        self.subscriptions: set[str] = set()
        self.wildcard = False
        self.since: int | None = None
        self.replayed: set[str] = set()
        self.closed = False
        self.stream: Stream | None = None
        self.outbound: Outbound | None = None
        self.inbound = Inbound(
            rivet_settings.MAX_PENDING_FRAMES,
            rivet_settings.MAX_PENDING_FRAME_BYTES,
        )
        self._reader: asyncio.Task[None] | None = None
        self._refusal: asyncio.Task[None] | None = None
        self._save_task: asyncio.Task[None] | None = None
        self._subscriptions_dirty = False
        self._guarded: type[Any] | None = None
        # While an action runs, a close the server asked for (ctx.destroy(),
        # conn.disconnect()) waits for its answer, so the caller learns the
        # outcome of the action that closed its own socket.
        self._in_action = False
        self._close_after_action: tuple[int, str] | None = None
        self._cleanup: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    # -- the codec (each flavour) ------------------------------------------------------
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

    async def event_undeliverable(self, error: RivetError) -> None:
        """Tell the client an event could not be sent to it (too large...)."""
        await self._send_error(error)

    # -- serving ------------------------------------------------------------------
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve the socket; clean the connection up however this ends."""
        self.scope = scope
        # RIVET["CHANNEL_LAYER"]: the layer events.send_to_channel uses.
        self.channel_layer = get_channel_layer(rivet_settings.CHANNEL_LAYER)
        self.base_send = send
        self.outbound = Outbound(send)
        sources = [receive, self._stop_message]
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
                transport="websocket",
                user=self.scope.get("user"),
                headers=plan.headers,
                request=self.scope,
                params=plan.params,
                http_request=handshake_request(self.scope),
            )
            connect = Connect(
                params=plan.params,
                channel_name=self.channel_name,
                encoding=plan.encoding,
                subscriptions=sorted(set(plan.subscriptions)),
                since=plan.since,
            )
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
        self.since = plan.since
        admitted = set(connect.subscriptions) - set(result.refused)
        self.wildcard = WILDCARD in admitted
        self.subscriptions = admitted - {WILDCARD}
        heartbeat.add(result.conn_id, result.actor_id, self._row_gone)
        # The stream joins the process's feed of the actor now, so nothing
        # committed after the admission (result.head) can slip past it.
        self.stream = Stream(result.actor_id, result.head, self)
        logger.debug(
            "connected flavour=%s actor_id=%s conn_id=%s",
            self.flavour,
            result.actor_id,
            result.conn_id,
        )
        await self._send_raw(self.encode_init(result))
        for refusal in result.refused.values():
            await self._send_error(refusal)
        if result.truncated:
            await self._send_error(
                EventLogTruncated(
                    "The event log no longer reaches back to the requested seq; "
                    "refetch the state",
                    metadata={
                        "since": plan.since,
                        "oldest": result.oldest,
                        "latest": result.head,
                    },
                )
            )
        if self.since is not None and (self.wildcard or self.subscriptions):
            self.replayed.update(self.subscriptions)
            await self.stream.replay(self.since, self.event_names())
        self.stream.start()
        self._reader = asyncio.create_task(self._read_frames())

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
            loggable_path(str(self.scope.get("path", ""))),
        )
        # Accepted first: a close before accepting reaches browsers as 1006
        # with no reason, so the client could not tell why.
        await self._accept()
        await self._send_error(error)
        await self._close(code, close_reason(error))

    # -- frames from the client -----------------------------------------------------
    async def websocket_receive(self, message: dict[str, Any]) -> None:
        """Queue one client frame (never waits: the server's queue stays empty).

        A frame over ``MAX_INCOMING_MESSAGE_BYTES`` is not read at all: an
        error frame, then the close code 4413, which tells the client to fail
        its pending calls at once. So are frames beyond the pending bounds
        (4429).
        """
        if self.conn_id is None or self.closed or self._refusal is not None:
            return
        data = message.get("bytes")
        if data is None:
            data = message.get("text") or ""
        size = len(data) if isinstance(data, bytes) else _utf8_size(data)
        limit = rivet_settings.MAX_INCOMING_MESSAGE_BYTES
        if size > limit:
            await self._refuse_frames(
                RequestTooLarge(
                    f"The frame is {size} bytes; the limit is {limit}",
                    metadata={"size": size, "limit": limit},
                ),
                CLOSE_TOO_LARGE,
            )
        elif not self.inbound.put(data, size):
            await self._refuse_frames(
                TooManyFrames(
                    metadata={
                        "max_frames": self.inbound.max_frames,
                        "max_bytes": self.inbound.max_bytes,
                    }
                ),
                CLOSE_TOO_MANY,
            )

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
        await self._send_error(error)
        await self._close_when_answered(code, close_reason(error))

    async def _read_frames(self) -> None:
        while (data := await self.inbound.get()) is not None:
            if self.closed:
                return
            try:
                frame = await run_decoder(self.decode_frame, data)
                if isinstance(frame, ActionFrame):
                    await self._run_action(frame)
                elif frame.subscribe:
                    await self._subscribe(event_name(frame.event))
                else:
                    self._unsubscribe(frame.event)
            except FrameError as exc:
                await self._send_error(exc.error, exc.action_id)
            except Exception as exc:  # a bad frame must not end the connection
                await self._send_error(public_error(exc))

    async def _run_action(self, frame: ActionFrame) -> None:
        assert self.ref is not None
        self._in_action = True
        try:
            call = ConnAction(frame.name, frame.args, encoder=self._output_encoder)
            output = await ainvoke(self.ref, call, self.origin)
            data = self.encode_output(frame.id, output)
            too_large = outgoing_too_large(data)
            if too_large is not None:
                raise FrameError(too_large, frame.id)
            await self._send_raw(data)
        except FrameError as exc:
            await self._send_error(exc.error, exc.action_id)
        except Exception as exc:
            error = public_error(exc)
            await self._send_error(error, frame.id)
            if isinstance(exc, ConnectionExpired):
                self._close_after_action = (CLOSE_EXPIRED, close_reason(error))
        finally:
            self._in_action = False
        if self._close_after_action is not None:
            await self._close(*self._close_after_action)

    def _output_encoder(self, value: Any) -> bytes:
        # Called in the invocation's thread, before commit: an output outside
        # the domain, or too large to send, rolls the action back.
        data = self.encode_value(value)
        too_large = outgoing_too_large(data)
        if too_large is not None:
            raise too_large
        return data

    # -- subscriptions ------------------------------------------------------------
    async def _subscribe(self, event: str) -> None:
        """Subscribe after ``can_subscribe`` allowed it (``*``: every event)."""
        if event in self.subscriptions or (event == WILDCARD and self.wildcard):
            return
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise MalformedRequest(f"At most {MAX_SUBSCRIPTIONS} subscriptions")
        assert self.ref is not None and self.stream is not None
        if self._definition().overrides("can_subscribe"):
            refusal = await ainvoke(self.ref, Subscribe(event), self.origin)
            if refusal is not None:
                raise refusal
        async with self.stream.lock:  # live delivery waits: a stable cursor
            if event == WILDCARD:
                # Live events only: a replay of every name would repeat the
                # ones already delivered for this connection's names.
                self.wildcard = True
            else:
                if self.since is not None and event not in self.replayed:
                    # Missed events of this name, up to where live delivery is.
                    self.replayed.add(event)
                    if not self.wildcard:
                        await self.stream.replay(self.since, [event])
                self.subscriptions.add(event)
        self._save_subscriptions()

    def _unsubscribe(self, event: str) -> None:
        if event == WILDCARD and self.wildcard:
            self.wildcard = False
        elif event in self.subscriptions:
            self.subscriptions.discard(event)
        else:
            return
        self._save_subscriptions()

    def _definition(self) -> type[Any]:
        if self._guarded is None:
            assert self.ref is not None and self.ref.name is not None
            self._guarded = registry.get(self.ref.name)
        return self._guarded

    def _save_subscriptions(self) -> None:
        # Bursts of subscribe frames (a client resubscribing after a
        # reconnect) collapse into one UPDATE.
        self._subscriptions_dirty = True
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.create_task(self._write_subscriptions())

    async def _write_subscriptions(self) -> None:
        while self._subscriptions_dirty and not self.closed:
            self._subscriptions_dirty = False
            names = sorted(self.subscriptions) + ([WILDCARD] if self.wildcard else [])
            assert self.conn_id is not None
            try:
                await database_sync_to_async(save_subscriptions)(self.conn_id, names)
            except Exception:
                logger.exception("saving subscriptions failed conn_id=%s", self.conn_id)

    # -- events: the EventSink side of self.stream (transport/feeds.py) -----------
    @property
    def frame_key(self) -> str:
        """Cache key of this connection's encoded event frames."""
        return f"{self.flavour}.{self.encoding}"

    def wants_event(self, name: str) -> bool:
        """Whether this connection is subscribed to ``name``."""
        return self.wildcard or name in self.subscriptions

    def event_names(self) -> list[str] | None:
        """The subscribed names, for log queries (``None``: all)."""
        return None if self.wildcard else sorted(self.subscriptions)

    def encode_logged(self, event: LoggedEvent) -> bytes:
        """Encode a logged event's frame; an oversized one becomes an error."""
        return self._event_frame(event.name, event.seq, event.args)

    async def send_data(self, data: bytes) -> None:
        """Send an encoded frame (the stream's events)."""
        await self._send_raw(data)

    async def send_error(self, error: RivetError) -> None:
        """Tell the client about an event it cannot get (the stream's errors)."""
        if isinstance(error, RequestTooLarge | InternalError):
            await self.event_undeliverable(error)
        else:
            await self._send_error(error)

    def _event_frame(self, name: str, seq: int | None, args: bytes) -> bytes:
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

    async def rivet_send(self, message: dict[str, Any]) -> None:
        """Deliver ``conn.send(...)``: to this connection only, no seq."""
        if self.closed:
            return
        try:
            data = self._event_frame(message["name"], None, message["args"])
        except RivetError as error:
            await self.event_undeliverable(error)
            return
        await self._send_raw(data)

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

    # -- sending ------------------------------------------------------------------
    async def _send_error(self, error: RivetError, action_id: Any = None) -> None:
        try:
            data = self.encode_error(error, action_id)
        except (TypeError, ValueError):  # unencodable metadata
            error = copy.copy(error)
            error.metadata = None
            data = self.encode_error(error, action_id)
        await self._send_raw(data)

    async def _send_raw(self, data: bytes) -> None:
        if self.closed:
            return
        message: dict[str, Any] = (
            {"type": "websocket.send", "text": data.decode("utf-8")}
            if self.text_frames()
            else {"type": "websocket.send", "bytes": data}
        )
        assert self.outbound is not None
        try:
            taken = await self.outbound.send(
                message, rivet_settings.SLOW_CONSUMER_TIMEOUT
            )
        except OSError:
            # The client is gone (uvicorn raises ClientDisconnected); the
            # server's websocket.disconnect follows and cleans up.
            self.closed = True
            return
        if not taken:
            # The client does not read: give up on it; it reconnects with
            # since and catches up from the log.
            logger.warning(
                "closing a slow consumer flavour=%s conn_id=%s",
                self.flavour,
                self.conn_id,
            )
            await self._close(CLOSE_SLOW_CONSUMER, "rivet.slow_consumer")

    async def _close_when_answered(self, code: int, reason: str) -> None:
        if self._in_action:
            # Possibly this connection's own action: answer it first.
            self._close_after_action = (code, reason)
            return
        await self._close(code, reason)

    async def _close(self, code: int, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        self.inbound.close()
        assert self.outbound is not None
        # Sent even when the socket is full. Not cancelled: a server whose
        # send waits (uvicorn) ends a socket that does not take its close
        # frame in its own time; if that takes longer than CLOSE_TIMEOUT the
        # connection's cleanup runs without waiting for the server.
        closing = asyncio.ensure_future(self._send_close(code, reason))
        if not (await asyncio.wait({closing}, timeout=CLOSE_TIMEOUT))[0]:
            logger.info("close frame not taken, ending conn_id=%s", self.conn_id)
            self._stopped.set()
        if self.stream is not None:
            await self.stream.close()  # nothing more to send

    async def _send_close(self, code: int, reason: str) -> None:
        assert self.outbound is not None
        with contextlib.suppress(OSError):  # the client is already gone
            await self.outbound.send(
                {"type": "websocket.close", "code": code, "reason": reason},
                None,
                room=False,
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
        if self._save_task is not None:
            await asyncio.gather(self._save_task, return_exceptions=True)
        if self.stream is not None:
            await self.stream.close()
        if self.conn_id is None or self.ref is None:
            return
        await disconnect_cleanup(self.ref, self.conn_id)
        logger.debug("disconnected conn_id=%s", self.conn_id)


def _utf8_size(text: str) -> int:
    # Most frames are ASCII: their size needs no encoded copy.
    return len(text) if text.isascii() else len(text.encode("utf-8"))
