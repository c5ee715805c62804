"""Liveness of connections: the heartbeat's refresh and the sweep of the dead.

A process that crashes (``kill -9``, OOM, power loss) cannot run
:class:`~django_rivet.actors.connections.Disconnect` for its sockets. Each
process therefore refreshes ``last_seen_at`` of the connections it holds
every ``SWEEP_INTERVAL`` seconds (:func:`touch_connections`, called by the
transport's heartbeat), and :func:`sweep_stale_connections` -- run
periodically by the sweeper -- removes rows not refreshed for
:func:`stale_after` seconds, running ``on_disconnect`` best effort.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from .. import clock, events
from ..conf import rivet_settings
from ..exceptions import ActorNotFound
from ..models import Connection, db, sql
from .connections import Disconnect
from .rows import ActorRef
from .spine import invoke

logger = logging.getLogger("django_rivet.actors")

__all__ = [
    "heartbeat_interval",
    "stale_after",
    "sweep_stale_connections",
    "touch_connections",
]

# A process missing this many heartbeats in a row is taken for dead.
STALE_HEARTBEATS = 6


def heartbeat_interval() -> float:
    """Return the seconds between two refreshes of ``last_seen_at``."""
    return rivet_settings.SWEEP_INTERVAL


def stale_after() -> float:
    """Return the age (seconds) after which a connection counts as dead."""
    return STALE_HEARTBEATS * heartbeat_interval()


# -- liveness (the transport's heartbeat calls this) ---------------------------
def touch_connections(conn_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """Refresh ``last_seen_at`` of these connections; return those with no row."""
    ids = list(conn_ids)
    missing: set[uuid.UUID] = set()
    now = clock.now_datetime()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = Connection.objects.filter(pk__in=chunk)
        existing = set(rows.values_list("pk", flat=True))
        missing.update(set(chunk) - existing)
        if not sql.dialect(db.connection()).skip_locked:
            rows.update(last_seen_at=now)
            continue
        with db.atomic():
            # Skip rows an invocation holds locked (it is updating their
            # state): waiting for them could deadlock against its lock order,
            # and a connection busy in an invocation is alive anyway.
            locked_free = list(
                rows.select_for_update(skip_locked=True)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            Connection.objects.filter(pk__in=locked_free).update(last_seen_at=now)
    return missing


# -- the sweep ------------------------------------------------------------------
def _delete_if_stale(conn_id: uuid.UUID, cutoff: datetime) -> bool:
    deleted, _ = Connection.objects.filter(pk=conn_id, last_seen_at__lt=cutoff).delete()
    return bool(deleted)


def sweep_stale_connections(max_age: float | None = None, limit: int = 1000) -> int:
    """Remove connections whose process stopped heartbeating; return how many.

    For each row older than ``max_age`` seconds (default :func:`stale_after`)
    this runs :class:`Disconnect` through the runtime, so ``on_disconnect``
    runs one at a time with the actor's other work; a failing hook is logged
    and the row removed anyway. If the holding process is in fact alive, it
    is told to close the socket so its client reconnects cleanly. Safe to run
    concurrently from several sweepers.
    """
    age = stale_after() if max_age is None else float(max_age)
    cutoff = clock.now_datetime() - timedelta(seconds=age)
    stale = list(
        Connection.objects.filter(last_seen_at__lt=cutoff)
        .order_by("last_seen_at")
        .values_list("pk", "actor_id", "actor__name", "channel_name")[:limit]
    )
    removed = 0
    for conn_id, actor_id, name, channel_name in stale:
        try:
            done = invoke(
                ActorRef(name=name, actor_id=actor_id), Disconnect(conn_id, cutoff)
            )
        except ActorNotFound:
            # Actor gone or its class no longer registered: no hook to run.
            done = _delete_if_stale(conn_id, cutoff)
        except Exception:
            logger.exception(
                "stale connection sweep failed conn_id=%s actor_id=%s",
                conn_id,
                actor_id,
            )
            done = _delete_if_stale(conn_id, cutoff)
        if done:
            removed += 1
            logger.info(
                "removed stale connection conn_id=%s actor_id=%s", conn_id, actor_id
            )
            try:
                events.send_to_channel(
                    channel_name, {"type": events.DISCONNECT_MESSAGE, "reason": "stale"}
                )
            except Exception:  # the layer is down: the socket is likely gone too
                logger.warning("could not notify channel=%s", channel_name)
    return removed
