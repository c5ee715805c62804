"""WebSocket connections of the remote client: async, and a sync wrapper.

The sync wrapper runs the async connection on its own event loop.

A connection reconnects by itself after a network failure and resumes its
event stream with ``since``; this is the larger half of the client, kept apart
from the HTTP calls so each stays readable.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import inspect
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from ..encoding import decode_message, decode_trusted, encode, json_dumps
from ..exceptions import RequestTooLarge, RivetError, error_from_dict
from .base import (
    DEFAULT_MAX_FRAME_BYTES,
    FINAL_CLOSE_CODES,
    FRAME_CLOSE_CODE,
    ConnectionLost,
    Handler,
    SocketTarget,
    Status,
)

logger = logging.getLogger("django_rivet.transport")

# Error frames saying events will not come: the app reloads its state.
RESYNC_CODES = frozenset({"actor/events_missed", "actor/event_log_truncated"})


class AsyncConnection:
    """A WebSocket connection to one actor (asyncio)."""

    def __init__(
        self,
        actor: SocketTarget,
        params: Any = None,
        *,
        since: int | None = None,
        subscribe: Iterable[str] | str | None = None,
        reconnect: bool = True,
        initial_delay: float = 0.1,
        max_delay: float = 5.0,
    ) -> None:
        self.actor = actor
        self.params = params
        self.reconnect = reconnect
        self.initial_delay = initial_delay
        self.max_delay = max_delay
        self.actor_id: str | None = None
        self.connection_id: str | None = None
        #: Highest event seq seen; reconnects resume after it.
        self.last_seq: int | None = since
        self.status: Status = "disconnected"
        self.close_code: int | None = None
        #: Recent connection-level errors (e.g. ``actor/event_log_truncated``),
        #: kept even when they arrive before :meth:`on_error` is called.
        self.errors: collections.deque[RivetError] = collections.deque(maxlen=100)
        self._url_subscribe: list[str] = (
            [subscribe] if isinstance(subscribe, str) else list(subscribe or [])
        )
        self._handlers: dict[str, list[Handler]] = {}
        self._error_handlers: list[Handler] = []
        self._resync_handlers: list[Handler] = []
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[str | bytes] | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._init: asyncio.Future[dict[str, Any]] | None = None
        #: The server's frame size limit (from ``init``).
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        # The connection-level error frame that came last on this socket: a
        # close for an unreadable frame (4413) fails pending calls with it.
        self._last_error: RivetError | None = None

    # -- opening ----------------------------------------------------------------
    def _url(self) -> str:
        params: list[tuple[str, str]] = [("encoding", self.actor.client.encoding)]
        if self.last_seq is not None:
            params.append(("since", str(self.last_seq)))
        if self._url_subscribe:
            params.append(("subscribe", ",".join(self._url_subscribe)))
        return self.actor.connect_url(params)

    def _subprotocols(self) -> list[Subprotocol]:
        protocols = [Subprotocol("rivet")]
        if self.params is not None:
            encoded = base64.urlsafe_b64encode(json_dumps(self.params).encode("utf-8"))
            protocols.append(
                Subprotocol("rivet_conn_params." + encoded.decode().rstrip("="))
            )
        return protocols

    async def open(self) -> None:
        """Connect and wait for ``init``; raise the server's error if refused."""
        self.status = "connecting"
        try:
            await self._open_once()
        except BaseException:
            self.status = "disconnected"
            raise

    async def _open_once(self) -> None:
        client = self.actor.client
        ws = await ws_connect(
            self._url(),
            subprotocols=self._subprotocols(),
            origin=client.origin,  # type: ignore[arg-type]
            additional_headers=client.headers,
            max_size=None,
            open_timeout=client.timeout,
        )
        self._ws = ws
        self._init = asyncio.get_running_loop().create_future()
        self._outbox = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(ws, self._outbox))
        self._reader = asyncio.create_task(self._read(ws))
        try:
            init = await asyncio.wait_for(asyncio.shield(self._init), client.timeout)
        except BaseException:
            await ws.close()
            raise
        self.actor_id = init["actor_id"]
        self.connection_id = init["connection_id"]
        if isinstance(init.get("max_frame_bytes"), int):
            self.max_frame_bytes = init["max_frame_bytes"]
        if self.last_seq is None and isinstance(init.get("seq"), int):
            self.last_seq = init["seq"]
        for event in list(self._handlers):
            self._send({"type": "subscribe", "event": event})
        self.status = "connected"
        self._connected.set()

    # -- public API -------------------------------------------------------------
    async def call(self, action: str, *args: Any, timeout: float | None = None) -> Any:
        """Run an action over the socket; actions run in the order sent."""
        limit = self.actor.client.timeout if timeout is None else timeout
        if self.status == "disconnected":
            raise ConnectionLost("The connection is closed", metadata=self.close_code)
        if self.status == "connecting":  # reconnecting: wait for it
            await asyncio.wait_for(self._connected.wait(), limit)
        self._next_id += 1
        action_id = self._next_id
        conversions = self.actor.conversions
        data = self._checked(
            {
                "type": "action",
                "id": action_id,
                "name": action,
                "args": conversions.args(action, args),
            }
        )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[action_id] = future
        try:
            self._send_data(data)
            return conversions.output(action, await asyncio.wait_for(future, limit))
        finally:
            self._pending.pop(action_id, None)

    def on(self, event: str, handler: Handler) -> Callable[[], None]:
        """Call ``handler(*args)`` for each ``event``; returns an unsubscribe."""
        handlers = self._handlers.setdefault(event, [])
        handlers.append(handler)
        if len(handlers) == 1 and self.status == "connected":
            self._send({"type": "subscribe", "event": event})

        def unsubscribe() -> None:
            current = self._handlers.get(event, [])
            if handler in current:
                current.remove(handler)
            if not current and event in self._handlers:
                del self._handlers[event]
                if self.status == "connected":
                    self._send({"type": "unsubscribe", "event": event})

        return unsubscribe

    def on_error(self, handler: Callable[[RivetError], Any]) -> Callable[[], None]:
        """Call ``handler(error)`` for connection-level error frames."""
        self._error_handlers.append(handler)
        return lambda: self._error_handlers.remove(handler)

    def on_resync(self, handler: Callable[[RivetError], Any]) -> Callable[[], None]:
        """Call ``handler(error)`` when events were lost for good.

        That is ``actor/events_missed`` (the connection fell behind the event
        log) or ``actor/event_log_truncated`` (a reconnect's ``since`` is
        older than the log): reload the state derived from events. The
        error's metadata says which seqs will not come (``since`` <
        seq < ``oldest``). The error also reaches :meth:`on_error` handlers.
        """
        self._resync_handlers.append(handler)
        return lambda: self._resync_handlers.remove(handler)

    async def close(self) -> None:
        """Close the connection; no reconnect follows."""
        self._closing = True
        ws = self._ws
        if ws is not None:
            await ws.close()
        for task in (self._reader, self._writer):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.status = "disconnected"

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals --------------------------------------------------------------
    def _checked(self, frame: dict[str, Any]) -> bytes:
        """Encode an action frame, refusing what the server would refuse.

        Raised here, at once, the error names the call; a frame the server
        cannot read would only fail it when the server closes the socket.
        """
        encoding = self.actor.client.encoding
        data = encode(frame, encoding)
        if len(data) > self.max_frame_bytes:
            raise RequestTooLarge(
                f"The frame is {len(data)} bytes; the limit is {self.max_frame_bytes}",
                metadata={"size": len(data), "limit": self.max_frame_bytes},
            )
        _, problem = decode_message(data, encoding)
        if problem is not None:
            raise problem
        return data

    def _send(self, frame: dict[str, Any]) -> None:
        """Encode and queue a frame."""
        self._send_data(encode(frame, self.actor.client.encoding))

    def _send_data(self, data: bytes) -> None:
        """Queue a frame; one writer per socket keeps the order of the calls."""
        outbox = self._outbox
        if self._ws is None or outbox is None:
            raise ConnectionLost("The connection is closed")
        outbox.put_nowait(
            data.decode("utf-8") if self.actor.client.encoding == "json" else data
        )

    @staticmethod
    async def _write(ws: ClientConnection, outbox: asyncio.Queue[str | bytes]) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(await outbox.get())

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                frame = decode_trusted(message, self.actor.client.encoding)
                if isinstance(frame, dict):
                    self._dispatch(frame)
        except ConnectionClosed:
            pass
        except Exception:
            logger.exception("rivet client: reading the socket failed")
        finally:
            self.close_code = ws.close_code
            self._on_closed(ws.close_code)

    def _dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "init":
            if self._init is not None and not self._init.done():
                self._init.set_result(frame)
        elif kind == "action_response":
            future = self._pending.get(frame.get("id"))  # type: ignore[arg-type]
            if future is not None and not future.done():
                future.set_result(frame.get("output"))
        elif kind == "event":
            seq = frame.get("seq")
            if isinstance(seq, int):
                self.last_seq = max(self.last_seq or 0, seq)
            for handler in list(self._handlers.get(frame.get("name", ""), [])):
                self._run_handler(handler, *frame.get("args", []))
        elif kind == "error":
            error = error_from_dict(frame)
            if "action_id" in frame:
                future = self._pending.get(frame["action_id"])
                if future is not None and not future.done():
                    future.set_exception(error)
            elif self._init is not None and not self._init.done():
                self._init.set_exception(error)
            else:
                self._last_error = error
                self.errors.append(error)
                if not self._error_handlers:
                    logger.info("rivet connection error: %r", error)
                for handler in list(self._error_handlers):
                    self._run_handler(handler, error)
                if error.qualified_code in RESYNC_CODES:
                    for handler in list(self._resync_handlers):
                        self._run_handler(handler, error)

    def _run_handler(self, handler: Handler, *args: Any) -> None:
        try:
            result = handler(*args)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                task.add_done_callback(_ignore_result)
        except Exception:
            logger.exception("rivet client: event handler failed")

    def _on_closed(self, code: int | None) -> None:
        self._connected.clear()
        if self._init is not None and not self._init.done():
            self._init.set_exception(
                ConnectionLost(f"Closed before init (code {code})")
            )
        cause = self._last_error if code == FRAME_CLOSE_CODE else None
        self._last_error = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(cause or ConnectionLost(f"Closed (code {code})"))
        self._pending.clear()
        self._ws = None
        self._outbox = None
        if self._writer is not None:
            self._writer.cancel()
        if self._closing or not self.reconnect or code in FINAL_CLOSE_CODES:
            self.status = "disconnected"
            return
        if self.status == "connected":
            self.status = "connecting"
            task = asyncio.get_running_loop().create_task(self._reconnect())
            task.add_done_callback(_ignore_result)

    async def _reconnect(self) -> None:
        delay = self.initial_delay
        while not self._closing:
            await asyncio.sleep(delay * (0.5 + random.random()))
            if self._closing:
                return
            try:
                await self._open_once()
                return
            except RivetError as exc:
                if exc.group != "client":  # the server refused: stop
                    logger.warning("rivet reconnect refused: %r", exc)
                    self.status = "disconnected"
                    return
            except Exception as exc:
                logger.debug("rivet reconnect failed: %r", exc)
            delay = min(delay * 2, self.max_delay)


