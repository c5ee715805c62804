"""What one connection follows of its actor's events: its subscriptions.

:class:`Subscriptions` belongs to one :class:`~.sockets.ConnectionConsumer`
(both flavours) and is the :class:`~.feeds.EventSink` of the connection's
:class:`~.delivery.Stream`, the sender that follows the process's feed of the
actor from the seq the connection was admitted at:

* **Subscribing** asks ``can_subscribe`` when the class defines it, within
  ``MAX_SUBSCRIPTIONS``; ``*`` subscribes to every event (live ones only).
* **Replay after** ``since``: at admission, of the names the connect request
  subscribed to; later, once per name subscribed afterwards -- under the
  stream's lock, so live delivery waits and the cursor stays put.
* **The names are saved** on the connection's row, a burst of changes
  collapsed into one UPDATE.

Frames are encoded and sent by the consumer (:class:`Socket`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Protocol

from channels.db import database_sync_to_async

from ..actors import registry
from ..actors.calls import Origin
from ..actors.connections import WILDCARD, Subscribe, save_subscriptions
from ..actors.lanes import ainvoke
from ..actors.rows import ActorRef
from ..events import LoggedEvent
from ..exceptions import InternalError, MalformedRequest, RequestTooLarge, RivetError
from .delivery import Stream
from .parsing import MAX_SUBSCRIPTIONS

logger = logging.getLogger("django_rivet.transport")

__all__ = ["Socket", "Subscriptions"]


class Socket(Protocol):
    """What the subscriptions need from their connection (the consumer)."""

    #: True once the connection is closing: nothing more is sent or saved.
    closed: bool

    def event_frame(self, name: str, seq: int | None, args: bytes) -> bytes:
        """Encode an event's frame; raise a ``RivetError`` if it cannot be sent."""

    async def send_frame(self, data: bytes) -> None:
        """Send an encoded frame."""

    async def send_error_frame(self, error: RivetError, action_id: Any = None) -> None:
        """Send an error frame."""

    async def event_undeliverable(self, error: RivetError) -> None:
        """Tell the client an event could not be sent to it."""


class Subscriptions:
    """The event names one connection is subscribed to, and their stream."""

    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.names: set[str] = set()
        self.wildcard = False
        self.since: int | None = None
        self.replayed: set[str] = set()
        self.stream: Stream | None = None
        #: Names the cache of encoded event frames (flavour and encoding).
        self.frame_key = ""
        self._ref: ActorRef | None = None
        self._origin: Origin | None = None
        self._conn_id: uuid.UUID | None = None
        self._guarded: type[Any] | None = None
        self._save_task: asyncio.Task[None] | None = None
        self._dirty = False

    def follow(
        self,
        ref: ActorRef,
        origin: Origin,
        conn_id: uuid.UUID,
        head: int,
        admitted: set[str],
        since: int | None,
        frame_key: str,
    ) -> None:
        """Take the admitted subscriptions and join the feed of the actor.

        The stream joins at once, so nothing committed after the admission
        (``head``) can slip past it; it sends once :meth:`start` is called.
        """
        assert ref.actor_id is not None
        self._ref, self._origin, self._conn_id = ref, origin, conn_id
        self.since = since
        self.wildcard = WILDCARD in admitted
        self.names = admitted - {WILDCARD}
        self.frame_key = frame_key
        self.stream = Stream(ref.actor_id, head, self)

    async def start(self) -> None:
        """Replay what the connect request asked for after ``since``, then go live."""
        assert self.stream is not None
        if self.since is not None and (self.wildcard or self.names):
            self.replayed.update(self.names)
            await self.stream.replay(self.since, self.event_names())
        self.stream.start()

    async def subscribe(self, event: str) -> None:
        """Subscribe after ``can_subscribe`` allowed it (``*``: every event)."""
        if event in self.names or (event == WILDCARD and self.wildcard):
            return
        if len(self.names) >= MAX_SUBSCRIPTIONS:
            raise MalformedRequest(f"At most {MAX_SUBSCRIPTIONS} subscriptions")
        assert self._ref is not None and self._origin is not None
        assert self.stream is not None
        if self._definition().overrides("can_subscribe"):
            refusal = await ainvoke(self._ref, Subscribe(event), self._origin)
            if refusal is not None:
                raise refusal
        async with self.stream.lock:  # live delivery waits: a stable cursor
            if event == WILDCARD:
                # Live events only: a replay of every name would repeat the
                # ones already delivered for this connection's names.
                self.wildcard = True
            else:
                if self.since is not None and event not in self.replayed:
                    # Missed events of this name, up to where live delivery is.
                    self.replayed.add(event)
                    if not self.wildcard:
                        await self.stream.replay(self.since, [event])
                self.names.add(event)
        self._save()

    def unsubscribe(self, event: str) -> None:
        """Stop sending ``event`` (``*``: the subscription to every event)."""
        if event == WILDCARD and self.wildcard:
            self.wildcard = False
        elif event in self.names:
            self.names.discard(event)
        else:
            return
        self._save()

    async def stop(self) -> None:
        """Stop sending events (the connection is closing)."""
        if self.stream is not None:
            await self.stream.close()

    async def close(self) -> None:
        """Let the last save finish, then stop sending events."""
        if self._save_task is not None:
            await asyncio.gather(self._save_task, return_exceptions=True)
        await self.stop()

    def _definition(self) -> type[Any]:
        if self._guarded is None:
            assert self._ref is not None and self._ref.name is not None
            self._guarded = registry.get(self._ref.name)
        return self._guarded

    def _save(self) -> None:
        # Bursts of subscribe frames (a client resubscribing after a
        # reconnect) collapse into one UPDATE.
        self._dirty = True
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.create_task(self._write())

    async def _write(self) -> None:
        while self._dirty and not self.socket.closed:
            self._dirty = False
            names = sorted(self.names) + ([WILDCARD] if self.wildcard else [])
            assert self._conn_id is not None
            try:
                await database_sync_to_async(save_subscriptions)(self._conn_id, names)
            except Exception:
                logger.exception(
                    "saving subscriptions failed conn_id=%s", self._conn_id
                )

    # -- the EventSink side of self.stream (transport/feeds.py) -------------------
    def wants_event(self, name: str) -> bool:
        """Whether this connection is subscribed to ``name``."""
        return self.wildcard or name in self.names

    def event_names(self) -> list[str] | None:
        """The subscribed names, for log queries (``None``: all)."""
        return None if self.wildcard else sorted(self.names)

    def encode_logged(self, event: LoggedEvent) -> bytes:
        """Encode a logged event's frame; an oversized one becomes an error."""
        return self.socket.event_frame(event.name, event.seq, event.args)

    async def send_data(self, data: bytes) -> None:
        """Send an encoded frame (the stream's events)."""
        await self.socket.send_frame(data)

    async def send_error(self, error: RivetError) -> None:
        """Tell the client about an event it cannot get (the stream's errors)."""
        if isinstance(error, RequestTooLarge | InternalError):
            await self.socket.event_undeliverable(error)
        else:
            await self.socket.send_error_frame(error)
