"""Remote Python client for django-rivet (docs/protocol.md): HTTP and WebSocket.

Needs the ``client`` extra (``httpx``, ``websockets``); imports nothing from
Django, so scripts and other services can use it without settings::

    from django_rivet.client import Client

    client = Client("http://localhost:8000/rivet")
    room = client.actor("chatRoom", ["acme", "general"])
    room.call("send_message", "bob", "hi")             # HTTP, sync
    await room.acall("send_message", "bob", "hi")      # HTTP, async

    conn = await room.connect({"name": "bob"})         # WebSocket, async
    unsubscribe = conn.on("newMessage", print)
    await conn.call("send_message", "hi")
    await conn.close()

    with room.connect_sync({"name": "bob"}) as conn:   # WebSocket, sync
        conn.call("send_message", "hi")

Errors are raised as :class:`~django_rivet.RivetError` subclasses rebuilt
from the wire (``ActorNotFound``, ``UserError``...). A WebSocket connection
reconnects by itself after a network failure, resuming its event stream with
``since`` so no event is missed or repeated; calls in flight when the socket
dropped fail with :class:`ConnectionLost`.
"""

from .base import ConnectionLost, HTTPError
from .connection import AsyncConnection, Connection
from .http import ActorClient, Client

__all__ = [
    "ActorClient",
    "AsyncConnection",
    "Client",
    "Connection",
    "ConnectionLost",
    "HTTPError",
]
