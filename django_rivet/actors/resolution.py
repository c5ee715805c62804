"""Which class serves a call, and what a refused caller may learn.

The spine asks here before any I/O of its own: the class registered under
the name (or of the actor row, by id), an external caller refused exactly
as an unknown name or id would be (``server_only`` classes, another class's
id), and, by id, an argument check's refusal held back until ``on_auth``
allowed the caller, so that an answer never tells an existing actor from
an absent one.
"""

from __future__ import annotations

from ..exceptions import ActorNotFound, RivetError
from ..models import Actor as ActorRow
from . import cache, registry, rows
from .calls import Origin
from .definition import Actor
from .invocation import Operation
from .rows import ActorRef

__all__ = [
    "by_id_from_outside",
    "definition_for",
    "hides_existence",
    "not_found",
    "prepare",
    "resolve_definition",
]


def resolve_definition(ref: ActorRef, origin: Origin) -> type[Actor]:
    if ref.name is not None:
        definition = registry.get(ref.name, external=origin.external)
    else:
        assert ref.actor_id is not None
        # An actor loaded in this process needs no lookup; invoke() checks
        # the locked row's name anyway, in case the id now belongs to another
        # class. The registry, not the cache, says which class serves it now.
        cached = cache.cached_definition(ref.actor_id)
        name = (
            cached.name
            if cached is not None
            else ActorRow.objects.filter(pk=ref.actor_id)
            .values_list("name", flat=True)
            .first()
        )
        if name is None:
            raise not_found(ref)
        definition = registry.get(name)
    if origin.external and definition.server_only:
        # Exactly what an unknown name or id gets (see registry.get_external).
        if ref.name is not None:
            raise registry.unknown_external(ref.name)
        raise not_found(ref)
    return definition


def not_found(ref: ActorRef) -> ActorNotFound:
    """The error for an absent actor: only what the caller itself sent."""
    if ref.actor_id is not None:
        return ActorNotFound(
            "Actor not found", metadata={"actor_id": str(ref.actor_id)}
        )
    return ActorNotFound(
        "Actor not found", metadata={"name": ref.name, "key": list(ref.key)}
    )


def definition_for(
    ref: ActorRef, row: rows.LockedRow, found: type[Actor]
) -> type[Actor]:
    """Return the class serving the locked row; refuse a name/id mismatch."""
    if row.name == found.name:
        return found
    if ref.name is not None:
        # ?actor_id= names an actor of another class than the URL (or key):
        # answered exactly as an absent id.
        raise not_found(ref)
    return registry.get(row.name)


def prepare(
    operation: Operation, definition: type[Actor], ref: ActorRef, origin: Origin
) -> RivetError | None:
    """Let ``operation`` check its arguments; return a refusal kept for later.

    By id, a caller learns nothing before ``on_auth`` allowed it
    (:func:`hides_existence`): an argument check's refusal waits for that.
    """
    try:
        operation.prepare(definition)
    except RivetError as refused:
        if hides_existence(ref, origin, definition, operation):
            return refused
        raise
    return None


def hides_existence(
    ref: ActorRef, origin: Origin, definition: type[Actor], operation: Operation
) -> bool:
    """Tell whether the answer must not tell this id's actor from an absent one.

    By id, from outside, to a class whose ``on_auth`` guards the call (one
    without lets anyone use its actors by id: that tells they exist).
    """
    return (
        by_id_from_outside(ref, origin)
        and operation.auth is not None
        and definition.overrides("on_auth")
    )


def by_id_from_outside(ref: ActorRef, origin: Origin) -> bool:
    # A connection's own calls are by id too, but it was admitted: its
    # caller knows the actor, and is refused as such.
    return ref.actor_id is not None and origin.external and origin.conn_id is None
