"""The process side of event delivery: one feed per actor, one hub per loop.

A :class:`Hub` (one per event loop, so one per web process) owns one
channel-layer channel and joins the group of every actor that has a
connection in this process. Each actor's events land in its :class:`Feed`
once, however many sockets watch it, so the layer carries one message per
invocation per process instead of one per socket, and a busy socket cannot
make the layer drop messages for the others. Committed events of this
process arrive at once too, without the layer (``events.add_listener``).

A feed keeps the seqs it has seen contiguous: a jump (a message the layer
dropped or reordered) is read from the log once for the whole process. The
*last* events of a burst have no later message to reveal their loss, so
every ``EVENT_CHECK_INTERVAL`` the hub reads the latest seq of its actors
(one query) and fills what it missed; a feed that missed messages rejoins
its group (Redis may have been restarted and forgotten it). A feed keeps an
event only while a local stream (:mod:`.delivery`) still needs it, within a
byte and count bound, with its encoded frames.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import events
from ..conf import rivet_settings
from ..events import LoggedEvent
from ..events.hubs import LoopHub, current, run_once
from ..exceptions import RivetError
from ..models.db import run_db

logger = logging.getLogger("django_rivet.transport")

__all__ = [
    "FEED_BYTES",
    "FEED_EVENTS",
    "LOG_BATCH",
    "Entry",
    "EventSink",
    "Feed",
    "Follower",
    "Hub",
    "current_hub",
]

# A feed keeps at most this many events, and this many bytes of arguments
# and encoded frames, for streams that have not sent them yet.
FEED_EVENTS = 1000
FEED_BYTES = 4 * 1024 * 1024
# Out-of-order events a feed holds while it waits for the ones before them.
MAX_PENDING = 1000
# Wait this long before reading a gap from the log: under load, messages of
# two invocations committed back to back often arrive swapped.
FILL_GRACE = 0.05
# Seconds between two rejoins of one actor's group after missed messages.
REJOIN_INTERVAL = 5.0
# Events read from the log per query by feeds and streams: events may be
# large (MAX_EVENT_BYTES), and a batch sits in memory until it is sent.
LOG_BATCH = 100
# Bytes of event arguments one fill reads at a time (at least one event).
FILL_BYTES = 1024 * 1024


def check_interval() -> float:
    """Return the seconds between two checks of the actors' latest seqs."""
    return rivet_settings.EVENT_CHECK_INTERVAL


# -- what a feed needs from the streams that follow it ----------------------------
class EventSink(Protocol):
    """The consumer side of a stream (one per connection)."""

    #: Names the cache of encoded frames (protocol and encoding).
    frame_key: str

    def wants_event(self, name: str) -> bool:
        """Whether the connection is subscribed to ``name``."""

    def event_names(self) -> list[str] | None:
        """The subscribed names for log queries (``None``: every event)."""

    def encode_logged(self, event: LoggedEvent) -> bytes:
        """Encode the event's frame; raise a ``RivetError`` to send instead."""

    async def send_data(self, data: bytes) -> None:
        """Send an encoded frame (waits while the socket is full)."""

    async def send_error(self, error: RivetError) -> None:
        """Send a connection-level error frame."""


class Follower(Protocol):
    """A connection's stream as its feed sees it (``delivery.Stream``)."""

    #: The last seq the connection dealt with.
    cursor: int
    #: Set to make the stream send what follows its cursor.
    wake: asyncio.Event


# -- one actor's events in this process ---------------------------------------------
@dataclass(slots=True)
class Entry:
    """An event in a feed's buffer, with its frames encoded so far."""

    event: LoggedEvent
    frames: dict[str, bytes] = field(default_factory=dict)
    size: int = 0
    # False once the feed dropped it (a stream may still be sending it).
    live: bool = True

    @property
    def seq(self) -> int:
        return self.event.seq


