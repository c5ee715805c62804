"""Remote Python client for django-rivet (SPEC 4.4): HTTP and WebSocket.

Needs the ``client`` extra (``httpx``, ``websockets``); imports nothing from
Django, so scripts and other services can use it without settings::

    from django_rivet.client import Client

    client = Client("http://localhost:8000/rivet")
    room = client.actor("chatRoom", ["acme", "general"])
    room.call("send_message", "bob", "hi")             # HTTP, sync
    await room.acall("send_message", "bob", "hi")      # HTTP, async

    conn = await room.connect({"name": "bob"})         # WebSocket, async
    unsubscribe = conn.on("newMessage", print)
    await conn.call("send_message", "hi")
    await conn.close()

    with room.connect_sync({"name": "bob"}) as conn:   # WebSocket, sync
        conn.call("send_message", "hi")

Errors are raised as :class:`~django_rivet.RivetError` subclasses rebuilt
from the wire (``ActorNotFound``, ``UserError``...). A WebSocket connection
reconnects by itself after a network failure, resuming its event stream with
``since`` so no event is missed or repeated; calls in flight when the socket
dropped fail with :class:`ConnectionLost`.
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
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from .encoding import Encoding, decode, encode, json_dumps
from .exceptions import RivetError, error_from_dict

logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "ActorClient",
    "AsyncConnection",
    "Client",
    "Connection",
    "ConnectionLost",
    "HTTPError",
]

MEDIA_TYPES: dict[str, str] = {"json": "application/json", "cbor": "application/cbor"}
# Close codes after which reconnecting cannot help.
FINAL_CLOSE_CODES = frozenset({1000, 4400, 4403})
Status = Literal["connecting", "connected", "disconnected"]
Handler = Callable[..., Any]


class ConnectionLost(RivetError):
    """The socket closed before the call's answer arrived (it may have run)."""

    group = "client"
    code = "connection_lost"
    default_message = "The connection was lost before the answer arrived"


class HTTPError(RivetError):
    """The server answered with an error that is not a rivet error body."""

    group = "client"
    code = "http_error"


def _key_list(key: Any) -> list[str]:
    if key is None:
        return []
    if isinstance(key, str):
        return [key]
    return list(key)


