"""The event log and its delivery: write, read, truncate, publish.

Every broadcast gets a per-actor increasing ``seq`` and a row in
``ActorEvent``, written by :func:`append` in the invoking transaction; the
log keeps the last ``EVENT_LOG_SIZE`` events per actor, so a client that
reconnects with ``?since=<seq>`` is replayed what it missed (:func:`read`,
:func:`window`). The log is the source of truth for delivery: after commit
the runtime hands the new events to :func:`publish`, which tells this
process's listeners at once (:func:`add_listener`: the transport's event
feeds) and sends one channel-layer message per invocation to the actor's
group, which every web process's feed has joined. A message the layer
drops is not lost: feeds notice the gap (or, for the last events, the head
seq read by their periodic check) and read the events from the log.
Connection-only messages go through :func:`send_to_channel`. Messages carry
CBOR-encoded arguments so any CBOR-serializable value survives
channels_redis' msgpack transport.

A channel layer that fails (misconfigured, or Redis down) is logged once at
ERROR when the failures start and once when they stop, never per message.

This module sits below the actor runtime and the transport, which both use
it; it imports only the storage and foundation layers.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from django.db.models import Min
from django.db.models.functions import Length

from . import clock, observability
from .conf import rivet_settings
from .encoding import cbor_dumps
from .exceptions import EventTooLarge
from .models import Actor, ActorEvent, db

logger = logging.getLogger("django_rivet.events")

__all__ = [
    "DISCONNECT_MESSAGE",
    "EVENTS_MESSAGE",
    "READ_BATCH",
    "SEND_MESSAGE",
    "LayerHealth",
    "LoggedEvent",
    "actor_group",
    "add_listener",
    "append",
    "encode_args",
    "events_message",
    "get_layer",
    "heads",
    "log_statements",
    "layer_health",
    "oldest",
    "publish",
    "read",
    "read_bounded",
    "remove_listener",
    "send_to_channel",
    "serving_loop",
    "window",
]

# Channel-layer message types, dispatched by type: "rivet.events" goes to the
# transport's per-process feeds, the others to one connection's consumer
# ("rivet.send" -> RivetConsumer.rivet_send).
EVENTS_MESSAGE = "rivet.events"
SEND_MESSAGE = "rivet.send"
DISCONNECT_MESSAGE = "rivet.disconnect"

# Events read from the log per query (replays and gap repairs).
READ_BATCH = 500

# Events of one invocation ride in its channel-layer message up to this many
# bytes of arguments; beyond, the message carries only the seqs and feeds
# read the events from the log (keeps Redis messages small).
INLINE_BYTES = 256 * 1024

# A publish waits at most this long for the channel layer (Redis down or
# unreachable): the events are committed and feeds find them in the log.
PUBLISH_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One committed broadcast: its seq, name and CBOR-encoded arguments."""

    seq: int
    name: str
    args: bytes


def encode_args(name: str, args: Iterable[Any]) -> bytes:
    """Encode an event's arguments; refuse them over ``MAX_EVENT_BYTES``.

    Called when the event is broadcast or sent, so the handler that made it
    fails (``actor/event_too_large``, its invocation rolls back) instead of
    every connection failing to deliver it later.
    """
    data = cbor_dumps(list(args))
    limit = int(rivet_settings.MAX_EVENT_BYTES)
    if len(data) > limit:
        raise EventTooLarge(
            f"Event {name[:64]!r} is {len(data)} bytes encoded; the limit is {limit}",
            metadata={"event": name[:64], "size": len(data), "limit": limit},
        )
    return data


# -- writing (inside the invoking transaction) ------------------------------------
def append(
    actor_id: uuid.UUID, after_seq: int, events: list[tuple[str, bytes]]
) -> list[LoggedEvent]:
    """Log ``events`` with seqs ``after_seq + 1 ...`` and trim the log.

    Runs in the invocation's transaction, with the actor row locked: seqs
    are gap-free and commit in order.
    """
    logged, statements = log_statements(actor_id, after_seq, events)
    with db.connection().cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
    return logged


