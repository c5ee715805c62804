"""What both WebSocket consumers share: serving a socket that outlives hiccups.

:class:`SocketConsumer` is the base of the own protocol's consumer
(:mod:`.consumer`) and the RivetKit flavour's (:mod:`.rivetkit.consumer`).
It replaces Channels' serving loop in two ways: a failing channel-layer read
(redis-py's read timeout, a Redis restart) is retried instead of ending the
consumer -- which daphne would report to the client as a 1011 close,
skipping ``websocket_disconnect`` -- and the connection's cleanup runs on
every exit path. It also runs Django's connection rules at the start and end
of a connection, as Django does per request, instead of before every frame.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.consumer import get_handler_name
from channels.db import aclose_old_connections
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

from ..conf import rivet_settings
from .delivery import Pressure
from .feeds import channel_receive

logger = logging.getLogger("django_rivet.transport")

__all__ = ["CONNECTION_EDGES", "SocketConsumer"]

# Messages around which Django's connection rules run (see dispatch()).
CONNECTION_EDGES = frozenset({"websocket.connect", "websocket.disconnect"})


class SocketConsumer(AsyncWebsocketConsumer):
    """Serve one socket: resilient reads, flow control, cleanup on every exit."""

    closed: bool
    conn_id: Any
    pressure: Pressure | None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve the socket; clean the connection up however this ends."""
        self.scope = scope
        # RIVET["CHANNEL_LAYER"]: the layer events.send_to_channel uses.
        self.channel_layer = get_channel_layer(rivet_settings.CHANNEL_LAYER)
        self.base_send = send
        self.pressure = Pressure(send)
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            layer, name = self.channel_layer, self.channel_name
            sources.append(lambda: channel_receive(layer, name))
        try:
            await await_many_dispatch(sources, self.dispatch)
        except StopConsumer:
            pass
        except Exception:
            logger.exception("%s failed conn_id=%s", type(self).__name__, self.conn_id)
            await self.close_internal()
        finally:
            self.closed = True
            self.pressure.close()
            await self._run_cleanup()

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Route a message to its handler.

        Channels closes stale DB connections before every message. Here that
        happens at the start and end of a connection; in between a consumer
        reaches the database only through ``ainvoke`` (whose threads close
        old connections around every job) and ``database_sync_to_async``
        (which does the same), so the per-frame thread hop is skipped.
        """
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        if message["type"] in CONNECTION_EDGES:
            await aclose_old_connections()
        await handler(message)

    async def close_internal(self) -> None:
        """Close the socket after an unexpected error (the protocol's 4500)."""
        raise NotImplementedError

    async def _run_cleanup(self) -> None:
        raise NotImplementedError
