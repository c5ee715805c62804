"""The WebSocket transport (SPEC 4.2): one consumer per connection to an actor.

The consumer decodes frames, runs everything actor-related through the
runtime (:func:`~django_rivet.actors.spine.ainvoke`) and encodes replies; it
holds no actor logic. What it adds is delivery:

* **Actions in order.** Frames are queued to one worker task per connection,
  so a connection's actions run in the order sent while events keep flowing.
* **Events exactly once, in order, or a coded notice.** Every event carries
  the per-actor ``seq``; a :class:`~django_rivet.transport.delivery.Stream`
  sends the connection what follows its cursor, from the process's shared
  feed of the actor or from the event log, and sends
  ``actor/events_missed`` when the log no longer has it. Replays for
  ``since`` read the log too.
* **Answers before closes.** A close the server asks for while an action
  runs (``ctx.destroy()``, ``conn.disconnect()``) waits for that action's
  answer, so the caller learns the outcome of the action that closed it.
* **Cleanup on every exit path.** A channel-layer hiccup (a read timeout, a
  Redis restart) is retried instead of ending the consumer, and however the
  consumer ends, the connection's row is removed and ``on_disconnect`` runs.

The consumer class is one piece on purpose (about 600 lines): the ordering
and delivery rules above share its per-connection state and queues.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer

from ..actors import registry
from ..actors.errors import public_error
from ..actors.invocation import Origin
from ..actors.rows import ActorRef
from ..actors.spine import ainvoke
from ..conf import rivet_settings
from ..encoding import Encoding, adecode_message, cbor_loads, encode, json_dumps
from ..events import LoggedEvent
from ..exceptions import (
    ConnectionExpired,
    EventLogTruncated,
    Forbidden,
    InternalError,
    InvalidArgs,
    MalformedRequest,
    RequestTooLarge,
    RivetError,
)
from ..models import Connection
from .connections import (
    ConnAction,
    Connect,
    ConnectResult,
    Subscribe,
    disconnect_cleanup,
    heartbeat,
)
from .delivery import Pressure, Stream
from .origins import origin_allowed
from .parsing import (
    MAX_SUBSCRIPTIONS,
    SUBPROTOCOL,
    ConnectRequest,
    event_name,
    parse_connect_request,
    scope_headers,
)
from .sockets import SocketConsumer

logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "CLOSE_BAD_REQUEST",
    "CLOSE_EXPIRED",
    "CLOSE_FORBIDDEN",
    "CLOSE_INTERNAL",
    "CLOSE_NORMAL",
    "CLOSE_TOO_LARGE",
    "CLOSE_TOO_MANY_CONNECTIONS",
    "RivetConsumer",
    "close_code_for",
]

# Actions waiting behind the running one; beyond this the consumer stops
# reading frames (TCP backpressure) instead of buffering without bound.
MAX_PENDING_ACTIONS = 64

# Close codes (docs/protocol.md): 1000, or 4000 + the HTTP status of the
# error. daphne's WebSocket stack refuses to send anything but 1000 and
# 3000-4999, so the standard 1009 (too big) and 1011 (internal error) are
# 4413 and 4500 here.
CLOSE_NORMAL = 1000
CLOSE_BAD_REQUEST = 4400
CLOSE_FORBIDDEN = 4403
CLOSE_EXPIRED = 4410
CLOSE_TOO_LARGE = 4413
CLOSE_TOO_MANY_CONNECTIONS = 4429
CLOSE_INTERNAL = 4500
CLOSE_UNAVAILABLE = 4503
# The client did not read for SLOW_CONSUMER_TIMEOUT; it reconnects with since.
CLOSE_SLOW_CONSUMER = 4408


def close_code_for(error: RivetError, refused: bool) -> int:
    """Map a failed connect to its close code (4403 auth, 4400 request...)."""
    # 403: a refusal, also when on_auth raised a UserError (it keeps its code).
    if refused or isinstance(error, Forbidden) or error.http_status == 403:
        return CLOSE_FORBIDDEN
    if error.http_status == 503:  # actor/unavailable, actor/busy: retry later
        return CLOSE_UNAVAILABLE
    if error.http_status >= 500:
        return CLOSE_INTERNAL
    if error.http_status == 429:
        return CLOSE_TOO_MANY_CONNECTIONS
    return CLOSE_BAD_REQUEST


# -- the consumer -----------------------------------------------------------------
class RivetConsumer(SocketConsumer):
    """One WebSocket connection to one actor (SPEC 4.2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request: ConnectRequest | None = None
        self.encoding: Encoding = "json"
        self.actor_id: uuid.UUID | None = None
        self.conn_id: uuid.UUID | None = None
        self.origin: Origin | None = None
        self.subscriptions: set[str] = set()
        self.wildcard = False
        self.since: int | None = None
        self.replayed: set[str] = set()
        self.closed = False
        self._actions: asyncio.Queue[tuple[Any, str, Any] | None] = asyncio.Queue(
            MAX_PENDING_ACTIONS
        )
        self._worker: asyncio.Task[None] | None = None
        self._save_task: asyncio.Task[None] | None = None
        self._subscriptions_dirty = False
        # While an action runs, a close the server asked for (ctx.destroy(),
        # conn.disconnect()) waits for its response, so the caller learns
        # the outcome of the action that closed its own socket.
        self._in_action = False
        self._close_after_action: int | None = None
        # Delivery (docs/protocol.md, "Delivery guarantee").
        self.stream: Stream | None = None
        self.pressure: Pressure | None = None
        self._cleanup: asyncio.Task[None] | None = None

    async def close_internal(self) -> None:
        """Close after an unexpected error (4500)."""
        await self._close(CLOSE_INTERNAL)

    # -- connect ------------------------------------------------------------------
    async def websocket_connect(self, message: dict[str, Any]) -> None:
        """Validate, admit through the runtime, then send ``init``."""
        connect: Connect | None = None
        try:
            request = self.request = parse_connect_request(self.scope)
            self.encoding = request.encoding
            headers = scope_headers(self.scope)
            origin_header = headers.get("origin")
            if not origin_allowed(origin_header, self.scope):
                raise Forbidden(
                    "Origin not allowed", metadata={"origin": origin_header}
                )
            subscriptions = sorted(set(request.subscriptions))
            self.origin = Origin(
                transport="websocket",
                user=self.scope.get("user"),
                headers=headers,
                request=self.scope,
                params=request.params,
            )
            connect = Connect(
                params=request.params,
                channel_name=self.channel_name,
                encoding=request.encoding,
                subscriptions=subscriptions + (["*"] if request.wildcard else []),
                since=request.since,
            )
            result: ConnectResult = await ainvoke(request.ref(), connect, self.origin)
        except Exception as exc:
            await self._refuse(exc, connect is not None and connect.refused)
            return
        await self.accept(subprotocol=SUBPROTOCOL if request.offered_rivet else None)
        self.actor_id, self.conn_id = result.actor_id, result.conn_id
        self.origin = Origin(
            transport="websocket",
            user=self.origin.user,
            headers=self.origin.headers,
            request=self.scope,
            params=request.params,
            conn_id=result.conn_id,
        )
        self.since = request.since
        self.wildcard = request.wildcard and "*" not in result.refused
        self.subscriptions = set(subscriptions) - set(result.refused)
        heartbeat.add(result.conn_id, result.actor_id, self._row_gone)
        # The stream joins the process's feed of the actor now, so nothing
        # committed after the admission (result.head) can slip past it.
        self.stream = Stream(result.actor_id, result.head, self)
        logger.debug(
            "connected actor_id=%s conn_id=%s", result.actor_id, result.conn_id
        )
        await self._send_frame(
            {
                "type": "init",
                "actor_id": str(result.actor_id),
                "connection_id": str(result.conn_id),
                # Extensions: the last seq before this connection, so a client
                # that sees no event still knows where to resume from; the
                # frame size limit, so a client refuses oversized calls itself.
                "seq": result.head,
                "max_frame_bytes": int(rivet_settings.MAX_INCOMING_MESSAGE_BYTES),
            }
        )
        for refusal in result.refused.values():
            await self._send_error(refusal)
        if result.truncated:
            await self._send_error(
                _truncated(request.since, result.oldest, result.head)
            )
        if self.since is not None and (self.wildcard or self.subscriptions):
            names = None if self.wildcard else sorted(self.subscriptions)
            self.replayed.update(self.subscriptions)
            await self.stream.replay(self.since, names)
        self.stream.start()
        self._worker = asyncio.create_task(self._action_loop())

    async def _refuse(self, exc: BaseException, refused: bool) -> None:
        error = public_error(exc)
        code = close_code_for(error, refused)
        logger.info(
            "connection refused code=%s error=%s path=%r",
            code,
            error.qualified_code,
            self.scope.get("path"),
        )
        request = self.request
        await self.accept(
            subprotocol=SUBPROTOCOL if request and request.offered_rivet else None
        )
        await self._send_error(error)
        await self._close(code)

    # -- frames from the client -----------------------------------------------------
    async def websocket_receive(self, message: dict[str, Any]) -> None:
        """Check the size, decode, and route one client frame.

        An error caused by a frame answers the action when its id can be read
        (the connection stays open); a frame over the size limit is not read
        at all, so it gets an error frame and the close code 4413, which
        tells the client to fail its pending calls at once.
        """
        if self.conn_id is None or self.closed:
            return
        data = message.get("bytes")
        if data is None:
            data = message.get("text") or ""
        limit = int(rivet_settings.MAX_INCOMING_MESSAGE_BYTES)
        size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8"))
        if size > limit:
            await self._refuse_frame(
                RequestTooLarge(
                    f"The frame is {size} bytes; the limit is {limit}",
                    metadata={"size": size, "limit": limit},
                )
            )
            return
        try:
            frame, problem = await adecode_message(data, self.encoding)
            if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
                raise problem or MalformedRequest(
                    "A frame is a map with a string 'type'"
                )
            kind = frame["type"]
            if kind == "action":
                await self._receive_action(frame, problem)
            elif problem is not None:
                raise problem
            elif kind == "subscribe":
                await self._subscribe(event_name(frame.get("event")))
            elif kind == "unsubscribe":
                self._unsubscribe(event_name(frame.get("event")))
            else:
                raise MalformedRequest(
                    f"Unknown message type {kind[:64]!r}", metadata={"type": kind[:64]}
                )
        except RivetError as exc:
            await self._send_error(exc)
        except Exception as exc:  # a bug here must not kill the connection
            await self._send_error(public_error(exc))

    async def _refuse_frame(self, error: RivetError) -> None:
        """Answer an unreadable frame with ``error``, then close (4413)."""
        await self._send_error(error)
        if self._in_action:
            # The running action's answer still goes out first.
            self._close_after_action = CLOSE_TOO_LARGE
            return
        await self._close(CLOSE_TOO_LARGE)

    async def _receive_action(
        self, frame: dict[str, Any], problem: MalformedRequest | None
    ) -> None:
        action_id = frame.get("id")
        if isinstance(action_id, bool) or not isinstance(action_id, int):
            raise problem or MalformedRequest("An action frame needs an integer 'id'")
        if problem is not None:
            await self._send_error(problem, action_id)
            return
        name = frame.get("name")
        args = frame.get("args", [])
        if not isinstance(name, str) or not name:
            await self._send_error(
                MalformedRequest("An action frame needs a string 'name'"), action_id
            )
            return
        if not isinstance(args, list):
            await self._send_error(InvalidArgs("args must be a list"), action_id)
            return
        await self._actions.put((action_id, name, args))

    async def _action_loop(self) -> None:
        while True:
            item = await self._actions.get()
            if item is None:
                return
            if self.closed:
                continue  # the server closed the socket: drop what is queued
            self._in_action = True
            try:
                await self._run_action(*item)
            finally:
                self._in_action = False
            if self._close_after_action is not None:
                await self._close(self._close_after_action)

    async def _run_action(self, action_id: int, name: str, args: Any) -> None:
        assert self.request is not None
        try:
            output = await ainvoke(
                ActorRef(name=self.request.name, actor_id=self.actor_id),
                ConnAction(name, args),
                self.origin or Origin(transport="websocket"),
            )
        except Exception as exc:
            await self._send_error(public_error(exc), action_id)
            if isinstance(exc, ConnectionExpired):
                await self._close(CLOSE_EXPIRED)  # the client reconnects
            return
        await self._send_frame(
            {"type": "action_response", "id": action_id, "output": output},
            action_id=action_id,
        )

    # -- subscriptions ------------------------------------------------------------
    async def _subscribe(self, event: str) -> None:
        if event in self.subscriptions:
            return
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise MalformedRequest(f"At most {MAX_SUBSCRIPTIONS} subscriptions")
        assert self.request is not None
        if registry.get(self.request.name).overrides("can_subscribe"):
            refusal = await ainvoke(
                ActorRef(name=self.request.name, actor_id=self.actor_id),
                Subscribe(event),
                self.origin or Origin(transport="websocket"),
            )
            if refusal is not None:
                raise refusal
        assert self.stream is not None
        async with self.stream.lock:  # live delivery waits: a stable cursor
            if (
                self.since is not None
                and not self.wildcard
                and event not in self.replayed
            ):
                # Missed events of this name, up to where live delivery stands.
                self.replayed.add(event)
                await self.stream.replay(self.since, [event])
            self.subscriptions.add(event)
        self._save_subscriptions()

    def _unsubscribe(self, event: str) -> None:
        if event in self.subscriptions:
            self.subscriptions.discard(event)
            self._save_subscriptions()

    def _save_subscriptions(self) -> None:
        # Bursts of subscribe frames (a client resubscribing after a
        # reconnect) collapse into one UPDATE.
        self._subscriptions_dirty = True
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.create_task(self._write_subscriptions())

    async def _write_subscriptions(self) -> None:
        while self._subscriptions_dirty and not self.closed:
            self._subscriptions_dirty = False
            names = sorted(self.subscriptions) + (["*"] if self.wildcard else [])
            assert self.conn_id is not None
            try:
                await database_sync_to_async(_update_subscriptions)(self.conn_id, names)
            except Exception:
                logger.exception("saving subscriptions failed conn_id=%s", self.conn_id)

    def _wants(self, name: str) -> bool:
        return self.wildcard or name in self.subscriptions

    # -- events -------------------------------------------------------------------
    # The EventSink side of self.stream (transport/delivery.py).
    @property
    def frame_key(self) -> str:
        """Cache key of this connection's encoded event frames."""
        return f"rivet.{self.encoding}"

    def wants_event(self, name: str) -> bool:
        """Whether this connection is subscribed to ``name``."""
        return self._wants(name)

    def event_names(self) -> list[str] | None:
        """The subscribed names, for log queries (``None``: all)."""
        return None if self.wildcard else sorted(self.subscriptions)

    def encode_event(self, event: LoggedEvent) -> bytes:
        """Encode a broadcast's frame; an oversized one becomes an error."""
        return self._event_frame(event.name, event.seq, event.args)

    async def send_data(self, data: bytes) -> None:
        """Send an encoded frame (the stream's events)."""
        await self._send_raw(data)

    async def send_error(self, error: RivetError) -> None:
        """Send a connection-level error frame."""
        await self._send_error(error)

    def _event_frame(self, name: str, seq: int | None, args: bytes) -> bytes:
        try:
            frame: dict[str, Any] = {
                "type": "event",
                "name": name,
                "args": cbor_loads(bytes(args)),
            }
            if seq is not None:
                frame["seq"] = seq
            data = encode(frame, self.encoding)
        except Exception as exc:
            logger.exception("undeliverable event name=%r seq=%s", name, seq)
            raise InternalError(
                "An event could not be encoded", metadata={"event": name, "seq": seq}
            ) from exc
        limit = int(rivet_settings.MAX_OUTGOING_MESSAGE_BYTES)
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
            await self._send_error(error)
            return
        await self._send_raw(data)

    async def rivet_disconnect(self, message: dict[str, Any]) -> None:
        """Close the socket on ``conn.disconnect()`` or actor destruction."""
        logger.debug(
            "server closes conn_id=%s reason=%s", self.conn_id, message.get("reason")
        )
        if self._in_action:
            # Possibly this connection's own action: answer it first.
            self._close_after_action = CLOSE_NORMAL
            return
        await self._close(CLOSE_NORMAL)

    def _row_gone(self) -> None:
        # The heartbeat found this connection's row deleted (swept, or the
        # actor destroyed) and the message saying so was lost: close.
        asyncio.get_running_loop().create_task(
            self.rivet_disconnect({"reason": "gone"})
        )

    # -- sending ------------------------------------------------------------------
    async def _send_frame(self, frame: dict[str, Any], action_id: Any = None) -> None:
        """Encode and send a frame; oversized or unencodable -> error frame."""
        try:
            data = (
                json_dumps(frame).encode("utf-8")
                if self.encoding == "json"
                else encode(frame, "cbor")
            )
        except (TypeError, ValueError) as exc:
            await self._send_error(public_error(exc), action_id)
            return
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

    async def _send_error(self, error: RivetError, action_id: Any = None) -> None:
        frame: dict[str, Any] = {"type": "error", **error.to_dict()}
        if action_id is not None:
            frame["action_id"] = action_id
        try:
            data = encode(frame, self.encoding)
        except (TypeError, ValueError):  # unencodable metadata
            frame["metadata"] = None
            data = encode(frame, self.encoding)
        await self._send_raw(data)

    async def _send_raw(self, data: bytes) -> None:
        if self.closed:
            return
        pressure = self.pressure
        if pressure is not None and pressure.paused:
            # The client does not read: wait (everything waits, so this also
            # stops reading its frames), and give up on it after a while.
            if not await pressure.wait(float(rivet_settings.SLOW_CONSUMER_TIMEOUT)):
                logger.warning("closing a slow consumer conn_id=%s", self.conn_id)
                await self._close(CLOSE_SLOW_CONSUMER)
                return
            if self.closed:
                return
        if self.encoding == "cbor":
            await self.send(bytes_data=data)
        else:
            await self.send(text_data=data.decode("utf-8"))

    async def _close(self, code: int) -> None:
        if not self.closed:
            self.closed = True
            await self.close(code=code)

    # -- disconnect ---------------------------------------------------------------
    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        """Drop queued actions, finish the running one, run ``on_disconnect``."""
        self.closed = True
        try:
            await self._run_cleanup()
        finally:
            raise StopConsumer()

    async def _run_cleanup(self) -> None:
        # Once, in a task of its own: if daphne cancels this consumer (it does
        # 10 s after the socket closed), the row is still removed.
        if self._cleanup is None:
            self._cleanup = asyncio.get_running_loop().create_task(self._shutdown())
        try:
            await asyncio.shield(self._cleanup)
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - _shutdown logs its own failures
            logger.exception("cleanup failed conn_id=%s", self.conn_id)

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
        assert self.request is not None
        await disconnect_cleanup(
            ActorRef(name=self.request.name, actor_id=self.actor_id), self.conn_id
        )
        logger.debug("disconnected conn_id=%s", self.conn_id)


def _update_subscriptions(conn_id: uuid.UUID, names: list[str]) -> None:
    Connection.objects.filter(pk=conn_id).update(subscriptions=names)


def _truncated(since: int | None, oldest: int | None, head: int) -> RivetError:
    return EventLogTruncated(
        "The event log no longer reaches back to the requested seq; refetch the state",
        metadata={"since": since, "oldest": oldest, "latest": head},
    )
