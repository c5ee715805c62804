"""One annotation's conversion to and from the value domain: :class:`Shape`.

Builtin annotations need none: ``str``, ``int``, ``float``, ``bool``,
``bytes``, ``None``, ``Any``, ``list``, ``dict``, ``tuple`` and their
unions and parameters (``list[int]``, ``dict[str, Any] | None``) are
checked as before, by their outer type, and cost nothing. Any other
annotation (a dataclass, ``TypedDict``, pydantic model, ``Enum``,
``Literal``, ``Decimal``, ``datetime``, ``UUID``, ``Annotated``
constraints, or a builtin container of one of them) gets a :class:`Shape`,
whose pydantic ``TypeAdapter`` is built on first use.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from ..domain import format_path
from ..exceptions import InvalidValue, RivetError
from .convert import to_domain

__all__ = [
    "TYPES_EXTRA",
    "MissingTypesExtra",
    "Shape",
    "describe",
    "invalid",
    "needs_shape",
    "resolved_hints",
    "returned_shape",
    "shape_of",
]

#: What to install for annotations beyond the builtin ones.
TYPES_EXTRA = "pip install 'django-rivet[types]'"
# At most this many problems are listed in an error's metadata.
MAX_LISTED = 10

_PLAIN: frozenset[Any] = frozenset(
    {
        str,
        int,
        float,
        bool,
        bytes,
        bytearray,
        type(None),
        None,
        list,
        dict,
        tuple,
        object,
        Any,
        inspect.Parameter.empty,
    }
)
_UNIONS = (typing.Union, types.UnionType)


class MissingTypesExtra(ImportError):
    """An annotation needs pydantic to convert values, and it is not installed."""


@functools.cache
def _pydantic() -> Any:
    try:
        import pydantic
    except ImportError as exc:
        raise MissingTypesExtra(
            "Converting annotated values (dataclasses, TypedDict, pydantic "
            f"models, Enum, Decimal, datetime...) needs pydantic: {TYPES_EXTRA}"
        ) from exc
    return pydantic


def _serialization_error() -> type[Exception]:
    from pydantic_core import PydanticSerializationError

    return PydanticSerializationError


def needs_shape(hint: Any) -> bool:
    """Tell whether values of ``hint`` need converting (not a builtin annotation)."""
    try:
        if hint in _PLAIN:
            return False
    except TypeError:  # an unhashable annotation object
        return True
    origin = typing.get_origin(hint)
    if origin in _UNIONS or origin in (list, dict, tuple):
        return any(
            needs_shape(arg) for arg in typing.get_args(hint) if arg is not Ellipsis
        )
    return True


def shape_of(hint: Any) -> Shape | None:
    """Return the :class:`Shape` of ``hint``, or ``None`` for a builtin annotation."""
    if not needs_shape(hint):
        return None
    try:
        return _shared(hint)
    except TypeError:  # unhashable: not shared
        return Shape(hint)


@functools.lru_cache(maxsize=4096)
def _shared(hint: Any) -> Shape:
    # One shape (one adapter) per annotation, however many places declare it.
    return Shape(hint)


class Shape:
    """Convert values of one annotation: :meth:`load` in, :meth:`dump` out."""

    __slots__ = ("_adapter", "_json", "hint")

    def __init__(self, hint: Any) -> None:
        self.hint = hint
        self._adapter: Any = None
        # Dumped in pydantic's json mode (one pass in Rust) when nothing in
        # the type dumps differently there than the domain carries it.
        self._json = False

    def __repr__(self) -> str:
        return f"<Shape {describe(self.hint)}>"

    @property
    def adapter(self) -> Any:
        """The pydantic ``TypeAdapter`` (built, and pydantic imported, on first use)."""
        adapter = self._adapter
        if adapter is None:
            pydantic = _pydantic()
            try:
                adapter = pydantic.TypeAdapter(self.hint)
            except pydantic.PydanticUserError as exc:
                raise TypeError(
                    f"The annotation {describe(self.hint)} cannot be converted: {exc}"
                ) from exc
            except pydantic.PydanticSchemaGenerationError as exc:
                raise TypeError(
                    f"The annotation {describe(self.hint)} cannot be converted: "
                    f"{exc.message}"
                ) from exc
            self._json = not (_types(adapter.core_schema) & _NOT_JSON)
            self._adapter = adapter
        return adapter

    def load(
        self, value: Any, where: str = "value", error: type[RivetError] = InvalidValue
    ) -> Any:
        """Return the domain value ``value`` as the annotated type.

        Raises ``error`` naming the path from ``where``
        (``args[0].items[2].price``) and the reason.
        """
        try:
            return self.adapter.validate_python(value)
        except _pydantic().ValidationError as exc:
            raise invalid(exc, where, error) from None

    def dump(
        self, value: Any, where: str = "value", error: type[RivetError] = InvalidValue
    ) -> Any:
        """Return ``value`` (of the annotated type) as a value of the domain.

        A value of another type is dumped as well as pydantic can (and then
        refused where it is loaded or checked).
        """
        adapter = self.adapter
        try:
            if self._json:
                return adapter.dump_python(
                    value, mode="json", by_alias=True, warnings=False
                )
            raw = adapter.dump_python(value, by_alias=True, warnings=False)
        except _serialization_error() as exc:
            raise error(
                f"{where}: cannot be converted: {exc}",
                metadata={"path": where, "reason": str(exc)},
            ) from None
        return to_domain(raw)

    def convert(
        self, value: Any, where: str = "value", error: type[RivetError] = InvalidValue
    ) -> tuple[Any, Any]:
        """Return ``(domain value, typed value)``: ``value`` as sent and as received.

        What a caller in the same process gets is what a caller over the
        wire would (a copy, checked against the annotation).
        """
        domain = self.dump(value, where, error)
        return domain, self.load(domain, where, error)


# Core schema types whose json-mode dump is not what the domain carries:
# datetime, UUID and bytes are CBOR tags and byte strings there (json mode
# makes strings), a float's NaN or infinity must be refused (json mode makes
# null), and Any or custom functions may hold any of these.
_NOT_JSON = frozenset(
    {
        "any",
        "bytes",
        "callable",
        "datetime",
        "float",
        "function-plain",
        "function-wrap",
        "is-instance",
        "uuid",
    }
)


def _types(schema: Any, found: set[str] | None = None) -> set[str]:
    """Return every ``type`` named in a pydantic core schema."""
    found = set() if found is None else found
    if isinstance(schema, dict):
        kind = schema.get("type")
        if isinstance(kind, str):
            found.add(kind)
        for item in schema.values():
            if isinstance(item, dict | list):
                _types(item, found)
    elif isinstance(schema, list):
        for item in schema:
            _types(item, found)
    return found


def invalid(exc: Any, where: str, error: type[RivetError]) -> RivetError:
    """Return ``error`` for a pydantic ``ValidationError``, naming each path."""
    problems = exc.errors(include_url=False, include_input=False, include_context=False)
    listed = [
        {
            "path": format_path(where, list(problem["loc"])),
            "reason": problem["msg"],
            "type": problem["type"],
        }
        for problem in problems[:MAX_LISTED]
    ]
    first = listed[0]
    message = f"{first['path']}: {first['reason']}"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more)"
    return error(
        message,
        metadata={
            "path": first["path"],
            "reason": first["reason"],
            "errors": listed,
        },
    )


def describe(hint: Any) -> str:
    """Name an annotation for messages (``Item``, ``list[Item]``)."""
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


# -- a callable's return annotation (step functions) ----------------------------------
_RETURNED: dict[Any, Shape | None] = {}


def returned_shape(fn: Callable[..., Any]) -> Shape | None:
    """Return the :class:`Shape` of ``fn``'s return annotation, if it needs one.

    For step functions: cached per function code, and free for functions
    without a return annotation (lambdas). Raises ``TypeError`` when the
    annotation names a type that cannot be resolved (a class local to a
    function, under ``from __future__ import annotations``).
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    annotations = getattr(fn, "__annotations__", None)
    if not annotations or "return" not in annotations:
        return None
    key = getattr(fn, "__code__", fn)
    try:
        return _RETURNED[key]
    except KeyError:
        pass
    except TypeError:  # unhashable callable
        return shape_of(_return_hint(fn))
    shape = shape_of(_return_hint(fn))
    _RETURNED[key] = shape
    return shape


def _return_hint(fn: Callable[..., Any]) -> Any:
    return resolved_hints(fn).get("return")


def resolved_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Return ``fn``'s annotations, resolved (``Annotated`` kept).

    Raises ``TypeError`` naming the function when a name in them cannot be
    resolved (a class local to a function, under ``from __future__ import
    annotations``, or one not defined yet).
    """
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(
            f"The annotations of {name} cannot be resolved: {exc}. Define the "
            "types they name at module level."
        ) from exc