class Feed:
    """The events of one actor as this process knows them.

    Invariants: every seq up to ``filled`` is either in ``entries`` (which
    are contiguous and end at ``filled``) or older than ``start``; ``head``
    is the highest seq known to be committed. When ``filled < head`` a fill
    task reads the difference from the log.
    """

    def __init__(self, hub: Hub, actor_id: uuid.UUID, head: int) -> None:
        self.hub = hub
        self.actor_id = actor_id
        self.head = head
        self.filled = head
        self.entries: collections.deque[Entry] = collections.deque()
        self.bytes = 0
        self.pending: dict[int, LoggedEvent] = {}
        self.streams: set[Follower] = set()
        self.joined = False
        self.rejoined_at = 0.0
        self._fill_task: asyncio.Task[None] | None = None

    @property
    def start(self) -> int:
        """The first seq in the buffer (``filled + 1`` when it is empty)."""
        return self.entries[0].seq if self.entries else self.filled + 1

    # -- what comes in ---------------------------------------------------------
    def offer(self, batch: list[LoggedEvent], last: int) -> None:
        """Take events announced by the layer or this process (any order, dups)."""
        for event in batch:
            if event.seq <= self.filled:
                continue
            if event.seq == self.filled + 1:
                self._append(event)
            elif len(self.pending) < MAX_PENDING:
                self.pending[event.seq] = event
        self._drain_pending()
        self.note_head(last, FILL_GRACE)
        self.trim()
        self.wake()

    def note_head(self, seq: int, delay: float = 0.0) -> None:
        """Record that ``seq`` is committed; fetch what is missing below it."""
        if seq > self.head:
            self.head = seq
        if self.filled < self.head:
            self.schedule_fill(delay)

    def _append(self, event: LoggedEvent) -> None:
        entry = Entry(event, size=len(event.args) + 64)
        self.entries.append(entry)
        self.bytes += entry.size
        self.filled = event.seq

    def _drain_pending(self) -> None:
        pending = self.pending
        while pending:
            event = pending.pop(self.filled + 1, None)
            if event is None:
                break
            self._append(event)
        for seq in [seq for seq in pending if seq <= self.filled]:
            del pending[seq]

    def _skip_to(self, seq: int) -> None:
        # Events up to seq are gone from the log: the buffer restarts after
        # them, and streams that still needed them find out from the log.
        self._clear()
        self.filled = max(self.filled, seq)

    def _clear(self) -> None:
        for entry in self.entries:
            entry.live = False
        self.entries.clear()
        self.bytes = 0

    def schedule_fill(self, delay: float = 0.0) -> None:
        """Start reading ``(filled, head]`` from the log, unless already busy."""
        self._fill_task = run_once(self.hub.loop, self._fill_task, self._fill, delay)

    async def _fill(self) -> None:
        try:
            while self.filled < self.head and self.waiting():
                upper = min(self.pending) if self.pending else self.head + 1
                logged, _more = await run_db(
                    events.read_bounded,
                    self.actor_id,
                    self.filled,
                    upper,
                    None,
                    LOG_BATCH,
                    FILL_BYTES,
                )
                if not logged:
                    self._skip_to(upper - 1)
                else:
                    if logged[0].seq > self.filled + 1:
                        self._skip_to(logged[0].seq - 1)
                    for event in logged:
                        if event.seq == self.filled + 1:
                            self._append(event)
                self._drain_pending()
                self.trim()
                self.wake()
        except Exception as exc:  # the database is down: the next check retries
            self.hub.db_failed("reading the event log", exc)

    def waiting(self) -> bool:
        """Whether a stream has sent everything buffered and waits for more.

        Streams further behind have buffered events to send, or read the log
        themselves: filling for them would only hold memory.
        """
        return any(stream.cursor >= self.filled for stream in self.streams)

    # -- what goes out -------------------------------------------------------------
    def entry_after(self, cursor: int) -> Entry | None:
        """Return the buffered entry right after ``cursor``, if the buffer has it."""
        index = cursor + 1 - self.start
        if 0 <= index < len(self.entries):
            return self.entries[index]
        return None

    def frame(self, entry: Entry, sink: EventSink) -> bytes | RivetError:
        """Return the entry's frame for ``sink``, encoding it once per process.

        A ``RivetError`` (e.g. the frame is over the outgoing limit) is
        returned for the stream to send instead of the event.
        """
        data = entry.frames.get(sink.frame_key)
        if data is None:
            try:
                data = sink.encode_logged(entry.event)
            except RivetError as error:
                return error
            if entry.live:
                entry.frames[sink.frame_key] = data
                entry.size += len(data)
                self.bytes += len(data)
        return data

    def trim(self) -> None:
        """Drop entries every local stream has sent, and keep within the bounds."""
        if not self.entries:
            return
        floor = min((stream.cursor for stream in self.streams), default=self.filled)
        entries = self.entries
        while entries and (
            entries[0].seq <= floor
            or len(entries) > FEED_EVENTS
            or self.bytes > FEED_BYTES
        ):
            entry = entries.popleft()
            entry.live = False
            self.bytes -= entry.size

    def wake(self) -> None:
        """Wake every stream that is behind."""
        for stream in self.streams:
            if stream.cursor < self.head:
                stream.wake.set()

    def close(self) -> None:
        """Stop filling; drop the buffer."""
        if self._fill_task is not None:
            self._fill_task.cancel()
        self._clear()
        self.pending.clear()