def log_statements(
    actor_id: uuid.UUID, after_seq: int, events: list[tuple[str, bytes]]
) -> tuple[list[LoggedEvent], list[tuple[str, list[Any]]]]:
    """Return the logged events and the statements that log them, in order.

    What :func:`append` runs; the runtime runs them in the statement that
    writes the actor row instead, where the database can (one round trip
    per invocation on PostgreSQL). The statements insert the events and
    delete those beyond the newest ``EVENT_LOG_SIZE``; none of them reads
    what another writes, so they may run as parts of one statement.
    """
    logged = [
        LoggedEvent(after_seq + 1 + index, name, args)
        for index, (name, args) in enumerate(events)
    ]
    connection = db.connection()
    ops = connection.ops
    table = ops.quote_name(ActorEvent._meta.db_table)
    pk = Actor._meta.pk
    assert pk is not None
    actor = pk.get_db_prep_value(actor_id, connection)
    last = logged[-1].seq
    keep = max(int(rivet_settings.EVENT_LOG_SIZE), 0)
    statements: list[tuple[str, list[Any]]] = []
    if keep:
        # Only the newest `keep` of these can outlive the trim below.
        kept = logged[-keep:]
        now = ops.adapt_datetimefield_value(clock.now_datetime())
        columns = ", ".join(
            ops.quote_name(c) for c in ("actor_id", "seq", "name", "args", "created_at")
        )
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(kept))
        params: list[Any] = []
        for event in kept:
            params += [actor, event.seq, event.name, event.args, now]
        statements.append((f"INSERT INTO {table} ({columns}) VALUES {values}", params))
    if last > keep:
        statements.append(
            (
                f"DELETE FROM {table} WHERE {ops.quote_name('actor_id')} = %s "
                f"AND {ops.quote_name('seq')} <= %s",
                [actor, last - keep],
            )
        )
    return logged, statements


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


def read_bounded(
    actor_id: uuid.UUID,
    after: int,
    before: int | None,
    names: list[str] | None,
    limit: int,
    max_bytes: int,
) -> tuple[list[LoggedEvent], bool]:
    """:func:`read` holding at most ``max_bytes`` of arguments (at least one event).

    Returns the events and whether the log may hold more in the range (the
    batch was cut by ``limit`` or ``max_bytes``). The sizes are read first,
    without the arguments, so a reader far behind never holds a whole batch
    of large events at once.
    """
    rows = ActorEvent.objects.filter(actor_id=actor_id, seq__gt=after)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    if names is not None:
        rows = rows.filter(name__in=names)
    sizes = list(
        rows.order_by("seq")
        .annotate(size=Length("args"))
        .values_list("seq", "size")[:limit]
    )
    if not sizes:
        return [], False
    total, last = 0, sizes[0][0]
    for seq, size in sizes:
        total += int(size or 0)
        if total > max_bytes and seq != sizes[0][0]:
            break
        last = seq
    cut = last != sizes[-1][0]
    found = (
        rows.filter(seq__lte=last).order_by("seq").values_list("seq", "name", "args")
    )
    events = [LoggedEvent(seq, name, bytes(args)) for seq, name, args in found]
    return events, cut or len(sizes) >= limit


def oldest(actor_id: uuid.UUID) -> int | None:
    """Return the oldest seq the log still holds for the actor (None: empty)."""
    found: int | None = ActorEvent.objects.filter(actor_id=actor_id).aggregate(
        m=Min("seq")
    )["m"]
    return found


def window(actor_id: uuid.UUID, since: int, head: int) -> tuple[int | None, bool]:
    """Return ``(oldest seq kept, truncated)`` for a replay after ``since``.

    ``head`` is the actor's last committed seq. Truncated means events
    after ``since`` were already dropped from the log (or ``since`` is from
    an earlier life of the actor: it saw seqs this one never issued).
    """
    first = oldest(actor_id)
    if since > head:
        return first, True
    if since == head:
        return first, False
    return first, first is None or first > since + 1


