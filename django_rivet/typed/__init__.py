"""Typed values: converting what annotations declare to and from the value domain.

A handler, a workflow or a state that declares its types (a dataclass, a
``TypedDict``, a pydantic model, an ``Enum``, ``Decimal``, ``datetime``...)
gets values of those types; what crosses the wire and is stored stays in
the value domain (docs/values.md). A :class:`Shape` converts one annotation
both ways (:meth:`Shape.load` from the domain, :meth:`Shape.dump` to it);
:func:`shape_of` says whether an annotation needs one at all -- builtin
annotations (``str``, ``int``, ``list``, ``dict | None``...) do not, and
cost nothing. Conversion uses pydantic (the ``types`` extra), imported the
first time a shape is used.

This package imports nothing from Django, so the workflow engine and the
remote client use it too. :mod:`.jsonschema` gives an annotation's JSON
Schema; :mod:`.typescript` writes JSON Schemas as TypeScript.
"""

from .convert import to_domain
from .shapes import TYPES_EXTRA, MissingTypesExtra, Shape, returned_shape, shape_of

__all__ = [
    "TYPES_EXTRA",
    "MissingTypesExtra",
    "Shape",
    "returned_shape",
    "shape_of",
    "to_domain",
]
