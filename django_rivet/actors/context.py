"""The context handed to every hook and handler (``ctx``) and ``Conn``.

``ctx`` members that belong to other layers (``ctx.schedule``, ``ctx.cron``,
``ctx.queue``, ``ctx.workflows``, ``ctx.actors``) are typed by the
interfaces of :mod:`.services` and bound at start-up, so this module never
imports the scheduler or the workflow runtime.

The invocation that builds ``ctx`` sits above this module (it imports it,
and so do the definitions, to type their hooks); ``ctx`` and ``Conn`` reach
it back through :class:`Running`, the few members they read.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from asgiref.sync import async_to_sync

from .. import events
from ..encoding import cbor_dumps
from ..exceptions import ActorReadOnly
from ..typed import shape_of
from .handles import ActorsAPI, WorkflowsAPI
from .kv import ActorKVStore
from .services import CronAPI, QueueAPI, ScheduleAPI, services
from .websockets import WebSocket

if TYPE_CHECKING:
    from django.http import HttpRequest

    from .calls import Origin, User

logger = logging.getLogger("django_rivet.actors")

M = TypeVar("M")

__all__ = ["ActorContext", "Conn", "Running", "event_args"]

refuse_write = ActorReadOnly.refusing


# The methods of ctx members that write (refused in a read-only call).
_WRITES = {
    "schedule": frozenset({"after", "at", "retry", "cancel"}),
    "cron": frozenset({"set", "every", "delete"}),
    "queue": frozenset({"send"}),
    "workflows": frozenset({"start"}),
    "workflow": frozenset({"send", "request", "cancel"}),
}


class _ReadOnlyMember:
    """A ``ctx`` member in a read-only call: its reads work, its writes refuse."""

    __slots__ = ("_member", "_name")

    def __init__(self, member: Any, name: str) -> None:
        self._member = member
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        plain = attribute[1:] if attribute.startswith("a") else attribute
        if plain in _WRITES[self._name] or attribute in _WRITES[self._name]:
            raise refuse_write(f"call ctx.{self._name}.{attribute}()")
        found = getattr(self._member, attribute)
        if self._name == "workflows" and attribute in ("get", "aget"):
            return _handles_read_only(found, inspect.iscoroutinefunction(found))
        return found


def _handles_read_only(get: Callable[..., Any], is_async: bool) -> Any:
    if is_async:

        async def aget(*args: Any, **kwargs: Any) -> Any:
            return _ReadOnlyMember(await get(*args, **kwargs), "workflow")

        return aget

    def sync_get(*args: Any, **kwargs: Any) -> Any:
        return _ReadOnlyMember(get(*args, **kwargs), "workflow")

    return sync_get


def _logged_after_commit(
    func: Callable[..., Any], args: tuple[Any, ...], actor_id: uuid.UUID
) -> Callable[[], None]:
    def run() -> None:
        try:
            result = func(*args)
            if inspect.isawaitable(result):
                async_to_sync(_awaited)(result)
        except Exception:
            logger.exception(
                "after_commit callback failed actor_id=%s callback=%r", actor_id, func
            )

    return run


async def _awaited(awaitable: Any) -> None:
    await awaitable


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def events(self) -> dict[str, Any]: ...


def event_args(
    definition: _Named, event: str, args: tuple[Any, ...]
) -> tuple[Any, ...]:
    """Return an event's arguments as sent: declared types converted.

    ``events = {"message": Message}`` (or a tuple of types, one per
    argument) declares them (docs/types.md); undeclared events go as they are.
    """
    declared = definition.events.get(event) if definition.events else None
    if declared is None:
        return args
    hints = declared if isinstance(declared, tuple) else (declared,)
    converted = list(args)
    for index, (hint, value) in enumerate(zip(hints, args, strict=False)):
        shape = shape_of(hint)
        if shape is not None:
            converted[index] = shape.dump(value, f"event {event} args[{index}]")
    return tuple(converted)


class Running(Protocol):
    """The running invocation, as ``ctx`` and ``Conn`` see it.

    ``invocation.Invocation`` is the one implementation; this is what ``ctx``
    reads of it and the effects it records on it.
    """

    state: Any
    conn: Conn | None
    broadcasts: list[tuple[str, bytes]]
    destroy_requested: bool
    sleep_requested: bool
    #: A read-only action runs: every write is refused (``actor/readonly``).
    readonly: bool

    @property
    def actor_id(self) -> uuid.UUID:
        """The actor's id."""
        ...

    @property
    def key(self) -> tuple[str, ...]:
        """The actor's key."""
        ...

    @property
    def definition(self) -> _Named:
        """The actor's class."""
        ...

    @property
    def origin(self) -> Origin:
        """Who calls."""
        ...

    def after_commit(self, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` once the invocation's transaction commits."""
        ...

    def load_conns(self) -> list[Conn]:
        """Return the actor's live connections."""
        ...

    def load_websockets(self) -> list[WebSocket]:
        """Return the actor's raw WebSockets."""
        ...


class Conn:
    """A WebSocket connection to the actor, held by any process."""

    def __init__(
        self,
        invocation: Running,
        *,
        id: uuid.UUID,
        channel_name: str,
        params: Any,
        state: Any,
        state_bytes: bytes,
        subscriptions: list[str],
    ) -> None:
        self.id = id
        self.params = params
        self.channel_name = channel_name
        self.subscriptions = subscriptions
        self._state = state
        self._state_bytes = state_bytes
        self._invocation = invocation

    @property
    def state(self) -> Any:
        """Persisted per-connection state; mutate in place or assign."""
        return self._state

    @state.setter
    def state(self, value: Any) -> None:
        if self._invocation.readonly:
            raise refuse_write("assign conn.state")
        self._state = value

    def send(self, event: str, *args: Any) -> None:
        """Send an event to this connection only, after commit."""
        if self._invocation.readonly:
            raise refuse_write("send events (conn.send)")
        args = event_args(self._invocation.definition, event, args)
        message = {
            "type": events.SEND_MESSAGE,
            "name": event,
            "args": events.encode_args(event, args),
        }
        self._invocation.after_commit(
            events.send_to_channel, self.channel_name, message
        )

    def disconnect(self, reason: str | None = None) -> None:
        """Close this connection after commit."""
        if self._invocation.readonly:
            raise refuse_write("close connections (conn.disconnect)")
        message = {"type": events.DISCONNECT_MESSAGE, "reason": reason}
        self._invocation.after_commit(
            events.send_to_channel, self.channel_name, message
        )

    def changed_state(self) -> bytes | None:
        """Return the encoded state if it changed since it was loaded."""
        data = cbor_dumps(self._state, "conn.state")
        return data if data != self._state_bytes else None

    def state_saved(self, data: bytes) -> None:
        """Record that ``data`` is now the stored state."""
        self._state_bytes = data

    def saved_state(self) -> bytes:
        """Return the stored (encoded) state."""
        return self._state_bytes

    def __repr__(self) -> str:
        return f"<Conn {self.id}>"


class ActorContext:
    """What a handler sees of its actor and the world (docs/actors.md)."""

    def __init__(self, invocation: Running) -> None:
        self._invocation = invocation
        self.actor_id: uuid.UUID = invocation.actor_id
        self.name: str = invocation.definition.name
        self.key: tuple[str, ...] = invocation.key

    # -- persisted state ----------------------------------------------------
    @property
    def state(self) -> Any:
        """Persisted state; mutate in place or assign; saved on commit."""
        return self._invocation.state

    @state.setter
    def state(self, value: Any) -> None:
        if self._invocation.readonly:
            raise refuse_write("assign ctx.state")
        self._invocation.state = value

    @property
    def readonly(self) -> bool:
        """Whether a read-only action runs (every write is refused)."""
        return self._invocation.readonly

    @cached_property
    def kv(self) -> ActorKVStore:
        """The actor's KV store (writes join the invocation's transaction)."""
        return ActorKVStore(self.actor_id, readonly=self._invocation.readonly)

    # -- caller -------------------------------------------------------------
    @property
    def conn(self) -> Conn | None:
        """The calling connection for WebSocket-originated calls."""
        return self._invocation.conn

    @property
    def conns(self) -> list[Conn]:
        """Live connections of this actor, across processes."""
        return self._invocation.load_conns()

    @property
    def websockets(self) -> list[WebSocket]:
        """The actor's raw WebSockets (``on_websocket``), across processes."""
        return self._invocation.load_websockets()

    @property
    def user(self) -> User:
        """The Django user of the request/connection, or ``AnonymousUser``."""
        user = self._invocation.origin.user
        if user is None:
            # Imported here: django.contrib.auth is optional for projects
            # that never use ctx.user, and its models need the app loaded.
            from django.contrib.auth.models import AnonymousUser

            return AnonymousUser()
        return user

    @property
    def request(self) -> HttpRequest | None:
        """The caller's ``HttpRequest``: the HTTP request, or the WebSocket handshake.

        For a WebSocket connection it is the handshake's request (headers,
        path, ``GET``, ``META["REMOTE_ADDR"]``, ``user``, ``session``), in
        ``on_before_connect``, ``create_conn_state``, ``on_connect`` and the
        connection's actions. ``None`` for scheduled, queued and server-side
        calls.
        """
        return self._invocation.origin.http_request

    @property
    def fire_info(self) -> dict[str, Any] | None:
        """For scheduled and cron invocations, what fired."""
        return self._invocation.origin.fire_info

    # -- effects ------------------------------------------------------------
    def broadcast(self, event: str, *args: Any) -> None:
        """Send ``event`` to every subscribed connection, after commit."""
        if not isinstance(event, str) or not event:
            raise TypeError("event must be a non-empty string")
        if self._invocation.readonly:
            raise refuse_write("broadcast events")
        args = event_args(self._invocation.definition, event, args)
        self._invocation.broadcasts.append((event, events.encode_args(event, args)))

    def destroy(self) -> None:
        """Destroy the actor when this invocation commits."""
        if self._invocation.readonly:
            raise refuse_write("destroy the actor")
        self._invocation.destroy_requested = True

    def sleep(self) -> None:
        """Evict the actor from this process after this invocation."""
        if self._invocation.readonly:
            raise refuse_write("put the actor to sleep")
        self._invocation.sleep_requested = True

    def after_commit(self, func: Callable[..., Any], *args: Any) -> None:
        """Run ``func(*args)`` once, after this invocation's transaction commits.

        Never after a rollback (the call failed, or a later call of the same
        transaction did): use it for what must happen only once the
        actor's changes are durable -- an e-mail, a call to another service.
        ``func`` may be sync or async; it runs in the invoking thread before
        the caller gets its answer. An exception in it is logged
        (``django_rivet.actors``) and changes nothing: the call succeeded.
        """
        if not callable(func):
            raise TypeError("after_commit takes a callable")
        if self._invocation.readonly:
            raise refuse_write("register after_commit hooks")
        self._invocation.after_commit(_logged_after_commit(func, args, self.actor_id))

    # -- other subsystems -----------------------------------------------------
    @property
    def actors(self) -> ActorsAPI:
        """The server-side actor client, for actor-to-actor calls."""
        actors: ActorsAPI = services.require("actors")
        return actors

    @cached_property
    def schedule(self) -> ScheduleAPI:
        """One-shot schedules of this actor (docs/scheduling.md)."""
        factory = services.require("schedule")
        api: ScheduleAPI = factory(self._invocation)
        return self._guarded(api, "schedule")

    @cached_property
    def cron(self) -> CronAPI:
        """Recurring jobs of this actor (docs/scheduling.md)."""
        factory = services.require("cron")
        api: CronAPI = factory(self._invocation)
        return self._guarded(api, "cron")

    @cached_property
    def queue(self) -> QueueAPI:
        """This actor's own queues (docs/scheduling.md, "Queues")."""
        factory = services.require("queue")
        api: QueueAPI = factory(self._invocation)
        return self._guarded(api, "queue")

    @property
    def workflows(self) -> WorkflowsAPI:
        """Start and get workflows; starts run after this invocation commits."""
        workflows: WorkflowsAPI = services.require("workflows")
        return self._guarded(workflows, "workflows")

    def _guarded(self, member: M, name: str) -> M:
        if self._invocation.readonly:
            return cast(M, _ReadOnlyMember(member, name))
        return member

    def __repr__(self) -> str:
        return f"<ActorContext {self.name}{list(self.key)} {self.actor_id}>"
