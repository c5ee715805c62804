"""The JSON Schema of an annotation, as a client sends or receives its values.

:class:`Schemas` collects the schemas of many annotations with one table
of shared definitions (``$defs``, or an OpenAPI document's
``components/schemas``): a model used by ten actions is defined once.
Builtin annotations are mapped here (no pydantic needed); any other comes
from pydantic's ``TypeAdapter.json_schema``, in ``validation`` mode for
what a client sends (a ``Decimal`` may be a number or a string) and
``serialization`` mode for what it receives (a ``Decimal`` is a string).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from typing import Any, Literal

from .shapes import Shape, shape_of

__all__ = ["Mode", "Schemas"]

Mode = Literal["validation", "serialization"]

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    bytes: {"type": "string", "contentEncoding": "base64"},
    bytearray: {"type": "string", "contentEncoding": "base64"},
    type(None): {"type": "null"},
    None: {"type": "null"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    dict: {"type": "object"},
}
_ANY = (typing.Any, object, inspect.Parameter.empty)


class Schemas:
    """JSON Schemas of annotations, sharing one table of definitions.

    :meth:`of` returns a schema at once; those pydantic makes are filled in
    by :meth:`finish`, all in one pass (a model read and written gets two
    definitions, ``Line-Input`` and ``Line-Output``, when they differ).
    """

    def __init__(self, ref_prefix: str = "#/$defs/") -> None:
        self.ref_prefix = ref_prefix
        #: Shared definitions, by name (``components/schemas`` in OpenAPI).
        self.definitions: dict[str, Any] = {}
        self._pending: list[tuple[int, Mode, Shape, dict[str, Any]]] = []

    def of(self, hint: Any, mode: Mode = "validation") -> dict[str, Any]:
        """Return the schema of ``hint`` (``{}``: any value).

        Complete once :meth:`finish` ran, when ``hint`` needs pydantic.
        """
        shape = shape_of(hint)
        if shape is not None:
            schema: dict[str, Any] = {}
            self._pending.append((len(self._pending), mode, shape, schema))
            return schema
        if any(hint is other for other in _ANY):
            return {}
        scalar = _SCALARS.get(hint)
        if scalar is not None:
            return dict(scalar)
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(arg, mode) for arg in args]}
        if origin is list:
            return {"type": "array", "items": self.of(args[0], mode)}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.of(args[0], mode)}
            return {
                "type": "array",
                "prefixItems": [self.of(arg, mode) for arg in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        if origin is dict:
            return {"type": "object", "additionalProperties": self.of(args[1], mode)}
        return {}

    def finish(self) -> dict[str, Any]:
        """Fill in the schemas pydantic makes; return the definitions."""
        if not self._pending:
            return self.definitions
        adapter_class = type(self._pending[0][2].adapter)
        made, defs = adapter_class.json_schemas(
            [(key, mode, shape.adapter) for key, mode, shape, _ in self._pending],
            ref_template=self.ref_prefix + "{model}",
            schema_generator=_generator(),
        )
        for key, mode, _, schema in self._pending:
            schema.update(made[(key, mode)])
        self.definitions.update(defs.get("$defs", {}))
        self._pending.clear()
        return self.definitions


@functools.cache
def _generator() -> type[Any]:
    """pydantic's schema generator; what is sent always holds defaulted fields.

    In ``serialization`` mode a field with a default is required: the
    server always sends it (pydantic leaves it optional unless a model's
    config says otherwise). A ``TypedDict`` key that is not required may
    still be absent.
    """
    from pydantic.json_schema import GenerateJsonSchema

    class Generator(GenerateJsonSchema):
        def field_is_required(self, field: Any, total: bool) -> bool:
            if self.mode != "serialization":
                return bool(super().field_is_required(field, total))
            if field.get("type") == "typed-dict-field":
                return bool(field.get("required", total))
            return not field.get("serialization_exclude")

    return Generator
