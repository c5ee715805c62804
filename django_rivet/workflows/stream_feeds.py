"""Following workflow streams: one feed per stream per process, one hub per loop.

A :class:`StreamReader` follows one stream from an offset: ``handle.
aread_stream`` and the SSE route use one each, ``handle.read_stream`` one
on a background loop of the process (:mod:`.stream_reading`). The readers
of one stream in one process share a :class:`StreamFeed`: the values
committed lately, as the commits' announcements carried them
(:func:`.streams.announce`), so a hundred readers of one stream cost the
database nothing while they keep up. Readers that are caught up ask for
the same values at once (those of the last commit) and are handed one and
the same :class:`StreamValues`: what a transport makes of them (their SSE
messages, joined) is made once per process, not once per reader. A reader
behind the feed, or a feed that missed an announcement, reads the rows
(:func:`.streams.read_after`).

The :class:`StreamHub` of a loop joins the channel-layer group of each
workflow it follows and hears this process's commits at once. It reads its
channel aside (:attr:`~django_rivet.events.hubs.LoopHub.receive_aside`):
while the loop hands one commit's values to a hundred responses, the next
announcements are already taken off the layer, and the loop gets them all
in its next turn. Announcements
are at most once (a layer drops messages when full, or while Redis is
down), so it also reads the heads of its streams every
``EVENT_CHECK_INTERVAL`` (every :data:`POLL_WITHOUT_LAYER` seconds without
a channel layer) and wakes the readers that are behind. A reader ends once
it read every value of a stream that is closed, or of a workflow that
finished, confirmed by one last read of the rows.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import events
from ..conf import rivet_settings
from ..engine import schema
from ..events.hubs import LoopHub, current, run_once
from ..exceptions import WorkflowNotFound
from ..models.db import run_db
from . import streams
from .streams import Appended, Batch

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "POLL_WITHOUT_LAYER",
    "StreamFeed",
    "StreamHub",
    "StreamReader",
    "StreamValue",
    "StreamValues",
]

# Seconds between two reads of the heads when there is no channel layer.
POLL_WITHOUT_LAYER = 0.05
# A feed keeps at most this many values, and bytes, for its readers.
FEED_VALUES = 2000
FEED_BYTES = 4 * 1024 * 1024
# Seconds a feed waits before it reads a gap from the rows.
FILL_GRACE = 0.05


@dataclass(slots=True)
class StreamValue:
    """One committed value (CBOR), with its SSE frame once a reader encoded it."""

    offset: int
    data: bytes
    frame: bytes | None = None

    def decoded(self) -> Any:
        """Return the value."""
        return schema.loads(self.data)


class StreamValues(list[StreamValue]):
    """Consecutive values a reader takes at once, oldest first.

    A feed hands the same object to every reader that asks for the same
    values, so ``frame`` (for the transport: the values' messages, joined)
    is built once for all of them.
    """

    __slots__ = ("frame",)

    frame: bytes | None

    def __init__(self, values: Iterable[StreamValue] = ()) -> None:
        super().__init__(values)
        self.frame = None


def _cut(values: list[StreamValue], max_bytes: int) -> list[StreamValue]:
    """Return the first values up to about ``max_bytes`` (> 0), at least one."""
    if max_bytes > 0:
        size = 0
        for index, value in enumerate(values):
            size += len(value.data)
            if size >= max_bytes:
                return values[: index + 1]
    return values


class StreamFeed:
    """One stream as this process knows it, shared by its local readers.

    Invariants, as for the actors' feeds: every offset up to ``filled`` is
    either in ``values`` (contiguous, ending at ``filled``) or older than
    their start; ``head`` is the highest offset known to be committed.
    When ``filled < head`` one fill task reads the difference from the rows
    for every local reader (after a short grace: announcements of two
    commits made back to back may arrive swapped, or be on their way when
    the check reads the head). ``known`` turns true with the first read of
    the stream's row, ``closed`` and ``ended`` (its workflow finished) say
    what is known of its end.
    """

    def __init__(self, hub: StreamHub, workflow_id: str, key: str, filled: int) -> None:
        self.hub = hub
        self.workflow_id = workflow_id
        self.key = key
        self.head = self.filled = filled
        self.closed = False
        self.ended = False
        self.known = False
        # A list (indexed by offset - first offset): readers slice it, and
        # trimming deletes a run at the front now and then.
        self.values: list[StreamValue] = []
        self.bytes = 0
        self.pending: dict[int, bytes] = {}
        self.readers: set[StreamReader] = set()
        self._fill: asyncio.Task[None] | None = None
        # The values last handed out, and what was asked: (cursor, filled,
        # limit, max_bytes). The readers woken by one commit ask the same.
        self._shared: StreamValues | None = None
        self._shared_for: tuple[int, int, int, int] | None = None

    @property
    def start(self) -> int:
        """The first offset buffered (``filled + 1`` when none is)."""
        return self.values[0].offset if self.values else self.filled + 1

    def offer(
        self, first: int, values: list[bytes] | None, length: int, closed: bool
    ) -> None:
        """Take values committed from offset ``first`` (None: not carried)."""
        for index, data in enumerate(values or ()):
            offset = first + index
            if offset == self.filled + 1:
                self._append(offset, data)
            elif offset > self.filled + 1 and len(self.pending) < FEED_VALUES:
                self.pending[offset] = data
        while self.filled + 1 in self.pending:
            self._append(self.filled + 1, self.pending.pop(self.filled + 1))
        self.head = max(self.head, length)
        self.closed = self.closed or closed
        if self.filled < self.head:
            self.schedule_fill(FILL_GRACE)
        self._trim()
        self.wake()

    def learn(self, batch: Batch) -> None:
        """Take what a read of the rows found."""
        self.known = True
        if batch.finished:
            self.ended = True
        values = [data for _, data in batch.values]
        first = batch.values[0][0] if values else batch.length + 1
        self.offer(first, values, batch.length, batch.closed)

    def after(self, cursor: int, limit: int, max_bytes: int = 0) -> StreamValues | None:
        """Return the buffered values after ``cursor`` (None: not buffered).

        At most ``limit`` values and (``max_bytes`` > 0) about that many
        bytes of them, at least one. Readers asking the same of an unchanged
        feed get the same object.
        """
        asked = (cursor, self.filled, limit, max_bytes)
        if asked == self._shared_for:
            return self._shared
        if not self.values:
            return None
        index = cursor + 1 - self.values[0].offset
        if index < 0 or index >= len(self.values):
            return None
        found = StreamValues(self.values[index : index + limit])
        if 0 < max_bytes <= self.bytes:  # else no slice of the feed reaches it
            found = StreamValues(_cut(found, max_bytes))
        self._shared, self._shared_for = found, asked
        return found

    def wake(self) -> None:
        """Wake every reader that is behind or may be at the end."""
        for reader in self.readers:
            if reader.cursor < self.filled or self.closed or self.ended:
                reader.wake.set()

    def schedule_fill(self, delay: float = 0.0) -> None:
        """Read ``(filled, head]`` from the rows, once for every reader."""
        self._fill = run_once(self.hub.loop, self._fill, self._run_fill, delay)

    async def _run_fill(self) -> None:
        try:
            while self.filled < self.head and self.readers:
                batch = await run_db(
                    streams.read_after, self.workflow_id, self.key, self.filled
                )
                before = self.filled
                self.learn(batch)
                if self.filled == before:  # rows gone (the workflow was purged)
                    self.head = self.filled
        except Exception:  # the database is down: the next check retries
            logger.debug("filling a stream feed failed", exc_info=True)

    def _append(self, offset: int, data: bytes) -> None:
        self.values.append(StreamValue(offset, data))
        self.bytes += len(data)
        self.filled = offset

    def _trim(self) -> None:
        # What every reader has had, then what is over the bounds.
        values = self.values
        floor = min((r.cursor for r in self.readers), default=self.filled)
        drop = 0
        if values:
            drop = min(len(values), max(0, floor + 1 - values[0].offset))
        size = self.bytes - sum(len(v.data) for v in values[:drop])
        while drop < len(values) and (
            len(values) - drop > FEED_VALUES or size > FEED_BYTES
        ):
            size -= len(values[drop].data)
            drop += 1
        if drop:
            del values[:drop]
            self.bytes = size

    def close(self) -> None:
        """Stop filling (no reader left)."""
        if self._fill is not None:
            self._fill.cancel()


class StreamReader:
    """One reader of one stream, from the values after ``since``."""

    def __init__(self, workflow_id: str, key: str, since: int = 0) -> None:
        if since < 0:
            raise ValueError("since is an offset: 0 or more")
        self.cursor = since
        self.wake = asyncio.Event()
        self.hub = current_hub()
        self.feed = self.hub.attach(workflow_id, key, self)
        self.closed = False

    async def next(
        self, wait: float | None = None, limit: int = 500, max_bytes: int = 0
    ) -> StreamValues | None:
        """Return the next values after the cursor, oldest first.

        Waits for at least one; returns ``[]`` after ``wait`` seconds without
        any (``None``: no limit) and ``None`` once the stream is over (closed,
        or its workflow finished, and every value read). At most ``limit``
        values, and (``max_bytes`` > 0) about that many bytes of them, at
        least one. Raises ``workflow/not_found`` when the workflow does not
        exist. Readers caught up with the feed are handed one shared object.
        """
        feed = self.feed
        loop = asyncio.get_running_loop()
        deadline = None if wait is None else loop.time() + wait
        while not self.closed:
            found = feed.after(self.cursor, limit, max_bytes)
            if found:
                return self._advance(found)
            if not feed.known or self.cursor + 1 < feed.start:
                # The first read, or behind what the feed keeps: read the rows.
                batch = await self._read(limit)
                if batch.values:
                    return self._advance(self._take(batch, max_bytes))
            elif self.cursor >= feed.head and (feed.closed or feed.ended):
                # Confirm on the rows: an announcement may have been lost.
                batch = await self._read(limit)
                if batch.values:
                    return self._advance(self._take(batch, max_bytes))
                return None
            elif self.cursor < feed.head:
                feed.schedule_fill()  # values on their way or lost: read once
            self.wake.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return StreamValues()
            try:
                async with asyncio.timeout(remaining):  # no task per wait
                    await self.wake.wait()
            except TimeoutError:
                return StreamValues()
        return None

    async def _read(self, limit: int) -> Batch:
        feed = self.feed

        batch = await run_db(
            streams.read_after, feed.workflow_id, feed.key, self.cursor, limit
        )
        if not batch.exists and not feed.known:
            raise WorkflowNotFound(
                f"No workflow has id {feed.workflow_id!r}",
                metadata={"workflow_id": feed.workflow_id},
            )
        feed.learn(batch)
        return batch

    def _take(self, batch: Batch, max_bytes: int) -> StreamValues:
        found = self.feed.after(self.cursor, len(batch.values), max_bytes)
        if not found:  # the feed did not keep them (its bounds)
            values = [StreamValue(offset, data) for offset, data in batch.values]
            found = StreamValues(_cut(values, max_bytes))
        return found

    def _advance(self, found: StreamValues) -> StreamValues:
        self.cursor = found[-1].offset
        return found

    def close(self) -> None:
        """Stop following (idempotent)."""
        if not self.closed:
            self.closed = True
            self.wake.set()
            self.hub.detach(self.feed, self)


class StreamHub(LoopHub):
    """The announcements of one event loop's feeds: layer, local commits, checks."""

    channel_prefix = "rivet.streams"
    # A commit's values go to every reader in one turn of the loop: read the
    # announcements aside, or they queue up behind that turn.
    receive_aside = True

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.feeds: dict[tuple[str, str], StreamFeed] = {}
        self.workflows: collections.Counter[str] = collections.Counter()
        streams.add_listener(self._offer_threadsafe)

    def attach(self, workflow_id: str, key: str, reader: StreamReader) -> StreamFeed:
        """Add a reader to its stream's feed (joining the workflow's group)."""
        feed = self.feeds.get((workflow_id, key))
        if feed is None:
            feed = StreamFeed(self, workflow_id, key, reader.cursor)
            self.feeds[(workflow_id, key)] = feed
            self.workflows[workflow_id] += 1
            if self.workflows[workflow_id] == 1 and self.layer is not None:
                self.spawn(self._group("group_add", workflow_id))
        feed.readers.add(reader)
        self.start()
        return feed

    def detach(self, feed: StreamFeed, reader: StreamReader) -> None:
        """Remove a reader; a feed without readers is dropped."""
        feed.readers.discard(reader)
        key = (feed.workflow_id, feed.key)
        if feed.readers or self.feeds.get(key) is not feed:
            return
        del self.feeds[key]
        feed.close()
        self.workflows[feed.workflow_id] -= 1
        if self.workflows[feed.workflow_id] <= 0:
            del self.workflows[feed.workflow_id]
            if self.layer is not None:
                self.spawn(self._group("group_discard", feed.workflow_id))
        if not self.feeds:
            self.stop()

    def stopping(self) -> None:
        """Stop hearing this process's commits (no reader left)."""
        streams.remove_listener(self._offer_threadsafe)

    def interval(self) -> float:
        """Return the seconds between two checks of the heads."""
        if self.layer is None:
            return POLL_WITHOUT_LAYER
        return float(rivet_settings.EVENT_CHECK_INTERVAL)

    async def _group(self, op: str, workflow_id: str) -> None:
        try:
            await getattr(self.layer, op)(
                events.workflow_group(workflow_id), self.channel
            )
        except Exception as exc:  # the check reads the heads anyway
            events.layer_health.failed(op, exc)

    # -- announcements -------------------------------------------------------------
    def _offer_threadsafe(
        self, workflow_id: str, appended: list[Appended], ended: bool
    ) -> None:
        if workflow_id not in self.workflows or self.stopped:
            return
        items = [(a.key, a.first, a.values, a.length, a.closed) for a in appended]
        try:
            self.loop.call_soon_threadsafe(self._offer, workflow_id, items, ended)
        except RuntimeError:  # the loop is closed: forget it
            streams.remove_listener(self._offer_threadsafe)

    def _offer(self, workflow_id: str, items: list[Any], ended: bool) -> None:
        for key, first, values, length, closed in items:
            feed = self.feeds.get((workflow_id, key))
            if feed is not None:
                feed.offer(int(first), values, int(length), bool(closed))
        if ended:
            for (owner, _), feed in self.feeds.items():
                if owner == workflow_id:
                    feed.ended = True
                    feed.wake()

    def handle(self, message: dict[str, Any]) -> None:
        """Take one channel-layer message (``rivet.stream``)."""
        if message.get("type") != streams.STREAM_MESSAGE:
            return
        try:
            workflow_id = str(message["workflow"])
            items = [
                (
                    str(k),
                    int(f),
                    None if v is None else [bytes(x) for x in v],
                    int(n),
                    c,
                )
                for k, f, v, n, c in message.get("streams") or []
            ]
        except (KeyError, TypeError, ValueError):
            logger.warning("malformed stream message dropped")
            return
        self._offer(workflow_id, items, bool(message.get("ended")))

    async def recover(self) -> None:
        """Rejoin the groups after an outage (Redis may have forgotten them)."""
        for workflow_id in list(self.workflows):
            await self._group("group_add", workflow_id)

    # -- the check -----------------------------------------------------------------
    async def check(self) -> None:
        """Read the heads of the followed streams; wake the readers behind."""
        workflow_ids = list(self.workflows)
        if not workflow_ids:
            return
        try:
            found = await run_db(streams.heads, workflow_ids)
            done = await run_db(streams.finished, workflow_ids)
        except Exception:  # the database is down: the next check retries
            logger.debug("reading stream heads failed", exc_info=True)
            return
        for (workflow_id, key), feed in list(self.feeds.items()):
            length, closed = found.get((workflow_id, key), (0, False))
            feed.offer(length + 1, None, length, closed)
            if workflow_id in done:
                feed.ended = True
                feed.wake()


def current_hub() -> StreamHub:
    """Return the stream hub of the running event loop (started on first use)."""
    return current(StreamHub)