def _ignore_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("rivet client background task failed: %r", task.exception())


class Connection:
    """Sync wrapper of :class:`AsyncConnection`, running its own event loop.

    Handlers run in the connection's thread; keep them short.
    """

    def __init__(self, actor: SocketTarget, params: Any = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rivet-client", daemon=True
        )
        self._thread.start()
        try:
            self._conn: AsyncConnection = self._run(self._open(actor, params, options))
        except BaseException:
            self._stop()
            raise

    @staticmethod
    async def _open(
        actor: SocketTarget, params: Any, options: dict[str, Any]
    ) -> AsyncConnection:
        conn = AsyncConnection(actor, params, **options)
        await conn.open()
        return conn

    def _run(self, awaitable: Awaitable[Any]) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(
            awaitable,  # type: ignore[arg-type]
            self._loop,
        )
        return future.result()

    @property
    def status(self) -> Status:
        """``connecting``, ``connected`` or ``disconnected``."""
        return self._conn.status

    @property
    def actor_id(self) -> str | None:
        """The actor's id, from ``init``."""
        return self._conn.actor_id

    @property
    def connection_id(self) -> str | None:
        """This connection's id, from ``init``."""
        return self._conn.connection_id

    @property
    def last_seq(self) -> int | None:
        """Highest event seq seen."""
        return self._conn.last_seq

    def call(self, action: str, *args: Any, timeout: float | None = None) -> Any:
        """Run an action over the socket and return its output."""
        return self._run(self._conn.call(action, *args, timeout=timeout))

    def on(self, event: str, handler: Handler) -> Callable[[], None]:
        """Call ``handler(*args)`` (in the connection thread) for each event."""

        async def subscribe() -> Callable[[], None]:
            return self._conn.on(event, handler)

        unsubscribe = self._run(subscribe())

        def sync_unsubscribe() -> None:
            self._loop.call_soon_threadsafe(unsubscribe)

        return sync_unsubscribe

    def on_error(self, handler: Callable[[RivetError], Any]) -> Callable[[], None]:
        """Call ``handler(error)`` for connection-level error frames."""
        remove = self._conn.on_error(handler)

        def sync_remove() -> None:
            self._loop.call_soon_threadsafe(remove)

        return sync_remove

    def on_resync(self, handler: Callable[[RivetError], Any]) -> Callable[[], None]:
        """Call ``handler(error)`` (connection thread) when events were lost."""
        remove = self._conn.on_resync(handler)

        def sync_remove() -> None:
            self._loop.call_soon_threadsafe(remove)

        return sync_remove

    def close(self) -> None:
        """Close the connection and stop its thread."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._conn.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
