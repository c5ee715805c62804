"""Delivery of committed events through the channel layer.

After commit the runtime hands the new events to :func:`publish`, which
tells this process's listeners at once (:func:`add_listener`: the
transport's event feeds) and sends one channel-layer message per invocation
to the actor's group, which every web process's feed has joined. A message
the layer drops is not lost: feeds notice the gap and read the events from
the log. Connection-only messages go through :func:`send_to_channel`. The
feeds and every connection consumer read their channels with
:func:`channel_receive`. A channel layer that fails is logged once at ERROR
when the failures start and once when they stop, never per message.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull

from .. import observability
from ..conf import rivet_settings
from .log import LoggedEvent

logger = logging.getLogger("django_rivet.events")

__all__ = [
    "DISCONNECT_MESSAGE",
    "EVENTS_MESSAGE",
    "SEND_MESSAGE",
    "LayerHealth",
    "actor_group",
    "add_listener",
    "channel_receive",
    "events_message",
    "get_layer",
    "layer_health",
    "publish",
    "receive_aside",
    "remove_listener",
    "send_to_channel",
    "send_to_group",
    "serving_loop",
    "workflow_group",
]

# Channel-layer message types, dispatched by type: "rivet.events" goes to the
# transport's per-process feeds, the others to one connection's consumer
# ("rivet.send" -> RivetConsumer.rivet_send).
EVENTS_MESSAGE = "rivet.events"
SEND_MESSAGE = "rivet.send"
DISCONNECT_MESSAGE = "rivet.disconnect"

# Events of one invocation ride in its channel-layer message up to this many
# bytes of arguments; beyond, the message carries only the seqs and feeds
# read the events from the log (keeps Redis messages small).
INLINE_BYTES = 256 * 1024

# A publish waits at most this long for the channel layer (Redis down or
# unreachable): the events are committed and feeds find them in the log.
PUBLISH_TIMEOUT = 2.0


def actor_group(actor_id: uuid.UUID | str) -> str:
    """Return the channel-layer group of an actor's connections."""
    # channels_redis accepts ASCII alphanumerics, '-', '_' and '.', < 100 chars.
    hex_id = (
        actor_id.hex if isinstance(actor_id, uuid.UUID) else uuid.UUID(actor_id).hex
    )
    return f"rivet.actor.{hex_id}"


def workflow_group(workflow_id: str) -> str:
    """Return the channel-layer group of the processes following a workflow.

    Workflow ids are free text: the group carries a digest of it.
    """
    digest = hashlib.blake2b(workflow_id.encode("utf-8", "surrogatepass"))
    return f"rivet.workflow.{digest.hexdigest()[:40]}"


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


class _SendQueue:
    """What is queued for a sending task, taken in batches (under one lock)."""

    def __init__(self) -> None:
        self._queue: deque[Any] = deque()
        self._lock = threading.Lock()
        self._running = False

    def _queued(self, add: Callable[[deque[Any]], None]) -> bool:
        """Queue with ``add``; return True when no sending task runs (start one)."""
        with self._lock:
            add(self._queue)
            if self._running:
                return False
            self._running = True
            return True

    def _batch(self) -> list[Any] | None:
        """Take everything queued; None (the task ends) when nothing is."""
        with self._lock:
            if not self._queue:
                self._running = False
                return None
            batch = list(self._queue)
            self._queue.clear()
            return batch


