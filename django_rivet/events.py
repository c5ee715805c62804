"""The event log and its delivery: write, read, truncate, publish.

Every broadcast gets a per-actor increasing ``seq`` and a row in
``ActorEvent``, written by :func:`append` in the invoking transaction; the
log keeps the last ``EVENT_LOG_SIZE`` events per actor, so a client that
reconnects with ``?since=<seq>`` is replayed what it missed (:func:`read`,
:func:`window`). After commit the runtime hands the new events to
:func:`publish`, which sends them through the channel layer to the actor's
group in every process; connection-only messages go through
:func:`send_to_channel`. Messages carry CBOR-encoded arguments so any
CBOR-serializable value survives channels_redis' msgpack transport.

This module sits below the actor runtime and the transport, which both use
it; it imports only the storage and foundation layers.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import Min

from . import clock
from .conf import rivet_settings
from .models import ActorEvent

logger = logging.getLogger("django_rivet.events")

__all__ = [
    "DISCONNECT_MESSAGE",
    "EVENT_MESSAGE",
    "READ_BATCH",
    "SEND_MESSAGE",
    "LoggedEvent",
    "actor_group",
    "append",
    "get_layer",
    "publish",
    "read",
    "send_to_channel",
    "window",
]

# Channel-layer message types, dispatched to consumer methods by channels
# ("rivet.event" -> RivetConsumer.rivet_event).
EVENT_MESSAGE = "rivet.event"
SEND_MESSAGE = "rivet.send"
DISCONNECT_MESSAGE = "rivet.disconnect"

# Events read from the log per query (replays and gap repairs).
READ_BATCH = 500


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One committed broadcast: its seq, name and CBOR-encoded arguments."""

    seq: int
    name: str
    args: bytes

    def message(self) -> dict[str, Any]:
        """Return the channel-layer message that delivers this event."""
        return {
            "type": EVENT_MESSAGE,
            "seq": self.seq,
            "name": self.name,
            "args": self.args,
        }


# -- writing (inside the invoking transaction) ------------------------------------
def append(
    actor_id: uuid.UUID, after_seq: int, events: list[tuple[str, bytes]]
) -> list[LoggedEvent]:
    """Log ``events`` with seqs ``after_seq + 1 ...`` and trim the log.

    Runs in the invocation's transaction, with the actor row locked: seqs
    are gap-free and commit in order.
    """
    now = clock.now_datetime()
    logged = [
        LoggedEvent(after_seq + 1 + index, name, args)
        for index, (name, args) in enumerate(events)
    ]
    ActorEvent.objects.bulk_create(
        [
            ActorEvent(
                actor_id=actor_id,
                seq=event.seq,
                name=event.name,
                args=event.args,
                created_at=now,
            )
            for event in logged
        ]
    )
    last = logged[-1].seq
    keep = max(int(rivet_settings.EVENT_LOG_SIZE), 0)
    if last > keep:
        ActorEvent.objects.filter(actor_id=actor_id, seq__lte=last - keep).delete()
    return logged


# -- reading ---------------------------------------------------------------------------
def read(
    actor_id: uuid.UUID,
    after: int,
    before: int | None = None,
    names: list[str] | None = None,
    limit: int = READ_BATCH,
) -> list[LoggedEvent]:
    """Read logged events with ``after < seq < before``, in seq order."""
    rows = ActorEvent.objects.filter(actor_id=actor_id, seq__gt=after)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    if names is not None:
        rows = rows.filter(name__in=names)
    found = rows.order_by("seq").values_list("seq", "name", "args")[:limit]
    return [LoggedEvent(seq, name, bytes(args)) for seq, name, args in found]


def window(actor_id: uuid.UUID, since: int, head: int) -> tuple[int | None, bool]:
    """Return ``(oldest seq kept, truncated)`` for a replay after ``since``.

    ``head`` is the actor's last committed seq. Truncated means events
    after ``since`` were already dropped from the log (or ``since`` is from
    an earlier life of the actor: it saw seqs this one never issued).
    """
    oldest = ActorEvent.objects.filter(actor_id=actor_id).aggregate(m=Min("seq"))["m"]
    if since > head:
        return oldest, True
    if since == head:
        return oldest, False
    return oldest, oldest is None or oldest > since + 1


# -- delivery through the channel layer (after commit) ----------------------------
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


def publish(actor_id: uuid.UUID, events: list[LoggedEvent]) -> None:
    """Send committed events to the actor's group (all processes)."""
    layer = get_layer()
    if layer is None:
        return
    group = actor_group(actor_id)

    async def send_all() -> None:
        for event in events:
            await layer.group_send(group, event.message())

    async_to_sync(send_all)()


def send_to_channel(channel_name: str, message: dict[str, Any]) -> None:
    """Send one message to one consumer (a connection in any process)."""
    layer = get_layer()
    if layer is None:
        return
    async_to_sync(layer.send)(channel_name, message)
