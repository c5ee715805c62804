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

import uuid
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from .. import events
from ..encoding import cbor_dumps
from ..typed import shape_of
from .handles import ActorsAPI, WorkflowsAPI
from .kv import ActorKVStore
from .services import CronAPI, QueueAPI, ScheduleAPI, services

if TYPE_CHECKING:
    from django.http import HttpRequest

    from .calls import Origin, User

__all__ = ["ActorContext", "Conn", "Running", "event_args"]


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
        self._state = value

    def send(self, event: str, *args: Any) -> None:
        """Send an event to this connection only, after commit."""
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
        self._invocation.state = value

    @cached_property
    def kv(self) -> ActorKVStore:
        """The actor's KV store (writes join the invocation's transaction)."""
        return ActorKVStore(self.actor_id)

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
        args = event_args(self._invocation.definition, event, args)
        self._invocation.broadcasts.append((event, events.encode_args(event, args)))

    def destroy(self) -> None:
        """Destroy the actor when this invocation commits."""
        self._invocation.destroy_requested = True

    def sleep(self) -> None:
        """Evict the actor from this process after this invocation."""
        self._invocation.sleep_requested = True

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
        return api

    @cached_property
    def cron(self) -> CronAPI:
        """Recurring jobs of this actor (docs/scheduling.md)."""
        factory = services.require("cron")
        api: CronAPI = factory(self._invocation)
        return api

    @cached_property
    def queue(self) -> QueueAPI:
        """This actor's own queues (docs/scheduling.md, "Queues")."""
        factory = services.require("queue")
        api: QueueAPI = factory(self._invocation)
        return api

    @property
    def workflows(self) -> WorkflowsAPI:
        """Start and get workflows; starts run after this invocation commits."""
        workflows: WorkflowsAPI = services.require("workflows")
        return workflows

    def __repr__(self) -> str:
        return f"<ActorContext {self.name}{list(self.key)} {self.actor_id}>"
