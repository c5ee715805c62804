"""One hub per event loop: a channel-layer channel, its reader, a periodic check.

What the transport's event feeds (``transport/feeds.py``: actors' events)
and the workflow streams' feeds (``workflows/stream_feeds.py``) share. A
:class:`LoopHub` subclass owns one channel of its own on the channel layer
(its messages never queue behind a connection's), reads it for as long as
the hub has something to follow (:meth:`LoopHub.handle` takes each
message), and runs :meth:`LoopHub.check` every :meth:`LoopHub.interval`
seconds, to find what the layer lost. :func:`current` returns the running
loop's hub of a class, started on first use; a hub that stopped (nothing
left to follow) is replaced by a new one when needed.

A hub with :attr:`LoopHub.receive_aside` reads its channel on the
publishing loop's thread instead (:func:`.layer.receive_aside`) and takes
what arrived meanwhile in one turn of its own loop, so messages do not
queue up in the layer while the loop is busy with what the last one brought.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .layer import channel_receive, get_layer, receive_aside

__all__ = ["LoopHub", "current", "run_once"]

H = TypeVar("H", bound="LoopHub")


class LoopHub:
    """The channel-layer side of one event loop's feeds of one kind."""

    #: The start of the hub's channel name.
    channel_prefix = "rivet.hub"
    #: Read the channel on the publishing loop's thread (see the module);
    #: for hubs whose :meth:`before_receive` does nothing.
    receive_aside = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.layer = get_layer()
        self.channel = f"{self.channel_prefix}.{uuid.uuid4().hex}"
        self.stopped = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._receiver: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None
        self._stop_reading: Callable[[], object] | None = None
        self._inbox: list[dict[str, Any]] = []
        self._inbox_lock = threading.Lock()

    # -- what a kind of hub supplies ---------------------------------------------------
    def handle(self, message: dict[str, Any]) -> None:
        """Take one message of the hub's channel."""
        raise NotImplementedError

    async def check(self) -> None:
        """Look in the database for what the layer did not bring."""
        raise NotImplementedError

    def interval(self) -> float:
        """Return the seconds between two checks."""
        raise NotImplementedError

    async def before_receive(self) -> None:
        """Run before each read of the channel (e.g. rejoin groups)."""

    async def recover(self) -> None:
        """Run after the layer failed, before the read is retried."""

    def stopping(self) -> None:
        """Release what the hub holds (listeners) as it stops."""

    # -- the machinery -----------------------------------------------------------------
    def start(self) -> None:
        """Start the check and the channel's reader (once; idempotent)."""
        if self._checker is None:
            self._checker = self.loop.create_task(self._check_loop())
            if self.layer is not None and self.receive_aside:
                self._stop_reading = receive_aside(
                    self.channel, self._arrived, self._recover_aside
                )
            elif self.layer is not None:
                self._receiver = self.loop.create_task(self._receive_loop())

    def stop(self) -> None:
        """Stop the hub's tasks (nothing left to follow)."""
        self.stopped = True
        self.stopping()
        with _lock:
            if _hubs.get((type(self), self.loop)) is self:
                del _hubs[(type(self), self.loop)]
        for task in (self._receiver, self._checker):
            if task is not None:
                task.cancel()
        if self._stop_reading is not None:
            self._stop_reading()

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` in a task the hub keeps until it is done."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _receive_loop(self) -> None:
        while True:
            await self.before_receive()
            message = await channel_receive(self.layer, self.channel, self.recover)
            self.handle(message)

    # -- reading aside (on the publishing loop's thread) ----------------------------
    def _arrived(self, message: dict[str, Any]) -> None:
        with self._inbox_lock:
            self._inbox.append(message)
            if len(self._inbox) > 1:
                return  # the loop has yet to take the ones before
        try:
            self.loop.call_soon_threadsafe(self._take_inbox)
        except RuntimeError:  # the hub's loop is closed: stop reading
            if self._stop_reading is not None:
                self._stop_reading()

    def _take_inbox(self) -> None:
        with self._inbox_lock:
            messages, self._inbox = self._inbox, []
        for message in messages:
            if not self.stopped:
                self.handle(message)

    async def _recover_aside(self) -> None:
        # recover() belongs to the hub's loop: run it there, and wait.
        if self.stopped or self.loop.is_closed():
            raise asyncio.CancelledError()
        done = asyncio.run_coroutine_threadsafe(self.recover(), self.loop)
        await asyncio.wrap_future(done)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval())
            await self.check()


_hubs: dict[tuple[type, asyncio.AbstractEventLoop], LoopHub] = {}
_lock = threading.Lock()


def current(kind: type[H]) -> H:
    """Return the running loop's hub of class ``kind`` (started on first use)."""
    loop = asyncio.get_running_loop()
    with _lock:
        hub = _hubs.get((kind, loop))
        if hub is None or hub.stopped:
            hub = _hubs[(kind, loop)] = kind(loop)
    return hub  # type: ignore[return-value]


def run_once(
    loop: asyncio.AbstractEventLoop,
    task: asyncio.Task[None] | None,
    work: Callable[[], Awaitable[None]],
    delay: float = 0.0,
) -> asyncio.Task[None]:
    """Return ``task`` while it runs, else a new task: ``work()`` after ``delay``.

    A feed's fill: one read of what it misses, for all its followers.
    """
    if task is not None and not task.done():
        return task

    async def later() -> None:
        if delay:
            await asyncio.sleep(delay)
        await work()

    return loop.create_task(later())