def heads(actor_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Return the last committed seq of each existing actor (one query per 500)."""
    ids = list(actor_ids)
    found: dict[uuid.UUID, int] = {}
    for start in range(0, len(ids), 500):
        found.update(
            Actor.objects.filter(pk__in=ids[start : start + 500]).values_list(
                "pk", "event_seq"
            )
        )
    return found


# -- delivery through the channel layer (after commit) ----------------------------
def actor_group(actor_id: uuid.UUID | str) -> str:
    """Return the channel-layer group of an actor's connections."""
    # channels_redis accepts ASCII alphanumerics, '-', '_' and '.', < 100 chars.
    hex_id = (
        actor_id.hex if isinstance(actor_id, uuid.UUID) else uuid.UUID(actor_id).hex
    )
    return f"rivet.actor.{hex_id}"


class LayerHealth:
    """Log channel-layer failures once when they start and once when they end.

    A misconfigured layer or a Redis outage would otherwise log per message
    (thousands of lines) or, worse, not at all while broadcasts vanish.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0

    def failed(self, what: str, exc: BaseException) -> None:
        """Record a failure; the first of a series is logged at ERROR."""
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            logger.error(
                "channel layer failed op=%s alias=%s error=%r; events still reach "
                "sockets from the event log (within EVENT_CHECK_INTERVAL)",
                what,
                rivet_settings.CHANNEL_LAYER,
                exc,
                exc_info=exc,
            )
        else:
            logger.debug("channel layer failed op=%s error=%r", what, exc)

    def ok(self) -> None:
        """Record a success; ends (and logs the end of) a series of failures."""
        if not self.failures:
            return
        with self._lock:
            failures, self.failures = self.failures, 0
        if failures:
            logger.warning(
                "channel layer works again alias=%s failures=%s",
                rivet_settings.CHANNEL_LAYER,
                failures,
            )


layer_health = LayerHealth()


def get_layer() -> Any:
    """Return the configured channel layer, or ``None`` when there is none."""
    from channels.layers import get_channel_layer

    try:
        return get_channel_layer(rivet_settings.CHANNEL_LAYER)
    except Exception as exc:  # no CHANNEL_LAYERS, or a broken alias/backend
        layer_health.failed("configure", exc)
        return None


# Callables told about committed events in this process, from the invoking
# thread: the transport's feeds (they hand the call over to their loop).
_listeners: set[Callable[[uuid.UUID, list[LoggedEvent]], None]] = set()
_listeners_lock = threading.Lock()


def add_listener(listener: Callable[[uuid.UUID, list[LoggedEvent]], None]) -> None:
    """Call ``listener(actor_id, events)`` after each commit with events."""
    with _listeners_lock:
        _listeners.add(listener)


def remove_listener(listener: Callable[[uuid.UUID, list[LoggedEvent]], None]) -> None:
    """Stop calling ``listener``."""
    with _listeners_lock:
        _listeners.discard(listener)


def events_message(actor_id: uuid.UUID, events: list[LoggedEvent]) -> dict[str, Any]:
    """Return the one channel-layer message that announces ``events``."""
    message: dict[str, Any] = {
        "type": EVENTS_MESSAGE,
        "actor": actor_id.hex,
        "last": events[-1].seq,
    }
    if sum(len(event.args) for event in events) <= INLINE_BYTES:
        message["events"] = [[e.seq, e.name, e.args] for e in events]
    return message


# The event loop of the async caller an invocation serves (set by the
# spine around invocations it runs for async callers). publish() hands the
# channel-layer message to that loop instead of waiting for the layer: the
# events are committed and local feeds have them already, so the invoking
# thread (and the next call to the actor) need not wait for Redis.
serving_loop: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = (
    contextvars.ContextVar("rivet_serving_loop", default=None)
)


def publish(actor_id: uuid.UUID, events: list[LoggedEvent]) -> None:
    """Announce committed events to this process and to every other one.

    Never raises: the events are committed, and a feed that misses the
    announcement reads them from the log. Called for an async caller
    (:data:`serving_loop` set), the channel-layer send happens on that loop,
    in commit order, without the caller's thread waiting for it.
    """
    observability.events_published(len(events))
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(actor_id, events)
        except Exception:  # pragma: no cover - listeners only schedule work
            logger.exception("event listener failed actor_id=%s", actor_id)
    loop = serving_loop.get()
    if loop is not None and not loop.is_closed():
        _publisher(loop).submit(actor_id, events)
        return
    layer = get_layer()
    if layer is None:
        return
    message = events_message(actor_id, events)
    _send(layer, "publish", layer.group_send, actor_group(actor_id), message)


class _Publisher:
    """Send one event loop's publishes, in order, off the invoking threads.

    Publishes queued while a send is in flight go out together: consecutive
    ones of the same actor become one message (a hot actor's invocations
    then cost Redis one message per round instead of one each).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: deque[tuple[uuid.UUID, list[LoggedEvent]]] = deque()
        self._lock = threading.Lock()
        self._running = False

    def submit(self, actor_id: uuid.UUID, events: list[LoggedEvent]) -> None:
        """Queue ``events`` for the channel layer (from any thread)."""
        with self._lock:
            self._queue.append((actor_id, events))
            if self._running:
                return
            self._running = True
        try:
            self.loop.call_soon_threadsafe(self._start)
        except RuntimeError:  # the loop closed meanwhile: nobody to send them
            with self._lock:
                self._queue.clear()
                self._running = False

    def _start(self) -> None:
        self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._running = False
                        return
                    batch = list(self._queue)
                    self._queue.clear()
                layer = get_layer()
                if layer is None:
                    continue
                for actor_id, events in _merged(batch):
                    await _asend(
                        layer,
                        "publish",
                        layer.group_send,
                        actor_group(actor_id),
                        events_message(actor_id, events),
                    )
        except BaseException:
            with self._lock:
                self._running = False
            raise


def _merged(
    batch: list[tuple[uuid.UUID, list[LoggedEvent]]],
) -> list[tuple[uuid.UUID, list[LoggedEvent]]]:
    """Join consecutive publishes of one actor whose seqs follow each other."""
    out: list[tuple[uuid.UUID, list[LoggedEvent]]] = []
    for actor_id, events in batch:
        if out and out[-1][0] == actor_id and out[-1][1][-1].seq + 1 == events[0].seq:
            out[-1] = (actor_id, out[-1][1] + events)
        else:
            out.append((actor_id, list(events)))
    return out


_publishers: dict[asyncio.AbstractEventLoop, _Publisher] = {}
_publishers_lock = threading.Lock()


def _publisher(loop: asyncio.AbstractEventLoop) -> _Publisher:
    with _publishers_lock:
        publisher = _publishers.get(loop)
        if publisher is None:
            # Forget the publishers of closed loops (tests run many loops).
            for old in [old for old in _publishers if old.is_closed()]:
                del _publishers[old]
            publisher = _publishers[loop] = _Publisher(loop)
        return publisher


def send_to_channel(channel_name: str, message: dict[str, Any]) -> None:
    """Send one message to one consumer (a connection in any process).

    At most once: a full or failing layer drops it (logged). Consumers
    whose row disappeared are closed by their heartbeat anyway.
    """
    layer = get_layer()
    if layer is None:
        return
    _send(layer, "send", layer.send, channel_name, message)


def _send(layer: Any, what: str, method: Any, target: str, message: Any) -> None:
    try:
        async_to_sync(_asend)(layer, what, method, target, message)
    except Exception as exc:  # e.g. called where async_to_sync cannot run
        layer_health.failed(what, exc)


async def _asend(layer: Any, what: str, method: Any, target: str, message: Any) -> None:
    """Send one message within PUBLISH_TIMEOUT; log failures, never raise."""
    try:
        await asyncio.wait_for(method(target, message), PUBLISH_TIMEOUT)
    except ChannelFull:
        # The receiving process is over its capacity (docs/production.md).
        logger.warning("channel full, message dropped target=%s op=%s", target, what)
        return
    except Exception as exc:
        layer_health.failed(what, exc)
        return
    layer_health.ok()
