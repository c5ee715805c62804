"""Flow control of one socket, both ways, on every supported server.

Memory per socket must stay bounded whatever the client does and whatever
ASGI server runs the project:

* **Inbound** (:class:`Inbound`, :class:`DaphneReads`). The consumer takes
  frames at once into a queue of its own bounded by count and bytes
  (``MAX_PENDING_FRAMES``, ``MAX_PENDING_FRAME_BYTES``); a client that
  sends more than that ahead of the answers is refused with
  ``request/too_many_frames`` and closed (4429). That bounds the consumer,
  not the server in front of it: uvicorn stops reading a socket while its
  application has not taken the last frame, but daphne reads every frame
  into an unbounded ``asyncio.Queue`` (the ASGI ``receive``) as fast as the
  client sends, faster than any consumer takes them (a client that sent
  without reading grew daphne by hundreds of MiB). For daphne,
  :class:`DaphneReads` applies uvicorn's rule through the socket's twisted
  transport (an ``IPushProducer``): once the application took a message the
  transport stops reading; it reads again when the application asks for
  the next one with none queued. The client's kernel buffers then hold
  what it sends, not the server.
* **Outbound** (:class:`Outbound`). The consumer never queues frames of
  its own: every sender (the action loop, the event stream) awaits its
  ``send``. Pure ASGI has one backpressure signal, a ``send`` that waits
  while the client does not read (uvicorn, with ``websockets`` or
  ``wsproto``), so a ``send`` that has not completed after
  ``SLOW_CONSUMER_TIMEOUT`` marks a slow reader. daphne's ``send`` never
  waits: it hands the frame to twisted, which buffers without bound. For
  daphne a small adapter (:class:`DaphneFlow`) registers with the socket's
  twisted transport as its push producer, which twisted pauses while more
  than its high-water mark (64 KiB) is unsent; sends wait while it is
  paused.

Both daphne adapters find daphne's protocol through any middleware that
wraps ``send`` (channels' ``SessionMiddleware`` does); if they cannot, a
warning is logged once and the socket runs without them (daphne's buffers
are then unbounded, both ways).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..exceptions import RequestTooLarge, RivetError, TooManyFrames
from .frames import CLOSE_TOO_LARGE, CLOSE_TOO_MANY

logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "DaphneFlow",
    "DaphneReads",
    "Inbound",
    "Outbound",
    "find_daphne_protocol",
]

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
#: Why frames are refused: the error to answer with and the close code.
Refusal = tuple[RivetError, int]

# How far (and through how many objects) to look for daphne's protocol
# behind wrappers of ``send``: middleware adds one or two levels each.
_SEARCH_DEPTH = 8
_SEARCH_NODES = 64
_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


# -- finding daphne behind the middleware -------------------------------------------
def _module(obj: Any) -> str:
    return str(getattr(type(obj), "__module__", "") or "")


def _is_daphne_protocol(obj: Any) -> bool:
    return (
        _module(obj).startswith("daphne.")
        and callable(getattr(obj, "registerProducer", None))
        and getattr(obj, "transport", None) is not None
    )


def _children(obj: Any) -> list[Any]:
    """The objects a wrapper of ``send`` may hold the wrapped ``send`` in."""
    found: list[Any] = []
    if isinstance(obj, functools.partial):
        found.append(obj.func)
        found.extend(obj.args)
    elif inspect.ismethod(obj):
        found.append(obj.__self__)
    elif inspect.isfunction(obj):
        found.extend(cell.cell_contents for cell in obj.__closure__ or ())
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        found.append(wrapped)
    if not (inspect.isfunction(obj) or inspect.ismethod(obj)):
        # A middleware's wrapper object (channels' InstanceSessionWrapper
        # keeps the inner send as ``real_send``): its callable attributes.
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            found.extend(value for value in attributes.values() if callable(value))
    return found


def find_daphne_protocol(send: Any) -> tuple[Any, bool]:
    """Return ``(daphne's protocol or None, whether daphne was seen at all)``.

    daphne passes ``functools.partial(server.handle_reply, protocol)``;
    middleware wraps it in bound methods and closures. The search follows
    callables only, and only so far.
    """
    seen: set[int] = set()
    daphne = False
    frontier = [send]
    for _depth in range(_SEARCH_DEPTH):
        following: list[Any] = []
        for obj in frontier:
            if id(obj) in seen or len(seen) >= _SEARCH_NODES:
                continue
            seen.add(id(obj))
            if _is_daphne_protocol(obj):
                return obj, True
            target = getattr(obj, "__self__", obj)
            daphne = daphne or _module(target).startswith("daphne.")
            following.extend(_children(obj))
        if not following:
            break
        frontier = following
    return None, daphne


class DaphneFlow:
    """Whether a daphne socket can take more data (a twisted push producer).

    ``wait()`` returns at once while the socket's transport holds less than
    twisted's high-water mark of unsent data, else waits for it to drain.
    """

    def __init__(self, protocol: Any) -> None:
        self._ready = asyncio.Event()
        self._ready.set()
        self._protocol: Any = None
        # The producer registered before us (daphne's HTTPChannel registers
        # itself for the upgrade request): told everything too.
        self._previous: Any = None
        transport = protocol.transport
        previous = getattr(transport, "producer", None)
        if previous is None:
            protocol.registerProducer(self, True)
        elif getattr(transport, "streamingProducer", False):
            self._previous, transport.producer = previous, self
        else:
            raise TypeError("daphne's transport has a pull producer")
        self._protocol = protocol
        #: daphne's protocol of the socket (:class:`DaphneReads` reads it too).
        self.protocol: Any = protocol

    @classmethod
    def attach(cls, send: Any) -> DaphneFlow | None:
        """Return the adapter for daphne's ``send``, else ``None`` (logged)."""
        try:
            protocol, daphne = find_daphne_protocol(send)
            if protocol is not None:
                return cls(protocol)
        except Exception:  # an unknown daphne version: run without it
            logger.warning("daphne flow control unavailable", exc_info=True)
            return None
        if daphne:
            _warn_once(
                "daphne",
                "daphne's socket was not found behind send=%r: sockets of this "
                "process run without outbound flow control",
                send,
            )
        return None

    @property
    def paused(self) -> bool:
        """Whether the socket holds more unsent data than its high-water mark."""
        return not self._ready.is_set()

    # twisted's IPushProducer, called on the event loop's thread (daphne runs
    # twisted's reactor on asyncio).
    def pauseProducing(self) -> None:  # noqa: N802 - twisted's interface
        """The server's buffer is full: stop sending."""
        self._ready.clear()
        if self._previous is not None:
            self._previous.pauseProducing()

    def resumeProducing(self) -> None:  # noqa: N802
        """The server's buffer drained: send again."""
        self._ready.set()
        if self._previous is not None:
            self._previous.resumeProducing()

    def stopProducing(self) -> None:  # noqa: N802
        """The socket is gone: never wait again."""
        self._ready.set()
        if self._previous is not None:
            self._previous.stopProducing()

    async def wait(self) -> None:
        """Wait until the socket takes data."""
        await self._ready.wait()

    def close(self) -> None:
        """Unregister from the transport (the connection ends)."""
        protocol, self._protocol = self._protocol, None
        self._ready.set()
        if protocol is None:
            return
        transport = protocol.transport
        try:
            if getattr(transport, "producer", None) is self:
                if self._previous is not None:
                    transport.producer = self._previous
                else:
                    protocol.unregisterProducer()
        except Exception:  # already disconnected
            logger.debug("unregistering the producer failed", exc_info=True)


class Outbound:
    """One socket's ``send``, bounded in time: a slow reader is detected, not fed."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.daphne = DaphneFlow.attach(send)
        self.closed = False

    async def send(
        self, message: dict[str, Any], timeout: float | None, room: bool = True
    ) -> bool:
        """Send ``message``; False if the socket did not take it in ``timeout``.

        ``room=False`` sends without waiting for daphne's buffer to drain
        (a close frame must go out to a client that does not read);
        ``timeout=None`` waits as long as the server's ``send`` does. Once
        closed, nothing is sent (True: there is nothing to wait for).
        """
        daphne = self.daphne
        if daphne is not None and not (room and daphne.paused):
            # daphne's send hands the frame to twisted and never waits: no
            # timer to arm (one per frame otherwise, for every event).
            if not self.closed:
                await self._send(message)
            return True
        try:
            async with asyncio.timeout(timeout):
                if room and self.daphne is not None and self.daphne.paused:
                    await self.daphne.wait()
                if not self.closed:
                    await self._send(message)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Stop watching the socket; sends waiting for room end, unsent."""
        self.closed = True
        if self.daphne is not None:
            self.daphne.close()


class Inbound:
    """Frames received and not yet handled, bounded by count and bytes."""

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.bytes = 0
        self._frames: collections.deque[tuple[bytes | str, int]] = collections.deque()
        self._ready = asyncio.Event()
        self.closed = False

    def __len__(self) -> int:
        return len(self._frames)

    def take(self, message: dict[str, Any], max_frame: int) -> Refusal | None:
        """Queue a ``websocket.receive``'s frame, or say why it is refused.

        A frame over ``max_frame`` bytes is not read at all (4413), nor are
        frames beyond the pending bounds (4429).
        """
        data = message.get("bytes")
        if data is None:
            data = message.get("text") or ""
        size = len(data) if isinstance(data, bytes) else _utf8_size(data)
        if size > max_frame:
            error: RivetError = RequestTooLarge(
                f"The frame is {size} bytes; the limit is {max_frame}",
                metadata={"size": size, "limit": max_frame},
            )
            return error, CLOSE_TOO_LARGE
        if not self.put(data, size):
            error = TooManyFrames(
                metadata={"max_frames": self.max_frames, "max_bytes": self.max_bytes}
            )
            return error, CLOSE_TOO_MANY
        return None

    def put(self, data: bytes | str, size: int) -> bool:
        """Queue a frame; False (nothing queued) when it would pass a bound."""
        if len(self._frames) >= self.max_frames or self.bytes + size > self.max_bytes:
            return False
        self._frames.append((data, size))
        self.bytes += size
        self._ready.set()
        return True

    async def get(self) -> bytes | str | None:
        """Return the next frame (``None`` once closed)."""
        while not self._frames:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        data, size = self._frames.popleft()
        self.bytes -= size
        return data

    def close(self) -> None:
        """Drop what is queued; wake the reader."""
        self.closed = True
        self._frames.clear()
        self.bytes = 0
        self._ready.set()


def _utf8_size(text: str) -> int:
    # Most frames are ASCII: their size needs no encoded copy.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class DaphneReads:
    """Read a daphne socket only while its application waits for a message.

    Wraps the application's ``receive``: after each message it took, the
    socket's twisted transport stops reading (``pauseProducing``); it reads
    again (``resumeProducing``) once the application asks for a message
    with none queued -- uvicorn's rule. So daphne's queue holds what one
    read of the socket brings (64 KiB, and autobahn's one partial message),
    however fast the client sends and however long the application is
    busy elsewhere. Reading stays paused while the application drains what
    is queued. The cost: a pause and a resume of the transport per message
    (about 8 µs of CPU, measured).
    """

    def __init__(self, receive: Receive, queue: Any, transport: Any) -> None:
        self._receive = receive
        self._queue = queue
        self._transport = transport
        self.paused = False

    @classmethod
    def attach(cls, receive: Receive, daphne: DaphneFlow | None) -> DaphneReads | None:
        """Return the adapter for a daphne socket, else ``None`` (logged)."""
        if daphne is None:
            return None
        # daphne's WebSocketProtocol puts what it reads in application_queue
        # (whose get() is receive, unless a middleware wraps it).
        queue = getattr(daphne.protocol, "application_queue", None)
        transport = getattr(daphne.protocol, "transport", None)
        if not all(
            callable(method)
            for method in (
                getattr(queue, "empty", None),
                getattr(transport, "pauseProducing", None),
                getattr(transport, "resumeProducing", None),
            )
        ):
            _warn_once(
                "daphne-reads",
                "daphne's receive queue or transport was not found: sockets of "
                "this process run without inbound flow control",
            )
            return None
        return cls(receive, queue, transport)

    async def receive(self) -> dict[str, Any]:
        """The application's ``receive``, reading the socket only meanwhile."""
        if self.paused and self._queue.empty():
            self.paused = False
            self._transport.resumeProducing()
        message = await self._receive()
        if not self.paused:
            self.paused = True
            self._transport.pauseProducing()
        return message

    def close(self) -> None:
        """Leave the socket reading (the application ends)."""
        if self.paused:
            self.paused = False
            try:
                self._transport.resumeProducing()
            except Exception:  # already disconnected
                logger.debug("resuming the transport failed", exc_info=True)
