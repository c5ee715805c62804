"""The connection side of event delivery: streams and flow control.

The event log (:mod:`django_rivet.events`) is the source of truth; the
channel layer only says "actor X has new events", as fast as it can, to the
process's feed of the actor (:mod:`.feeds`). This module turns that into the
delivery guarantee of docs/protocol.md:

* **Each connection pulls at its own pace.** A :class:`Stream` remembers the
  last seq its connection dealt with and sends what follows from the feed's
  buffer, or from the log when it fell behind the buffer. When the log no
  longer has what it needs (it fell more than ``EVENT_LOG_SIZE`` events
  behind), it sends ``actor/events_missed`` with the first seq it can still
  have, then carries on from there: never a silent gap.
* **Bounded memory.** Sends wait while the socket's server holds unsent data
  (:class:`Pressure`), so a client that does not read makes the server
  buffer at most its own high-water mark, and is closed after
  ``SLOW_CONSUMER_TIMEOUT``; its events wait in the log meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from typing import Any, Protocol

from .. import events, observability
from ..events import LoggedEvent
from ..exceptions import EventsMissed, RivetError
from .feeds import LOG_BATCH, current_hub, run_db

logger = logging.getLogger("django_rivet.transport")

__all__ = ["EventSink", "Pressure", "Stream"]

# Events one stream sends before it lets others run.
SEND_BATCH = 200


# -- flow control -------------------------------------------------------------------
def _server_protocol(send: Any) -> Any:
    """Return daphne's protocol object behind an ASGI ``send``, if it is one.

    daphne passes ``functools.partial(server.handle_reply, protocol)``; its
    protocol is an autobahn ``WebSocketServerProtocol`` over a twisted
    transport, which tells its push producer when its buffer is over its
    high-water mark. Other servers push back through ``send`` itself (it
    waits while the client does not read).
    """
    if not isinstance(send, functools.partial) or not send.args:
        return None
    protocol = send.args[0]
    if not callable(getattr(protocol, "registerProducer", None)):
        return None
    if getattr(protocol, "transport", None) is None:
        return None
    return protocol


class Pressure:
    """Whether one socket can take more data (a twisted push producer).

    ``wait()`` returns at once while the socket's server holds less than its
    high-water mark of unsent data (twisted's 64 KiB, on top of the kernel's
    socket buffer), else waits for it to drain.
    """

    def __init__(self, send: Any) -> None:
        self._ready = asyncio.Event()
        self._ready.set()
        self.stopped = False
        # The producer registered before us (daphne's HTTPChannel, which
        # registers itself for the upgrade request): told everything too.
        self._previous: Any = None
        self._protocol = _server_protocol(send)
        if self._protocol is None:
            return
        transport = self._protocol.transport
        try:
            previous = getattr(transport, "producer", None)
            if previous is None:
                self._protocol.registerProducer(self, True)
            elif getattr(transport, "streamingProducer", False):
                self._previous, transport.producer = previous, self
            else:
                self._protocol = None
        except Exception:  # already disconnected, or an unknown transport
            logger.debug("no flow control for this socket", exc_info=True)
            self._protocol = None

    @property
    def active(self) -> bool:
        """Whether the server reports its buffer (else ``send`` pushes back)."""
        return self._protocol is not None

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
        self.stopped = True
        self._ready.set()
        if self._previous is not None:
            self._previous.stopProducing()

    async def wait(self, timeout: float) -> bool:
        """Wait until the socket takes data; False if it did not in ``timeout``."""
        if self._ready.is_set():
            return True
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Unregister from the server (the connection ends)."""
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


# -- what a connection needs from its consumer ----------------------------------------
class EventSink(Protocol):
    """The consumer side of a :class:`Stream` (one per connection)."""

    #: Names the cache of encoded frames (protocol and encoding).
    frame_key: str

    def wants_event(self, name: str) -> bool:
        """Whether the connection is subscribed to ``name``."""

    def event_names(self) -> list[str] | None:
        """The subscribed names for log queries (``None``: every event)."""

    def encode_event(self, event: LoggedEvent) -> bytes:
        """Encode the event's frame; raise a ``RivetError`` to send instead."""

    async def send_data(self, data: bytes) -> None:
        """Send an encoded frame (waits while the socket is full)."""

    async def send_error(self, error: RivetError) -> None:
        """Send a connection-level error frame."""


