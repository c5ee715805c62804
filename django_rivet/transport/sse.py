"""Server-Sent Events (``text/event-stream``): framing, responses, flow control.

Two routes answer this way (docs/protocol.md, "Server-Sent Events"): a
workflow's stream (:mod:`.workflow_streams`) and an actor's events
(:mod:`.actor_events`). Both are Django async views returning a
``StreamingHttpResponse`` over an async generator, so they run under any
ASGI server Django runs under (daphne, uvicorn). What they share is here:

* **Framing** (:func:`frame`): ``id:``, ``event:`` and one ``data:`` line
  of JSON per message; ``: keep-alive`` comments every
  ``SSE_KEEPALIVE_INTERVAL`` seconds of silence (:func:`with_keepalive`).
* **Resuming**: :func:`since_of` reads ``Last-Event-ID`` (what
  ``EventSource`` sends when it reconnects) or ``?since=``.
* **A bounded hand-over** (:class:`Outbox`) from a sender task to the
  response, by bytes.
* **Slow readers** (:class:`BoundedSend`, applied by ``BodyLimitMiddleware``
  to these routes): a response body message that the server cannot hand to
  its client for ``SLOW_CONSUMER_TIMEOUT`` seconds ends the response -- the
  connection is aborted and the view's generator closed, as for a client
  that went away -- so that the server buffers at most what one socket
  holds (daphne: twisted's 64 KiB high-water mark, through the same
  adapter as WebSockets, :class:`~.flow.DaphneFlow`; uvicorn: its write
  buffer). The client reconnects with ``Last-Event-ID``. Under daphne each
  message is also written to the socket as it is sent (``TCP_NODELAY``,
  and no waiting for the reactor's next turn).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections
from django.http import HttpRequest, StreamingHttpResponse

from ..conf import rivet_settings
from ..encoding import encode
from ..exceptions import MalformedRequest, RivetError
from .flow import DaphneFlow

logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "CONTENT_TYPE",
    "OUTBOX_BYTES",
    "SSE_ROUTES",
    "BoundedSend",
    "Outbox",
    "error_frame",
    "event_stream",
    "frame",
    "since_of",
    "with_keepalive",
]

CONTENT_TYPE = "text/event-stream"
KEEPALIVE = b": keep-alive\n\n"
# How long EventSource waits before it reconnects (milliseconds).
RETRY = b"retry: 1000\n\n"
# Bytes a sender may hand over ahead of the response (at least one frame).
OUTBOX_BYTES = 64 * 1024
_OFFSET = re.compile(r"[0-9]{1,18}")

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def frame(data: Any, *, id: int | None = None, event: str | None = None) -> bytes:
    """Encode one message: ``data`` as one line of JSON."""
    head = b""
    if id is not None:
        head += b"id: %d\n" % id
    if event is not None:
        head += b"event: " + event.encode("utf-8") + b"\n"
    return head + b"data: " + encode(data, "json") + b"\n\n"


def error_frame(error: RivetError) -> bytes:
    """Encode an ``event: error`` message with the error's wire form.

    The body is the WebSocket's error frame (``{"type": "error", "group",
    "code", "message", "metadata"}``), an object where events carry arrays.
    """
    body = {"type": "error", **error.to_dict()}
    try:
        return frame(body, event="error")
    except (TypeError, ValueError):  # metadata JSON cannot carry
        return frame({**body, "metadata": None}, event="error")


def since_of(request: HttpRequest) -> int:
    """Return the offset to resume after: ``Last-Event-ID``, else ``?since=``, else 0.

    ``EventSource`` reconnects to the URL it was given (with its ``since``)
    and adds ``Last-Event-ID``: the header wins.
    """
    raw = request.headers.get("Last-Event-ID")
    if raw is None or raw == "":
        values = request.GET.getlist("since")
        if len(values) > 1:
            raise MalformedRequest("Query parameter 'since' given more than once")
        raw = values[0] if values else ""
    if raw == "":
        return 0
    if not _OFFSET.fullmatch(raw):
        raise MalformedRequest(
            "since (or Last-Event-ID) must be a non-negative integer of at most "
            "18 digits",
            metadata={"since": raw[:32]},
        )
    return int(raw)


async def event_stream(body: AsyncIterator[bytes]) -> StreamingHttpResponse:
    """Return the streaming response of an SSE route.

    The request's own database connections (authorization, the session) are
    closed first: Django would keep them until the response ends, one per
    reader for as long as it reads, and a hundred readers would exhaust the
    database's connections. What the response reads goes through the
    database threads' connections (``run_db``).
    """
    await sync_to_async(connections.close_all, thread_sensitive=True)()
    response = StreamingHttpResponse(body, content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


class Outbox:
    """Frames a sender hands to the response, bounded by bytes.

    :meth:`put` waits while more than :data:`OUTBOX_BYTES` wait (a single
    frame always goes in); :meth:`take` returns everything waiting, as one
    chunk, so a burst costs the server one write.
    """

    def __init__(self, limit: int = OUTBOX_BYTES) -> None:
        self.limit = limit
        self._frames: collections.deque[bytes] = collections.deque()
        self._bytes = 0
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    async def put(self, data: bytes) -> None:
        """Queue ``data``; wait while the outbox is full."""
        while self._frames and self._bytes + len(data) > self.limit:
            self._writable.clear()
            await self._writable.wait()
        self._frames.append(data)
        self._bytes += len(data)
        self._readable.set()

    async def take(self, timeout: float | None) -> bytes:
        """Return what waits (``b""`` after ``timeout`` seconds of nothing)."""
        if not self._frames:
            self._readable.clear()
            try:
                await asyncio.wait_for(self._readable.wait(), timeout)
            except TimeoutError:
                return b""
        chunk = b"".join(self._frames)
        self._frames.clear()
        self._bytes = 0
        self._writable.set()
        return chunk


async def with_keepalive(
    chunks: Callable[[float], Awaitable[bytes | None]],
) -> AsyncIterator[bytes]:
    """Yield what ``chunks(timeout)`` returns, a keep-alive for each ``b""``.

    ``chunks`` returns ``None`` once the response is complete.
    """
    yield RETRY
    interval = rivet_settings.SSE_KEEPALIVE_INTERVAL
    while (chunk := await chunks(interval)) is not None:
        yield chunk or KEEPALIVE


# -- slow readers --------------------------------------------------------------------
# The URL names (django_rivet.urls) of the routes that answer with an event stream.
SSE_ROUTES = frozenset({"workflow_stream", "actor_events"})


class BoundedSend:
    """An SSE response's ``send``: written at once, a reader stuck too long cut off.

    A body message the server has not taken within ``SLOW_CONSUMER_TIMEOUT``
    aborts the connection and raises ``CancelledError`` into the view's
    response (Django's handler treats it as a client that went away).
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self.daphne = DaphneFlow.attach(send)
        self.cut = False
        # Each message goes out at once: with Nagle's algorithm (twisted
        # leaves it on) a small write waits for the client's delayed ACK of
        # the previous one, up to 40 ms. uvicorn's asyncio sockets have it off.
        transport = getattr(getattr(self.daphne, "_protocol", None), "transport", None)
        # A plain TCP socket's transport, written to as each message is sent
        # (:meth:`_flush`); TLS transports have no doWrite and keep twisted's.
        self._socket = transport if hasattr(transport, "doWrite") else None
        no_delay = getattr(transport, "setTcpNoDelay", None)
        if no_delay is not None:
            try:
                no_delay(True)
            except Exception:  # not a TCP socket (a UNIX socket, a test double)
                logger.debug("TCP_NODELAY not set", exc_info=True)

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        """Send ``message``, within the slow-reader bound for body messages."""
        if self.cut:
            raise asyncio.CancelledError()
        if message.get("type") != "http.response.body":
            await self._send(message)
            return
        daphne = self.daphne
        if daphne is not None and not daphne.paused:
            await self._send(message)  # daphne's send never waits
            if message.get("more_body"):
                self._flush()
            return
        try:
            async with asyncio.timeout(rivet_settings.SLOW_CONSUMER_TIMEOUT):
                if daphne is not None:
                    await daphne.wait()
                await self._send(message)
        except TimeoutError:
            self.cut = True
            logger.warning("closing a slow event-stream reader")
            self._abort()
            raise asyncio.CancelledError() from None

    def _flush(self) -> None:
        """Write what daphne buffered for the socket now, not on the next turn.

        twisted writes a socket's buffer when its reactor next finds the
        socket writable, after everything else of the loop's turn: a commit
        handed to a hundred responses left the first one only once the last
        was served, and reached the readers as one burst. A socket that is
        closing is left to twisted, which finishes the close in that write.
        """
        transport = self._socket
        if (
            transport is None
            or not transport.connected
            or transport.disconnecting
            or getattr(transport, "_writeDisconnecting", False)
        ):
            return
        try:
            transport.doWrite()  # an error recurs on twisted's own write
        except Exception:  # pragma: no cover - twisted handles its errors
            logger.debug("writing an event stream at once failed", exc_info=True)

    def _abort(self) -> None:
        """Drop the connection and whatever the server still buffers for it."""
        protocol = getattr(self.daphne, "_protocol", None)
        transport = getattr(protocol, "transport", None)
        if transport is None:
            # uvicorn: send is a bound method of the request's cycle.
            owner = getattr(self._send, "__self__", None)
            transport = getattr(owner, "transport", None)
        for name in ("abortConnection", "abort"):
            abort = getattr(transport, name, None)
            if abort is not None:
                try:
                    abort()
                except Exception:  # already gone
                    logger.debug("aborting a slow reader failed", exc_info=True)
                return

    def close(self) -> None:
        """Stop watching the socket (the response ended)."""
        if self.daphne is not None:
            self.daphne.close()
