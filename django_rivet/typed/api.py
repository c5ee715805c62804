"""What clients can call, described with JSON Schemas (no Django, no registry).

The actor runtime fills these from its classes
(:func:`django_rivet.actors.schemas.describe`); :mod:`.typescript` and the
OpenAPI document render them. Schemas of what a client sends are in
``validation`` mode, of what it receives in ``serialization`` mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ActionAPI", "ActorAPI", "Parameter", "QueueAPI"]

Schema = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One positional argument of an action."""

    name: str
    schema: Schema
    required: bool = True


@dataclass(frozen=True, slots=True)
class ActionAPI:
    """An action: its arguments and its result."""

    name: str
    params: tuple[Parameter, ...]
    result: Schema
    # The schema of each further argument (``*args``), if it takes more.
    rest: Schema | None = None
    doc: str = ""


@dataclass(frozen=True, slots=True)
class QueueAPI:
    """A queue handler: the body it takes and the reply a waiting sender gets."""

    name: str
    body: Schema
    reply: Schema
    doc: str = ""


@dataclass(frozen=True, slots=True)
class ActorAPI:
    """One actor class, as clients see it."""

    name: str
    actions: tuple[ActionAPI, ...]
    queues: tuple[QueueAPI, ...] = ()
    # Declared events: the schema of each argument.
    events: dict[str, tuple[Schema, ...]] = field(default_factory=dict)
    state: Schema = field(default_factory=dict)
    conn_params: Schema = field(default_factory=dict)
    input: Schema = field(default_factory=dict)
    doc: str = ""
