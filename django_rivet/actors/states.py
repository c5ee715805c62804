"""Typed, versioned state: from the stored row to ``ctx.state`` and back.

An actor class may declare ``state_type`` (a dataclass or pydantic model):
``ctx.state`` is then an instance, stored as the value of the domain its
fields dump to, and read back as an instance. ``state_version`` numbers the
shape of what is stored; each row keeps the version that wrote it
(``Actor.state_version``). When an invocation loads an older state it calls
``migrate_state(ctx, state, from_version)`` first -- in the invocation's
transaction, so a failing invocation rolls the migration back too -- and
the state is written back with the new version, even if its bytes did not
change. A state written by a newer version than the code knows is refused
(``actor/state_version_ahead``) before any actor code runs: a process of
the previous deploy must not misread it, nor overwrite it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from ..encoding import cbor_dumps, encode_if_changed
from ..exceptions import InvalidValue, StateVersionAhead
from ..typed import Shape, shape_of
from ..typed.shapes import resolved_hints
from .context import ActorContext
from .definition import Actor

logger = logging.getLogger("django_rivet.actors")

__all__ = ["Loading", "encode", "input_shape", "load", "typed"]


class _Versioned(Protocol):
    state_version: int


class Loading(Protocol):
    """What :func:`load` reads of the invocation loading the state."""

    definition: type[Actor]
    instance: Actor
    ctx: ActorContext
    actor_id: uuid.UUID
    migrated_from: int | None

    @property
    def row(self) -> _Versioned:
        """The locked row."""
        ...

    def call(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run user code within the invocation's time limit."""
        ...


def load(invocation: Loading, stored: Any) -> Any:
    """Return the state read from the row as ``ctx.state``: migrated, typed."""
    definition = invocation.definition
    version = invocation.row.state_version
    current = definition.state_version
    if version != current:
        if version > current:
            raise StateVersionAhead(
                f"The state of this {definition.name!r} actor was written by "
                f"state_version {version}; this code knows up to {current}",
                metadata={"state_version": version, "code_version": current},
            )
        stored = invocation.call(
            invocation.instance.migrate_state, invocation.ctx, stored, version
        )
        invocation.migrated_from = version
        logger.info(
            "state migrated actor=%s actor_id=%s from=%s to=%s",
            definition.name,
            invocation.actor_id,
            version,
            current,
        )
    return typed(definition, stored)


def typed(definition: type[Actor], value: Any) -> Any:
    """Return ``value`` as the class's ``state_type`` (as it is without one).

    ``None`` (a new actor whose class sets no ``initial_state``) builds the
    type from its defaults. A value that does not fit is ``actor/invalid_value``
    naming the path (``state.items[0].price``).
    """
    hint = definition.state_type
    if hint is None:
        return value
    shape = shape_of(hint)
    if shape is None or _instance(value, hint):
        return value
    try:
        return shape.load({} if value is None else value, "state", InvalidValue)
    except InvalidValue as exc:
        raise InvalidValue(
            f"{exc.message}. The stored state does not fit {definition.__name__}"
            f".state_type: when its shape changes, raise state_version and "
            "convert older states in migrate_state",
            metadata=exc.metadata,
        ) from None


def encode(
    definition: type[Actor], state: Any, stored: bytes | None = None
) -> tuple[bytes, Any]:
    """Return ``(bytes, state)``: the state as stored, and as ``ctx.state``.

    A typed state replaced by another value (``ctx.state = {...}``) is
    converted to the type first; the returned state is the instance. With
    ``stored`` (the bytes the state was loaded from), a state that encodes
    exactly as them costs one encoding and no walk of the value domain, and
    ``stored`` itself is returned (:func:`~django_rivet.encoding.encode_if_changed`).
    """
    hint = definition.state_type
    shape = None if hint is None else shape_of(hint)
    if shape is not None and not _instance(state, hint):
        state = typed(definition, state)
    value = state if shape is None else shape.dump(state, "state")
    if stored is None:
        return cbor_dumps(value, "state"), state
    changed = encode_if_changed(value, stored)
    return (stored if changed is None else changed), state


def _instance(value: Any, hint: Any) -> bool:
    try:
        return isinstance(value, hint)
    except TypeError:  # TypedDict, a generic alias: not checkable
        return False


_INPUT_SHAPES: dict[type[Actor], Shape | None] = {}


def input_shape(definition: type[Actor]) -> Shape | None:
    """Return the shape of the creation input (``create_state``'s or ``on_create``'s
    ``input`` annotation), or ``None``: the input goes to them as it is.

    Looked up once per class.
    """
    if definition in _INPUT_SHAPES:
        return _INPUT_SHAPES[definition]
    found = None
    for hook in ("create_state", "on_create"):
        if definition.overrides(hook):
            found = shape_of(resolved_hints(getattr(definition, hook)).get("input"))
            if found is not None:
                break
    _INPUT_SHAPES[definition] = found
    return found