# -- one connection ---------------------------------------------------------------
class Stream:
    """What one connection was sent of its actor's events, and the sender task.

    ``cursor`` is the last seq the connection dealt with (sent, or skipped
    because it is not subscribed). The task sends what follows, from the
    feed's buffer or from the log; ``lock`` is held while it does, so a
    subscription change (which may replay the log) sees a stable cursor.
    """

    def __init__(self, actor_id: uuid.UUID, cursor: int, sink: EventSink) -> None:
        self.actor_id = actor_id
        self.cursor = cursor
        self.sink = sink
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.closed = False
        self.missed = 0
        self.hub = current_hub()
        self.feed = self.hub.attach(actor_id, self)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sending live events (after init and any replay)."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.wake.set()

    async def close(self) -> None:
        """Stop sending and leave the feed."""
        if self.closed:
            return
        self.closed = True
        self.wake.set()
        self.hub.detach(self.feed, self)
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        failures = 0
        while not self.closed:
            await self.wake.wait()
            self.wake.clear()
            try:
                async with self.lock:
                    await self._deliver()
            except asyncio.CancelledError:
                raise
            except Exception:
                # The database is down (or a bug): the cursor did not move past
                # what was sent, so retry later -- no event is skipped.
                failures += 1
                if failures == 1:
                    logger.exception("event delivery failed actor_id=%s", self.actor_id)
                await asyncio.sleep(min(0.25 * 2**failures, 5.0))
                self.wake.set()
                continue
            failures = 0

    async def _deliver(self) -> None:
        feed = self.feed
        sent = 0
        while not self.closed and self.cursor < feed.head:
            if self.cursor + 1 < feed.start:
                await self._from_log(feed.start)
                continue
            batch = feed.after(self.cursor, SEND_BATCH)
            if not batch:
                # Caught up with the buffer: the feed reads the rest of the
                # log (it fills only for streams waiting) and wakes us.
                feed.schedule_fill()
                return
            for entry in batch:
                if self.closed:
                    return
                if self.sink.wants_event(entry.event.name):
                    await self._send(feed.frame(entry, self.sink))
                self.cursor = entry.seq
            feed.trim()
            sent += len(batch)
            if sent >= SEND_BATCH * 5:
                await asyncio.sleep(0)  # let the other streams run
                sent = 0

    async def _send(self, data: bytes | RivetError) -> None:
        if isinstance(data, RivetError):
            await self.sink.send_error(data)
        else:
            await self.sink.send_data(data)

    async def _from_log(self, before: int) -> None:
        """Send the subscribed events after the cursor and below ``before``."""
        names = self.sink.event_names()
        logged = await run_db(
            events.read, self.actor_id, self.cursor, before, names, LOG_BATCH
        )
        full = len(logged) >= LOG_BATCH
        # Read the oldest seq after the events: if it is still at or below
        # the cursor's next seq, nothing the read needed had been deleted.
        first = await run_db(events.oldest, self.actor_id)
        if first is None or first > self.cursor + 1:
            self.missed += 1
            observability.events_missed()
            await self.sink.send_error(
                EventsMissed(
                    "Events were deleted from the event log before this connection "
                    "received them; refetch the state",
                    metadata={
                        "since": self.cursor,
                        "oldest": first,
                        "latest": self.feed.head,
                    },
                )
            )
            if first is None:
                self.cursor = max(self.cursor, before - 1)
                return
            # The notice says nothing below `first` comes: keep it true.
            self.cursor = max(self.cursor, first - 1)
            logged = [event for event in logged if event.seq > self.cursor]
        for event in logged:
            if self.closed:
                return
            await self._send(self._encode(event))
            self.cursor = event.seq
        if not full:
            self.cursor = max(self.cursor, before - 1)

    def _encode(self, event: LoggedEvent) -> bytes | RivetError:
        try:
            return self.sink.encode_event(event)
        except RivetError as error:
            return error

    async def replay(self, since: int, names: list[str] | None) -> None:
        """Send logged events in ``(since, cursor]`` of ``names``; the cursor stays."""
        after = since
        while after < self.cursor and not self.closed:
            logged = await run_db(
                events.read, self.actor_id, after, self.cursor + 1, names, LOG_BATCH
            )
            for event in logged:
                after = event.seq
                await self._send(self._encode(event))
            if len(logged) < LOG_BATCH:
                break
