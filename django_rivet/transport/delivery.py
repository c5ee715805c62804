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
* **Bounded memory.** Sends wait while the socket cannot take more
  (:mod:`.flow`), so a client that does not read holds at most one frame
  beyond its server's buffer, and is closed after ``SLOW_CONSUMER_TIMEOUT``;
  its events wait in the log meanwhile. A stream that reads the log (it
  fell behind the feed's buffer, or replays ``since``) holds at most
  :data:`LOG_READ_BYTES` of it at a time, however large the events.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from .. import events, observability
from ..events import LoggedEvent
from ..exceptions import EventsMissed, RivetError
from ..models.db import run_db
from .feeds import LOG_BATCH, EventSink, current_hub

logger = logging.getLogger("django_rivet.transport")

__all__ = ["LOG_READ_BYTES", "Stream"]

# Events one stream sends before it lets others run.
SEND_BATCH = 200
# Bytes of logged event arguments one stream reads (and holds) at a time; a
# batch always holds at least one event (at most MAX_EVENT_BYTES).
LOG_READ_BYTES = 256 * 1024


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
            # One entry at a time: a stream whose socket is slow holds the
            # frame it is sending, not a batch the feed has already dropped.
            entry = feed.entry_after(self.cursor)
            if entry is None:
                # Caught up with the buffer: the feed reads the rest of the
                # log (it fills only for streams waiting) and wakes us.
                feed.schedule_fill()
                return
            seq = entry.seq
            if self.sink.wants_event(entry.event.name):
                data = feed.frame(entry, self.sink)
                del entry
                await self._send(data)
                del data
            else:
                del entry
            if self.closed:
                return
            self.cursor = seq
            sent += 1
            if sent % SEND_BATCH == 0:
                feed.trim()
                if sent >= SEND_BATCH * 5:
                    await asyncio.sleep(0)  # let the other streams run
                    sent = 0
        feed.trim()

    async def _send(self, data: bytes | RivetError) -> None:
        if isinstance(data, RivetError):
            await self.sink.send_error(data)
        else:
            await self.sink.send_data(data)

    async def _from_log(self, before: int) -> None:
        """Send the subscribed events after the cursor and below ``before``."""
        names = self.sink.event_names()
        logged, full = await run_db(
            events.read_bounded,
            self.actor_id,
            self.cursor,
            before,
            names,
            LOG_BATCH,
            LOG_READ_BYTES,
        )
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
            return self.sink.encode_logged(event)
        except RivetError as error:
            return error

    async def replay(self, since: int, names: list[str] | None) -> None:
        """Send logged events in ``(since, cursor]`` of ``names``; the cursor stays."""
        after = since
        while after < self.cursor and not self.closed:
            logged, more = await run_db(
                events.read_bounded,
                self.actor_id,
                after,
                self.cursor + 1,
                names,
                LOG_BATCH,
                LOG_READ_BYTES,
            )
            for event in logged:
                after = event.seq
                await self._send(self._encode(event))
            del logged  # not held while the next batch is read
            if not more:
                break
