"""Actor classes described for clients: JSON Schemas from their annotations.

:func:`describe` reads each class's actions (parameter and return
annotations), queue handlers (the message's annotation and the reply's),
declared ``events``, ``state_type``, connection parameters (the ``params``
annotation of ``on_before_connect`` or ``create_conn_state``) and creation
input (the ``input`` annotation of ``create_state`` or ``on_create``).
What is not annotated is described as any value. ``manage.py
rivet_typescript`` and ``rivet_openapi`` render the result.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any

from ..typed.api import ActionAPI, ActorAPI, Parameter, QueueAPI
from ..typed.jsonschema import Schemas
from .definition import Actor, HandlerSpec

__all__ = ["describe"]

_PLAIN = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NONE: dict[str, Any] = {"type": "null"}


def describe(classes: Iterable[type[Actor]], schemas: Schemas) -> list[ActorAPI]:
    """Describe ``classes`` (sorted by name); call ``schemas.finish()`` after."""
    return [_actor(cls, schemas) for cls in sorted(classes, key=lambda c: c.name)]


def _actor(cls: type[Actor], schemas: Schemas) -> ActorAPI:
    actions = tuple(
        _action(cls, spec, schemas)
        for _, spec in sorted(cls.actions.items(), key=lambda item: item[0])
    )
    queues = tuple(
        _queue(cls, spec, schemas)
        for _, spec in sorted(cls.queue_handlers.items(), key=lambda item: item[0])
    )
    events = {
        name: tuple(
            schemas.of(hint, "serialization")
            for hint in (declared if isinstance(declared, tuple) else (declared,))
        )
        for name, declared in sorted((cls.events or {}).items())
    }
    state = (
        schemas.of(cls.state_type, "serialization")
        if cls.state_type is not None
        else {}
    )
    return ActorAPI(
        name=cls.name,
        actions=actions,
        queues=queues,
        events=events,
        state=state,
        conn_params=_hook_parameter(
            cls, ("on_before_connect", "create_conn_state"), "params", schemas
        ),
        input=_hook_parameter(cls, ("create_state", "on_create"), "input", schemas),
        doc=inspect.getdoc(cls) or "",
    )


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # unresolvable: rivet.E106 says so; described as any
        return {}


def _result(hints: dict[str, Any], schemas: Schemas) -> dict[str, Any]:
    if "return" not in hints:
        return {}
    hint = hints["return"]
    if hint is None or hint is type(None):
        return dict(_NONE)
    return schemas.of(hint, "serialization")


def _action(cls: type[Actor], spec: HandlerSpec, schemas: Schemas) -> ActionAPI:
    function = getattr(cls, spec.attribute)
    hints = _hints(function)
    params: list[Parameter] = []
    rest: dict[str, Any] | None = None
    for parameter in list(spec.signature.parameters.values())[2:]:
        hint = hints.get(parameter.name, inspect.Parameter.empty)
        if parameter.kind == inspect.Parameter.VAR_POSITIONAL:
            rest = schemas.of(hint, "validation")
        elif parameter.kind in _PLAIN:
            required = parameter.default is inspect.Parameter.empty
            params.append(
                Parameter(parameter.name, schemas.of(hint, "validation"), required)
            )
    return ActionAPI(
        name=spec.wire_name,
        params=tuple(params),
        result=_result(hints, schemas),
        rest=rest,
        doc=inspect.getdoc(function) or "",
    )


def _queue(cls: type[Actor], spec: HandlerSpec, schemas: Schemas) -> QueueAPI:
    function = getattr(cls, spec.attribute)
    hints = _hints(function)
    names = [
        p.name for p in list(spec.signature.parameters.values())[2:] if p.kind in _PLAIN
    ]
    body_hint = hints.get(names[0], inspect.Parameter.empty) if names else None
    return QueueAPI(
        name=spec.wire_name,
        body=schemas.of(body_hint, "validation"),
        reply=_result(hints, schemas),
        doc=inspect.getdoc(function) or "",
    )


def _hook_parameter(
    cls: type[Actor], hooks: tuple[str, ...], name: str, schemas: Schemas
) -> dict[str, Any]:
    """The schema of a hook's parameter ``name``, from the first hook annotating it."""
    for hook in hooks:
        if not cls.overrides(hook):
            continue
        hint = _hints(getattr(cls, hook)).get(name)
        if hint is not None:
            return schemas.of(hint, "validation")
    return {}
