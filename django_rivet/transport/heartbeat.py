"""The sockets' side of a connection's liveness: the heartbeat and the cleanup.

The ``Connection`` row lives in :mod:`django_rivet.actors.connections`; this
module keeps it alive while this process holds the socket, and removes it
when the socket ends. Liveness is per connection, not per process: the
heartbeat refreshes only connections whose consumer task is still running,
so the row of a consumer that died is swept while its process lives on; and
a consumer whose row vanished (swept, or its actor destroyed) is closed even
if the message saying so was lost.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..actors.connections import SERVER_ID, Disconnect
from ..actors.lanes import ainvoke
from ..actors.liveness import heartbeat_interval, touch_connections
from ..actors.rows import ActorRef
from ..exceptions import ActorNotFound
from ..models.db import run_db

logger = logging.getLogger("django_rivet.transport")

__all__ = ["Heartbeat", "disconnect_cleanup", "heartbeat"]

# Tries of a closed connection's cleanup (0.5 + 1 + 2 + 4 s apart).
CLEANUP_ATTEMPTS = 5


@dataclass(slots=True)
class _Held:
    """A connection of this process: its actor, consumer task and close hook."""

    actor_id: uuid.UUID | None
    task: asyncio.Task[Any] | None
    gone: Callable[[], None] | None


class Heartbeat:
    """Refresh the rows of this process's live connections while it holds any.

    One background task per event loop; it starts with the first connection
    and stops with the last, so idle processes and test loops leave nothing
    running. A connection counts as live while the consumer task that added
    it runs: the row of a consumer that ended without its cleanup stops
    being refreshed (and its cleanup is run here), so it cannot outlive it.
    """

    def __init__(self) -> None:
        self._held: dict[uuid.UUID, _Held] = {}
        self._task: asyncio.Task[None] | None = None

    def add(
        self,
        conn_id: uuid.UUID,
        actor_id: uuid.UUID | None = None,
        gone: Callable[[], None] | None = None,
    ) -> None:
        """Track a connection accepted by the running consumer task.

        ``gone`` is called (on the loop) if the connection's row disappears
        while the consumer runs.
        """
        self._held[conn_id] = _Held(actor_id, asyncio.current_task(), gone)
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name="rivet-heartbeat")

    def discard(self, conn_id: uuid.UUID) -> None:
        """Stop tracking a connection; stop beating after the last one."""
        self._held.pop(conn_id, None)
        task = self._task
        if not self._held and task is not None:
            self._task = None
            try:
                if task.get_loop() is asyncio.get_running_loop():
                    task.cancel()
            except RuntimeError:  # no running loop
                pass

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, conn_id: object) -> bool:
        return conn_id in self._held

    async def _run(self) -> None:
        while self._held:
            await asyncio.sleep(heartbeat_interval())
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("connection heartbeat failed server=%s", SERVER_ID)

    async def beat(self) -> None:
        """Refresh live connections; clean up dead ones; close orphaned ones."""
        alive: list[uuid.UUID] = []
        for conn_id, held in list(self._held.items()):
            if held.task is not None and held.task.done():
                # The consumer ended without its cleanup (it always tries).
                logger.warning("connection outlived its consumer conn_id=%s", conn_id)
                self._held.pop(conn_id, None)
                if held.actor_id is not None:
                    asyncio.get_running_loop().create_task(
                        disconnect_cleanup(ActorRef(actor_id=held.actor_id), conn_id)
                    )
            else:
                alive.append(conn_id)
        if not alive:
            return
        missing = await run_db(touch_connections, alive)
        for conn_id in missing:
            still = self._held.get(conn_id)
            if still is not None and still.gone is not None:
                logger.info("connection row gone, closing conn_id=%s", conn_id)
                still.gone()


heartbeat = Heartbeat()


async def disconnect_cleanup(ref: ActorRef, conn_id: uuid.UUID) -> None:
    """Remove a closed connection's row and run ``on_disconnect``.

    Retried for a few seconds through a database outage; if it still fails
    the row is no longer refreshed, so the sweeper removes it.
    """
    heartbeat.discard(conn_id)
    delay = 0.5
    for attempt in range(CLEANUP_ATTEMPTS):
        try:
            await ainvoke(ref, Disconnect(conn_id))
            return
        except ActorNotFound:
            return  # destroyed: its connections went with it
        except Exception:
            if attempt == CLEANUP_ATTEMPTS - 1:
                logger.exception(
                    "disconnect failed actor_id=%s conn_id=%s; the sweeper will "
                    "remove the connection",
                    ref.actor_id,
                    conn_id,
                )
                return
            logger.warning(
                "disconnect failed actor_id=%s conn_id=%s, retrying",
                ref.actor_id,
                conn_id,
            )
            await asyncio.sleep(delay)
            delay *= 2
