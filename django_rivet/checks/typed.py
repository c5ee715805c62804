"""Typed values and state versions, checked at start-up (rivet.E105-E107).

Each annotation that converts values (docs/types.md) is resolved and its
converter built now, so a type pydantic cannot convert, a name that does
not resolve, or a missing ``types`` extra shows at ``manage.py check``
instead of at an action's first call. Messages are module constants so
tests compare them by equality.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core.checks import Tags, register

from ..actors import registry
from ..actors.definition import Actor
from ..actors.states import input_shape
from ..conf import docs_url
from ..engine.shapes import workflow_shapes
from ..typed import TYPES_EXTRA, MissingTypesExtra, Shape, shape_of
from ..workflows import registry as workflow_registry
from .base import message

E105 = (
    "Actor {cls} has state_version {version} but no migrate_state: states "
    "stored by earlier versions could not be read."
)
E105_HINT = (
    "Define migrate_state(self, ctx, state, from_version) returning the state "
    "in version {version}'s shape (it runs once per actor, when its state is "
    "first loaded). See {docs}"
)
E106 = "{what} of {where} cannot be converted: {error}"
E106_HINT = (
    "Annotate with types pydantic converts (dataclasses, pydantic models, "
    "TypedDict -- typing_extensions.TypedDict on Python 3.11 --, Enum, "
    "Decimal, datetime, UUID, Literal, builtin containers of them), defined "
    "at module level. See {docs}"
)
E106_MISSING_HINT = (
    f"Install the types extra: {TYPES_EXTRA}. Builtin annotations (str, int, "
    "list, dict...) need nothing. See {{docs}}"
)
E107 = "Actor {cls} has {attribute} = {value!r}: {expected}."
E107_HINT = "See {docs}"


def _failure(what: str, where: str, error: Exception, obj: Any) -> Any:
    docs = docs_url("types")
    text = E106.format(what=what, where=where, error=error)
    if isinstance(error, MissingTypesExtra):
        return message("rivet.E106", text, E106_MISSING_HINT.format(docs=docs), obj)
    return message("rivet.E106", text, E106_HINT.format(docs=docs), obj)


def _built(shape: Shape | None) -> None:
    if shape is not None:
        shape.adapter  # noqa: B018 - builds the converter now


def _actor_shapes(cls: type[Actor]) -> Iterator[tuple[str, Any]]:
    """Yield ``(what, thunk)`` for each conversion of ``cls``."""
    for kind, specs in (("Action", cls.actions), ("Queue handler", cls.queue_handlers)):
        for spec in specs.values():
            if spec.types is not None:
                yield f"{kind} {spec.wire_name!r}", spec.types.shapes
    if cls.state_type is not None:
        yield "state_type", lambda: [shape_of(cls.state_type)]
    yield "The creation input", lambda: [input_shape(cls)]
    for event, declared in (cls.events or {}).items():
        hints = declared if isinstance(declared, tuple) else (declared,)
        yield f"Event {event!r}", lambda hints=hints: [shape_of(h) for h in hints]


def _check_state(cls: type[Actor], where: str) -> list[Any]:
    docs = docs_url("types")
    version, state_type = cls.state_version, cls.state_type
    wrong = [
        (attribute, value, expected)
        for attribute, value, ok, expected in (
            (
                "state_version",
                version,
                isinstance(version, int)
                and not isinstance(version, bool)
                and version >= 1,
                "it must be an integer, 1 or more",
            ),
            (
                "state_type",
                state_type,
                state_type is None or isinstance(state_type, type),
                "it must be a class (a dataclass or a pydantic model)",
            ),
        )
        if not ok
    ]
    if wrong:
        return [
            message(
                "rivet.E107",
                E107.format(cls=where, attribute=a, value=v, expected=e),
                E107_HINT.format(docs=docs),
                cls,
            )
            for a, v, e in wrong
        ]
    if version > 1 and not cls.overrides("migrate_state"):
        text = E105.format(cls=where, version=version)
        hint = E105_HINT.format(version=version, docs=docs)
        return [message("rivet.E105", text, hint, cls)]
    return []


@register(Tags.compatibility)
def check_typed_actors(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Check state versions and build every actor's converters."""
    messages: list[Any] = []
    for cls in registry.all_actors().values():
        try:
            where = registry.describe(cls)
            conversions = list(_actor_shapes(cls))
            messages += _check_state(cls, where)
        except Exception:  # an unreadable definition: rivet.E104 reports it
            continue
        for what, shapes in conversions:
            try:
                for shape in shapes():
                    _built(shape)
            except (TypeError, MissingTypesExtra) as error:
                messages.append(_failure(what, where, error, cls))
    return messages


@register(Tags.compatibility)
def check_typed_workflows(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Build every workflow's input and output converters."""
    messages: list[Any] = []
    for name, definition in workflow_registry.all_workflows().items():
        where = f"workflow {name!r}"
        try:
            shapes = workflow_shapes(definition.fn)
            _built(shapes.input)
            _built(shapes.output)
        except (TypeError, MissingTypesExtra) as error:
            messages.append(_failure("The input or output", where, error, name))
    return messages