class Client:
    """Talk to a django-rivet server at ``base_url`` (the mount prefix)."""

    def __init__(
        self,
        base_url: str,
        *,
        encoding: Encoding = "json",
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        origin: str | None = None,
        http: httpx.Client | None = None,
        ahttp: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the client; ``http``/``ahttp`` replace the httpx clients."""
        self.base_url = base_url.rstrip("/")
        self.encoding: Encoding = encoding
        self.headers = dict(headers or {})
        self.timeout = timeout
        parts = urlsplit(self.base_url)
        # Browsers always send Origin; sending the server's own origin keeps
        # this client within the default ALLOWED_HOSTS rule.
        self.origin = origin or f"{parts.scheme}://{parts.netloc}"
        self._http: httpx.Client | None = http
        self._ahttp: httpx.AsyncClient | None = ahttp

    def actor(
        self,
        name: str,
        key: Any = None,
        *,
        actor_id: str | None = None,
        create: bool = True,
    ) -> ActorClient:
        """Address an actor by name and key (or ``actor_id``)."""
        return ActorClient(self, name, _key_list(key), actor_id=actor_id, create=create)

    # -- HTTP plumbing --------------------------------------------------------------
    @property
    def http(self) -> httpx.Client:
        """The shared sync ``httpx.Client`` (created on first use)."""
        if self._http is None:
            self._http = httpx.Client(headers=self.headers, timeout=self.timeout)
        return self._http

    @property
    def ahttp(self) -> httpx.AsyncClient:
        """The shared ``httpx.AsyncClient`` (created on first use)."""
        if self._ahttp is None:
            self._ahttp = httpx.AsyncClient(headers=self.headers, timeout=self.timeout)
        return self._ahttp

    def _body(self, body: Any) -> tuple[bytes, dict[str, str]]:
        return encode(body, self.encoding), {
            "Content-Type": MEDIA_TYPES[self.encoding],
            "Accept": MEDIA_TYPES[self.encoding],
        }

    def _result(self, response: httpx.Response) -> Any:
        content_type = response.headers.get("content-type", "").split(";")[0]
        value: Any = None
        if content_type in ("application/json", "application/cbor") and (
            response.content
        ):
            value = decode(
                response.content, "cbor" if content_type.endswith("cbor") else "json"
            )
        if response.status_code >= 400:
            if isinstance(value, dict) and "group" in value and "code" in value:
                raise error_from_dict(value)
            raise HTTPError(
                f"HTTP {response.status_code} from {response.request.url}",
                metadata={"status": response.status_code},
            )
        return value

    def request_json(
        self, method: str, path: str, params: list[tuple[str, str]], body: Any = None
    ) -> Any:
        """Send one API request and return the decoded answer."""
        content, headers = self._body(body) if body is not None else (None, {})
        response = self.http.request(
            method,
            self.base_url + path,
            params=tuple(params),
            content=content,
            headers=headers or {"Accept": MEDIA_TYPES[self.encoding]},
        )
        return self._result(response)

    async def arequest_json(
        self, method: str, path: str, params: list[tuple[str, str]], body: Any = None
    ) -> Any:
        """Async :meth:`request_json`."""
        content, headers = self._body(body) if body is not None else (None, {})
        response = await self.ahttp.request(
            method,
            self.base_url + path,
            params=tuple(params),
            content=content,
            headers=headers or {"Accept": MEDIA_TYPES[self.encoding]},
        )
        return self._result(response)

    def websocket_url(self, path: str, params: list[tuple[str, str]]) -> str:
        """Return the ``ws://`` / ``wss://`` URL of ``path``."""
        parts = urlsplit(self.base_url + path)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        return urlunsplit((scheme, parts.netloc, parts.path, urlencode(params), ""))

    def close(self) -> None:
        """Close the sync HTTP client."""
        if self._http is not None:
            self._http.close()
            self._http = None

    async def aclose(self) -> None:
        """Close both HTTP clients."""
        self.close()
        if self._ahttp is not None:
            await self._ahttp.aclose()
            self._ahttp = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class ActorClient:
    """One actor on the server: HTTP calls and WebSocket connections."""

    def __init__(
        self,
        client: Client,
        name: str,
        key: list[str],
        *,
        actor_id: str | None = None,
        create: bool = True,
    ) -> None:
        self.client = client
        self.name = name
        self.key = key
        self.actor_id = actor_id
        self.create_missing = create

    def _params(self, create: bool | None = None) -> list[tuple[str, str]]:
        if self.actor_id is not None:
            return [("actor_id", self.actor_id)]
        params = [("key", part) for part in self.key]
        if create is False:
            params.append(("create", "false"))
        return params

    @property
    def _path(self) -> str:
        return f"/actors/{self.name}"

    # -- actions --------------------------------------------------------------------
    def call(self, action: str, *args: Any) -> Any:
        """Run an action over HTTP and return its output."""
        result = self.client.request_json(
            "POST",
            f"{self._path}/actions/{action}",
            self._params(self.create_missing),
            {"args": list(args)},
        )
        return result["output"]

    async def acall(self, action: str, *args: Any) -> Any:
        """Async :meth:`call`."""
        result = await self.client.arequest_json(
            "POST",
            f"{self._path}/actions/{action}",
            self._params(self.create_missing),
            {"args": list(args)},
        )
        return result["output"]

    # -- lifecycle ------------------------------------------------------------------
    def get_or_create(self, input: Any = None) -> dict[str, Any]:
        """Create the actor if needed: ``{actor_id, created}``."""
        return self.client.request_json(  # type: ignore[no-any-return]
            "PUT", self._path, self._params(), {"input": input}
        )

    async def aget_or_create(self, input: Any = None) -> dict[str, Any]:
        """Async :meth:`get_or_create`."""
        return await self.client.arequest_json(  # type: ignore[no-any-return]
            "PUT", self._path, self._params(), {"input": input}
        )

    def create(self, input: Any = None) -> str:
        """Create the actor (``actor/already_exists`` if it exists); its id."""
        result = self.client.request_json(
            "POST", self._path, self._params(), {"input": input}
        )
        return str(result["actor_id"])

    async def acreate(self, input: Any = None) -> str:
        """Async :meth:`create`."""
        result = await self.client.arequest_json(
            "POST", self._path, self._params(), {"input": input}
        )
        return str(result["actor_id"])

    def get(self) -> dict[str, Any]:
        """Describe the actor: ``{actor_id, name, key, created_at}``."""
        return self.client.request_json(  # type: ignore[no-any-return]
            "GET", self._path, self._params()
        )

    async def aget(self) -> dict[str, Any]:
        """Async :meth:`get`."""
        return await self.client.arequest_json(  # type: ignore[no-any-return]
            "GET", self._path, self._params()
        )

    def send(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send a message to the actor's queue: ``{status, response?}``."""
        return self.client.request_json(  # type: ignore[no-any-return]
            "POST",
            f"{self._path}/queue/{queue}",
            self._params(),
            {"body": body, "wait": wait, "timeout": timeout},
        )

    async def asend(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Async :meth:`send`."""
        return await self.client.arequest_json(  # type: ignore[no-any-return]
            "POST",
            f"{self._path}/queue/{queue}",
            self._params(),
            {"body": body, "wait": wait, "timeout": timeout},
        )

    def request(self, method: str, path: str = "", **kwargs: Any) -> httpx.Response:
        """Send a raw HTTP request to the actor's ``on_request``."""
        return self.client.http.request(
            method,
            f"{self.client.base_url}{self._path}/request/{path.lstrip('/')}",
            params=tuple(self._params(self.create_missing)),
            **kwargs,
        )

    async def arequest(
        self, method: str, path: str = "", **kwargs: Any
    ) -> httpx.Response:
        """Async :meth:`request`."""
        return await self.client.ahttp.request(
            method,
            f"{self.client.base_url}{self._path}/request/{path.lstrip('/')}",
            params=tuple(self._params(self.create_missing)),
            **kwargs,
        )

    # -- WebSocket ------------------------------------------------------------------
    async def connect(
        self,
        params: Any = None,
        *,
        since: int | None = None,
        subscribe: Iterable[str] | str | None = None,
        reconnect: bool = True,
    ) -> AsyncConnection:
        """Open a WebSocket connection; returns once ``init`` arrived.

        ``since`` replays events after that seq; ``subscribe="*"`` asks for
        every event without subscribing one by one.
        """
        conn = AsyncConnection(
            self, params, since=since, subscribe=subscribe, reconnect=reconnect
        )
        await conn.open()
        return conn

    def connect_sync(
        self,
        params: Any = None,
        *,
        since: int | None = None,
        subscribe: Iterable[str] | str | None = None,
        reconnect: bool = True,
    ) -> Connection:
        """Sync :meth:`connect`: handlers run in the connection's own thread."""
        return Connection(
            self, params, since=since, subscribe=subscribe, reconnect=reconnect
        )

    def __repr__(self) -> str:
        return f"<ActorClient {self.name}{self.key}>"


class AsyncConnection:
    """A WebSocket connection to one actor (asyncio)."""

    def __init__(
        self,
        actor: ActorClient,
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
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[str | bytes] | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._init: asyncio.Future[dict[str, Any]] | None = None

    # -- opening ----------------------------------------------------------------
    def _url(self) -> str:
        params = self.actor._params(self.actor.create_missing)
        params.append(("encoding", self.actor.client.encoding))
        if self.last_seq is not None:
            params.append(("since", str(self.last_seq)))
        if self._url_subscribe:
            params.append(("subscribe", ",".join(self._url_subscribe)))
        return self.actor.client.websocket_url(f"{self.actor._path}/connect", params)

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
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[action_id] = future
        try:
            self._send(
                {"type": "action", "id": action_id, "name": action, "args": list(args)}
            )
            return await asyncio.wait_for(future, limit)
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
    def _send(self, frame: dict[str, Any]) -> None:
        """Queue a frame; one writer per socket keeps the order of the calls."""
        outbox = self._outbox
        if self._ws is None or outbox is None:
            raise ConnectionLost("The connection is closed")
        data = encode(frame, self.actor.client.encoding)
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
                frame = decode(message, self.actor.client.encoding)
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
                self.errors.append(error)
                if not self._error_handlers:
                    logger.info("rivet connection error: %r", error)
                for handler in list(self._error_handlers):
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
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost())
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

    def __init__(self, actor: ActorClient, params: Any = None, **options: Any) -> None:
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
        actor: ActorClient, params: Any, options: dict[str, Any]
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
