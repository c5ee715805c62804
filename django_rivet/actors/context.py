"""The context handed to every hook and handler (``ctx``) and ``Conn``."""

from __future__ import annotations

import uuid
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .. import events
from ..encoding import cbor_dumps
from .kv import ActorKVStore

if TYPE_CHECKING:
    from .runtime import Invocation

__all__ = ["ActorContext", "Conn"]


class Conn:
    """A WebSocket connection to the actor, held by any process."""

    def __init__(
        self,
        invocation: Invocation,
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
        message = {
            "type": events.SEND_MESSAGE,
            "name": event,
            "args": cbor_dumps(list(args)),
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

    def _changed_state(self) -> bytes | None:
        data = cbor_dumps(self._state)
        return data if data != self._state_bytes else None

    def __repr__(self) -> str:
        return f"<Conn {self.id}>"


class ActorContext:
    """What a handler sees of its actor and the world (SPEC 3.4)."""

    def __init__(self, invocation: Invocation) -> None:
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
    def user(self) -> Any:
        """The Django user of the request/connection, or ``AnonymousUser``."""
        user = self._invocation.origin.user
        if user is None:
            from django.contrib.auth.models import AnonymousUser

            user = AnonymousUser()
        return user

    @property
    def fire_info(self) -> dict[str, Any] | None:
        """For scheduled and cron invocations, what fired."""
        return self._invocation.origin.fire_info

    # -- effects ------------------------------------------------------------
    def broadcast(self, event: str, *args: Any) -> None:
        """Send ``event`` to every subscribed connection, after commit."""
        if not isinstance(event, str) or not event:
            raise TypeError("event must be a non-empty string")
        self._invocation.broadcasts.append((event, cbor_dumps(list(args))))

    def destroy(self) -> None:
        """Destroy the actor when this invocation commits."""
        self._invocation.destroy_requested = True

    def sleep(self) -> None:
        """Evict the actor from this process after this invocation."""
        self._invocation.sleep_requested = True

    # -- other subsystems -----------------------------------------------------
    @cached_property
    def actors(self) -> Any:
        """The server-side actor client, for actor-to-actor calls."""
        from .. import actors

        return actors

    @cached_property
    def schedule(self) -> Any:
        """One-shot schedules of this actor (SPEC 3.6)."""
        from .schedule import ScheduleAPI

        return ScheduleAPI(self._invocation)

    @cached_property
    def cron(self) -> Any:
        """Recurring jobs of this actor (SPEC 3.6)."""
        from .schedule import CronAPI

        return CronAPI(self._invocation)

    @cached_property
    def queue(self) -> Any:
        """This actor's own queues (SPEC 3.7)."""
        from .queue import QueueAPI

        return QueueAPI(self._invocation)

    @cached_property
    def workflows(self) -> Any:
        """Start and get workflows; starts run after this invocation commits."""
        from .. import workflows

        return workflows

    def __repr__(self) -> str:
        return f"<ActorContext {self.name}{list(self.key)} {self.actor_id}>"