class _Publisher(_SendQueue):
    """Send one event loop's publishes, in order, off the invoking threads.

    Publishes queued while a send is in flight go out together: consecutive
    ones of the same actor become one message (a hot actor's invocations
    then cost Redis one message per round instead of one each).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop

    def submit(self, actor_id: uuid.UUID, events: list[LoggedEvent]) -> None:
        """Queue ``events`` for the channel layer (from any thread)."""
        if not self._queued(lambda queue: queue.append((actor_id, events))):
            return
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
            while (batch := self._batch()) is not None:
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


Merge = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def send_to_group(
    group: str, message: dict[str, Any], merge: Merge | None = None
) -> None:
    """Send one message to every process in ``group`` (at most once, never raises).

    The caller does not wait: the message is queued for the process's
    publishing loop (a daemon thread), which sends queued messages in order
    on one connection to the layer. A committing thread (a workflow's run)
    so pays neither for Redis nor for an event loop per message. With
    ``merge``, a message queued right behind one of the same group and merge
    is joined to it (``merge(earlier, later)``): a burst costs the layer,
    and the receiving processes, one message.
    """
    if get_layer() is not None:
        _group_sender().submit(group, message, merge)


class _GroupSender(_SendQueue):
    """The process's publishing loop: group messages, in order, off the callers."""

    def __init__(self) -> None:
        super().__init__()
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self.loop.run_forever, name="rivet-publish", daemon=True
        )
        thread.start()

    def submit(self, group: str, message: dict[str, Any], merge: Merge | None) -> None:
        def add(queue: deque[Any]) -> None:
            last = queue[-1] if queue else None
            if merge is not None and last is not None and last[::2] == (group, merge):
                queue[-1] = (group, merge(last[1], message), merge)
            else:
                queue.append((group, message, merge))

        if self._queued(add):
            self.loop.call_soon_threadsafe(self.loop.create_task, self._drain())

    async def _drain(self) -> None:
        while (batch := self._batch()) is not None:
            layer = get_layer()
            for group, message, _ in batch if layer is not None else ():
                await _asend(layer, "group_send", layer.group_send, group, message)


_sender: _GroupSender | None = None
_sender_lock = threading.Lock()


def _group_sender() -> _GroupSender:
    global _sender
    with _sender_lock:
        if _sender is None or _sender.pid != os.getpid():  # new, or forked
            _sender = _GroupSender()
        return _sender


def receive_aside(
    channel: str,
    deliver: Callable[[dict[str, Any]], None],
    recover: Callable[[], Awaitable[None]] | None = None,
) -> Callable[[], object]:
    """Read ``channel`` on the publishing loop's thread; return what stops it.

    ``deliver(message)`` runs on that thread, for each message in order.
    channels_redis makes four round trips to Redis per message received,
    and on a loop that is busy writing a commit's values to a hundred
    responses each one waits for the loop's turn: the loop then reads one
    message per few turns, and messages queue up in Redis behind it. Read
    here, they are taken as they come, whatever the loop is doing.
    """
    layer = get_layer()
    if layer is None:
        return lambda: None

    async def read() -> None:
        while True:
            deliver(await channel_receive(layer, channel, recover))

    return asyncio.run_coroutine_threadsafe(read(), _group_sender().loop).cancel


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


# -- receiving ---------------------------------------------------------------------
def _is_idle_timeout(exc: BaseException) -> bool:
    return type(exc).__name__ == "TimeoutError" and type(exc).__module__.startswith(
        "redis"
    )


async def channel_receive(
    layer: Any,
    channel: str,
    recover: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """``layer.receive(channel)``, retried through read timeouts and outages.

    A consumer whose receive raises ends, and daphne closes its socket with
    1011 without running ``websocket_disconnect``; redis-py's default read
    timeout (5 s) races channels_redis' blocking read (5 s), so an idle
    socket would die every few seconds, and every socket when Redis
    restarts. Failures are logged once per outage (``events.layer_health``);
    ``recover`` runs before each retry after a failure (the hub rejoins its
    groups there).
    """
    delay = 0.05
    while True:
        try:
            message: dict[str, Any] = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if _is_idle_timeout(exc):
                # redis-py's socket timeout ended channels_redis' blocking
                # read (both 5 s by default): nothing arrived, not an error.
                continue
            layer_health.failed("receive", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            if recover is not None:
                await recover()
            continue
        return message
