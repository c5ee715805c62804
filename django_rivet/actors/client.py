"""The server-side actor client: ``from django_rivet import actors``.

Use it from views, tasks, the shell and other actors::

    room = actors.get_or_create("chatRoom", ["acme", "general"])
    room.call("send_message", "bob", "hi")
    await room.acall("send_message", "bob", "hi")

Handles from :func:`get` and :func:`get_or_create` resolve the actor by
``(name, key)`` on every call: when the actor is destroyed and created again
under the same key, the handle reaches the new one (a ``get_or_create``
handle creates it again itself). Handles from :func:`create` and
:func:`get_by_id` stay pinned to one ``actor_id``: once that actor is
destroyed they raise ``actor/not_found``.

Errors are raised as they are: :class:`~django_rivet.ActorNotFound`,
:class:`~django_rivet.UserError`... and, for any other exception a handler
raises, the original exception (after the rollback).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Unpack

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.db.models import Q, QuerySet

from ..exceptions import ActorNotFound, InvalidArgs
from ..models import Actor, db, sql
from . import registry, states
from .errors import database_error
from .handles import Criteria
from .lanes import ainvoke
from .operations import CallAction, EnsureActor, RunHook, check_arguments
from .rows import ActorRef, Mode, canonical_key, normalize_key
from .services import services
from .spine import invoke

__all__ = [
    "MAX_FILTER_LIMIT",
    "ActorHandle",
    "acount",
    "acreate",
    "afilter",
    "aget",
    "aget_by_id",
    "aget_or_create",
    "count",
    "create",
    "filter",
    "get",
    "get_by_id",
    "get_or_create",
]

#: The most handles one :func:`filter` returns.
MAX_FILTER_LIMIT = 10_000


class ActorHandle:
    """A reference to an actor, by key or by id; calls go through the runtime."""

    #: When the actor was created (handles of :func:`filter`; else ``None``).
    created_at: datetime | None = None

    def __init__(
        self,
        name: str,
        key: tuple[str, ...],
        actor_id: uuid.UUID,
        *,
        resolve: Mode | None,
    ) -> None:
        self.name = name
        self.key = key
        # The id the handle resolved when it was made; a handle that follows
        # its key may reach a later actor under the same key.
        self.actor_id = actor_id
        # How calls find the actor: by key with this mode ("get": the actor
        # holding the key now, "get_or_create": created again if destroyed),
        # or None: by actor_id.
        self._resolve = resolve
        # Built once: a reference is immutable, and every call needs it.
        self._call_ref = (
            ActorRef(name=name, key=key, mode=resolve)
            if resolve is not None
            else ActorRef(actor_id=actor_id)
        )

    def _ref(self) -> ActorRef:
        return self._call_ref

    def _destroy_ref(self) -> ActorRef:
        if self._resolve is not None:
            # Destroying must not create the actor first.
            return ActorRef(name=self.name, key=self.key, mode="get")
        return ActorRef(actor_id=self.actor_id)

    def call(self, action: str, *args: Any) -> Any:
        """Run an action and return its result."""
        return invoke(self._ref(), CallAction(action, list(args)))

    async def acall(self, action: str, *args: Any) -> Any:
        """Async :meth:`call`."""
        return await ainvoke(self._ref(), CallAction(action, list(args)))

    def send(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Enqueue a message to the actor's queue ``queue`` (docs/scheduling.md)."""
        sender = services.require("queue_sender")
        result: dict[str, Any] = sender.send(
            self._ref(), queue, body, wait=wait, timeout=timeout
        )
        return result

    async def asend(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Async :meth:`send`."""
        sender = services.require("queue_sender")
        result: dict[str, Any] = await sender.asend(
            self._ref(), queue, body, wait=wait, timeout=timeout
        )
        return result

    def destroy(self) -> None:
        """Destroy the actor (``on_destroy`` runs; state, KV... removed)."""
        invoke(self._destroy_ref(), RunHook("destroy"))

    async def adestroy(self) -> None:
        """Async :meth:`destroy`."""
        await ainvoke(self._destroy_ref(), RunHook("destroy"))

    def __repr__(self) -> str:
        return f"<ActorHandle {self.name}{list(self.key)} {self.actor_id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other.actor_id == self.actor_id

    def __hash__(self) -> int:
        return hash(self.actor_id)


def _handle(ref: ActorRef, actor_id: uuid.UUID) -> ActorHandle:
    assert ref.name is not None
    # create() pins the new actor: a later actor under the key is another.
    resolve: Mode | None = "get_or_create" if ref.mode == "get_or_create" else None
    return ActorHandle(ref.name, ref.key, actor_id, resolve=resolve)


def _ensure(ref: ActorRef) -> ActorHandle:
    actor_id, _ = invoke(ref, EnsureActor())
    return _handle(ref, actor_id)


async def _aensure(ref: ActorRef) -> ActorHandle:
    actor_id, _ = await ainvoke(ref, EnsureActor())
    return _handle(ref, actor_id)


def _lookup(ref: ActorRef) -> ActorHandle:
    """Find an existing actor without invoking it.

    By key: the handle follows the key; by id: it stays pinned.
    """
    if ref.actor_id is not None:
        rows = Actor.objects.filter(pk=ref.actor_id)
    else:
        rows = Actor.objects.filter(name=ref.name, key=canonical_key(ref.key))
    try:
        row = rows.values_list("id", "name", "key_parts").first()
    except DatabaseError as exc:
        # As invoke() does: an outage or a missing table says what to do.
        coded = database_error(exc)
        if coded is None:
            raise
        raise coded from exc
    if row is None:
        raise ActorNotFound(
            "Actor not found",
            metadata={"actor_id": str(ref.actor_id)}
            if ref.actor_id is not None
            else {"name": ref.name, "key": list(ref.key)},
        )
    resolve: Mode | None = "get" if ref.actor_id is None else None
    return ActorHandle(row[1], tuple(row[2]), row[0], resolve=resolve)


def _ref(name: str, key: Any, mode: Mode, input: Any = None) -> ActorRef:
    if input is not None:
        # An input of the annotated type goes as the wire would carry it.
        shape = states.input_shape(registry.get(name)) if mode != "get" else None
        if shape is not None:
            input = shape.dump(input, "input", InvalidArgs)
        # What the wire would refuse as input, the shell refuses too.
        check_arguments(input, "input")
    return ActorRef.of(name, key, mode=mode, input=input)


def get(name: str, key: Any = None) -> ActorHandle:
    """Return a handle to an existing actor; ``actor/not_found`` if none."""
    return _lookup(_ref(name, key, "get"))


def get_or_create(name: str, key: Any = None, input: Any = None) -> ActorHandle:
    """Return a handle, creating the actor (with ``input``) if needed."""
    return _ensure(_ref(name, key, "get_or_create", input))


def create(name: str, key: Any = None, input: Any = None) -> ActorHandle:
    """Create a new actor; ``actor/already_exists`` if it exists."""
    return _ensure(_ref(name, key, "create", input))


def get_by_id(actor_id: uuid.UUID | str) -> ActorHandle:
    """Return a handle to the actor with this id; ``actor/not_found`` if none."""
    return _lookup(ActorRef.by_id(actor_id))


async def aget(name: str, key: Any = None) -> ActorHandle:
    """Async :func:`get`."""
    return await sync_to_async(_lookup)(_ref(name, key, "get"))


async def aget_or_create(name: str, key: Any = None, input: Any = None) -> ActorHandle:
    """Async :func:`get_or_create`."""
    return await _aensure(_ref(name, key, "get_or_create", input))


async def acreate(name: str, key: Any = None, input: Any = None) -> ActorHandle:
    """Async :func:`create`."""
    return await _aensure(_ref(name, key, "create", input))


async def aget_by_id(actor_id: uuid.UUID | str) -> ActorHandle:
    """Async :func:`get_by_id`."""
    return await sync_to_async(_lookup)(ActorRef.by_id(actor_id))


# -- finding actors ---------------------------------------------------------------
def _found(name: str | None, **criteria: Unpack[Criteria]) -> QuerySet[Actor]:
    """The actors matching, by the indexes of the ``Actor`` table."""
    rows = Actor.objects.all()
    if name is not None:
        rows = rows.filter(name=name)
    key_prefix = criteria.get("key_prefix")
    if key_prefix is not None:
        parts = normalize_key(key_prefix)
        if parts:
            if name is None:
                raise ValueError("key_prefix needs a name: keys belong to a class")
            # The stored key is the canonical JSON list of its parts: a key
            # starting with these parts is them exactly, or them followed by
            # a comma and more parts.
            whole = canonical_key(parts)
            more = sql.dialect(db.connection()).starts_with("key", whole[:-1] + ",")
            rows = rows.filter(Q(key=whole) | more)
    created_after = criteria.get("created_after")
    if created_after is not None:
        rows = rows.filter(created_at__gt=created_after)
    created_before = criteria.get("created_before")
    if created_before is not None:
        rows = rows.filter(created_at__lt=created_before)
    return rows


def filter(
    name: str | None = None, *, limit: int = 100, **criteria: Unpack[Criteria]
) -> list[ActorHandle]:
    """Return handles to existing actors, newest first.

    ``name``: the actors of one class (its registry name); ``key_prefix``:
    those whose key starts with these parts (``"acme"`` or ``["acme"]``
    matches ``["acme"]`` and ``["acme", "general"]``, not ``["acme2"]``;
    needs ``name``); ``created_after`` / ``created_before``: creation times,
    exclusive (pass the last handle's ``created_at`` as ``created_before``
    for the next page). At most ``limit`` handles (1 to 10,000). Each
    handle follows its key, like :func:`get`'s. Served by indexes of the
    ``Actor`` table; nothing is invoked, no hook runs.
    """
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not (1 <= limit <= MAX_FILTER_LIMIT)
    ):
        raise ValueError(f"limit must be an integer from 1 to {MAX_FILTER_LIMIT}")
    found = (
        _found(name, **criteria)
        .order_by("-created_at", "-id")
        .values_list("id", "name", "key_parts", "created_at")[:limit]
    )
    handles = []
    for actor_id, actor_name, key_parts, created_at in _coded(lambda: list(found)):
        handle = ActorHandle(actor_name, tuple(key_parts), actor_id, resolve="get")
        handle.created_at = created_at
        handles.append(handle)
    return handles


def count(name: str | None = None, **criteria: Unpack[Criteria]) -> int:
    """Return how many actors :func:`filter` would find without its limit."""
    counted: int = _coded(_found(name, **criteria).count)
    return counted


def _coded(run: Any) -> Any:
    """Run a query; a database outage or missing table says what to do."""
    try:
        return run()
    except DatabaseError as exc:
        coded = database_error(exc)
        if coded is None:
            raise
        raise coded from exc


async def afilter(
    name: str | None = None, *, limit: int = 100, **criteria: Unpack[Criteria]
) -> list[ActorHandle]:
    """Async :func:`filter`."""
    return await sync_to_async(filter)(name, limit=limit, **criteria)


async def acount(name: str | None = None, **criteria: Unpack[Criteria]) -> int:
    """Async :func:`count` (the same arguments)."""
    return await sync_to_async(count)(name, **criteria)
