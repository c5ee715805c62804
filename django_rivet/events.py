"""Delivery of broadcasts and connection messages through the channel layer.

The runtime writes events to the log inside the invocation's transaction and
calls these helpers only after commit. Messages carry CBOR-encoded arguments
so any CBOR-serializable value survives channels_redis' msgpack transport.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from asgiref.sync import async_to_sync

from .conf import rivet_settings

logger = logging.getLogger("django_rivet.events")

__all__ = [
    "EVENT_MESSAGE",
    "SEND_MESSAGE",
    "DISCONNECT_MESSAGE",
    "actor_group",
    "get_layer",
    "publish",
    "send_to_channel",
]

# Channel-layer message types, dispatched to consumer methods by channels
# ("rivet.event" -> RivetConsumer.rivet_event).
EVENT_MESSAGE = "rivet.event"
SEND_MESSAGE = "rivet.send"
DISCONNECT_MESSAGE = "rivet.disconnect"


def actor_group(actor_id: uuid.UUID | str) -> str:
    """Return the channel-layer group of an actor's connections."""
    # channels_redis accepts ASCII alphanumerics, '-', '_' and '.', < 100 chars.
    hex_id = (
        actor_id.hex if isinstance(actor_id, uuid.UUID) else uuid.UUID(actor_id).hex
    )
    return f"rivet.actor.{hex_id}"


def get_layer() -> Any:
    """Return the configured channel layer, or ``None`` when there is none."""
    from channels.layers import get_channel_layer

    try:
        return get_channel_layer(rivet_settings.CHANNEL_LAYER)
    except Exception:  # no CHANNEL_LAYERS, or a broken alias: checks report it
        logger.debug("no channel layer alias=%s", rivet_settings.CHANNEL_LAYER)
        return None


def publish(actor_id: uuid.UUID, events: list[dict[str, Any]]) -> None:
    """Send committed events to the actor's group (all processes)."""
    layer = get_layer()
    if layer is None:
        return
    group = actor_group(actor_id)

    async def send_all() -> None:
        for event in events:
            await layer.group_send(group, {"type": EVENT_MESSAGE, **event})

    async_to_sync(send_all)()


def send_to_channel(channel_name: str, message: dict[str, Any]) -> None:
    """Send one message to one consumer (a connection in any process)."""
    layer = get_layer()
    if layer is None:
        return
    async_to_sync(layer.send)(channel_name, message)