# -- this process's subscription ----------------------------------------------------
class Hub(LoopHub):
    """The channel-layer side of every feed of one event loop (one per process)."""

    channel_prefix = "rivet.feed"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.feeds: dict[uuid.UUID, Feed] = {}
        self._rejoin = False
        self._db_failures = 0
        events.add_listener(self._offer_threadsafe)

    # -- feeds ---------------------------------------------------------------------
    def attach(self, actor_id: uuid.UUID, stream: Follower) -> Feed:
        """Add a stream to the actor's feed (created and joined if new)."""
        feed = self.feeds.get(actor_id)
        if feed is None:
            feed = self.feeds[actor_id] = Feed(self, actor_id, stream.cursor)
            self.spawn(self._join(feed))
        feed.streams.add(stream)
        feed.note_head(stream.cursor)
        self.start()
        return feed

    def detach(self, feed: Feed, stream: Follower) -> None:
        """Remove a stream; the last one of a feed leaves the actor's group."""
        feed.streams.discard(stream)
        feed.trim()
        if feed.streams or self.feeds.get(feed.actor_id) is not feed:
            return
        del self.feeds[feed.actor_id]
        feed.close()
        if self.layer is not None and feed.joined:
            self.spawn(self._leave(feed.actor_id))
        if not self.feeds:
            self.stop()

    def stopping(self) -> None:
        """Stop hearing this process's commits (no feed left)."""
        events.remove_listener(self._offer_threadsafe)

    def interval(self) -> float:
        """Return the seconds between two checks of the actors' latest seqs."""
        return check_interval()

    def db_failed(self, what: str, exc: BaseException) -> None:
        """Log a database failure once per outage (retried every check)."""
        self._db_failures += 1
        if self._db_failures == 1:
            logger.warning("%s failed; retrying every check", what, exc_info=exc)

    async def _join(self, feed: Feed) -> None:
        if self.layer is None:
            return
        try:
            await self.layer.group_add(events.actor_group(feed.actor_id), self.channel)
        except Exception as exc:
            events.layer_health.failed("group_add", exc)
            self._rejoin = True
            return
        if self.feeds.get(feed.actor_id) is not feed:
            # Its last stream left while joining: do not stay in the group.
            await self._leave(feed.actor_id)
            return
        feed.joined = True
        # Events committed before the group was joined never reached it.
        await self.check([feed])

    async def _leave(self, actor_id: uuid.UUID) -> None:
        try:
            await self.layer.group_discard(events.actor_group(actor_id), self.channel)
        except Exception as exc:  # the membership expires anyway
            events.layer_health.failed("group_discard", exc)

    # -- what comes in ---------------------------------------------------------------
    def _offer_threadsafe(self, actor_id: uuid.UUID, batch: list[LoggedEvent]) -> None:
        # Called by events.publish in the committing thread, for every actor
        # of the process: only this loop may touch the feeds.
        if actor_id not in self.feeds or self.stopped:
            return
        try:
            self.loop.call_soon_threadsafe(self._offer, actor_id, batch, batch[-1].seq)
        except RuntimeError:  # the loop is closed (a test's loop): forget it
            events.remove_listener(self._offer_threadsafe)

    def _offer(self, actor_id: uuid.UUID, batch: list[LoggedEvent], last: int) -> None:
        feed = self.feeds.get(actor_id)
        if feed is not None:
            feed.offer(batch, last)

    def handle(self, message: dict[str, Any]) -> None:
        """Take one channel-layer message (``rivet.events``)."""
        if message.get("type") != events.EVENTS_MESSAGE:
            return
        try:
            actor_id = uuid.UUID(hex=str(message["actor"]))
            last = int(message["last"])
            batch = [
                LoggedEvent(int(seq), str(name), bytes(args))
                for seq, name, args in message.get("events") or []
            ]
        except (KeyError, TypeError, ValueError):
            logger.warning("malformed event message dropped")
            return
        self._offer(actor_id, batch, last)

    async def before_receive(self) -> None:
        """Rejoin the groups a failed join left."""
        if self._rejoin:
            await self._rejoin_all()

    async def recover(self) -> None:
        # After an outage Redis may have forgotten the groups.
        self._rejoin = True
        await self._rejoin_all()

    async def _rejoin_all(self) -> None:
        for feed in list(self.feeds.values()):
            try:
                await self.layer.group_add(
                    events.actor_group(feed.actor_id), self.channel
                )
            except Exception as exc:
                events.layer_health.failed("group_add", exc)
                return
            feed.joined = True
        self._rejoin = False
        events.layer_health.ok()
        await self.check()

    # -- the tail check ------------------------------------------------------------
    async def check(self, feeds: list[Feed] | None = None) -> None:
        """Read the latest seq of the feeds' actors; fetch what they missed."""
        targets = list(self.feeds.values()) if feeds is None else feeds
        if not targets:
            return
        try:
            found = await run_db(events.heads, [feed.actor_id for feed in targets])
        except Exception as exc:
            self.db_failed("checking the actors' latest events", exc)
            return
        if self._db_failures:
            logger.warning(
                "event delivery reads the database again failures=%s",
                self._db_failures,
            )
            self._db_failures = 0
        now = self.loop.time()
        for feed in targets:
            head = found.get(feed.actor_id)
            if head is None:
                continue  # destroyed: its connections are being closed
            if head > feed.head:
                # The layer lost (or has not yet delivered) these events.
                feed.note_head(head)
                if (
                    self.layer is not None
                    and feeds is None
                    and now - feed.rejoined_at > REJOIN_INTERVAL
                ):
                    feed.rejoined_at = now
                    self.spawn(self._join(feed))
            elif feed.filled < feed.head:
                feed.schedule_fill()  # an earlier fill failed


def current_hub() -> Hub:
    """Return the hub of the running event loop (started on first use)."""
    return current(Hub)
