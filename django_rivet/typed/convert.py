"""From what pydantic dumps to the value domain: :func:`to_domain`.

pydantic's python-mode dump turns models, dataclasses and ``TypedDict``s
into dicts but keeps leaves of other types as they are (``Decimal``,
``Enum`` members, ``date``, ``set``...). The value domain carries some of
them natively (``datetime``, ``UUID``, ``bytes``: CBOR tags, and their JSON
forms); the others get pydantic's JSON form, so a ``Decimal`` becomes its
exact decimal string (``"9.990"``), an ``Enum`` its value, a ``date`` its
ISO string, a ``timedelta`` its ISO 8601 duration, a ``set`` a list.
"""

from __future__ import annotations

import enum
import uuid
from datetime import date, datetime
from typing import Any

from ..domain import MAX_DEPTH

__all__ = ["to_domain"]

# Leaves the value domain carries as they are (their subclasses, Enums
# aside, too: bool is an int).
_NATIVE = frozenset({type(None), bool, int, float, str, bytes, datetime, uuid.UUID})


def to_domain(value: Any, depth: int = 0) -> Any:
    """Return ``value`` (a pydantic python-mode dump) as a value of the domain.

    Containers are copied (tuples and sets become lists, map keys strings);
    past :data:`~django_rivet.domain.MAX_DEPTH` the value is returned as it
    is, for the domain check to refuse it with its path.
    """
    kind = type(value)
    if kind in _NATIVE:
        return value
    if depth > MAX_DEPTH:
        return value
    deeper = depth + 1
    if kind is dict:
        return {
            key if type(key) is str else _key(key): to_domain(item, deeper)
            for key, item in value.items()
        }
    if kind is list or kind is tuple:
        return [to_domain(item, deeper) for item in value]
    if isinstance(value, enum.Enum):
        return to_domain(value.value, deeper)
    if isinstance(value, datetime | uuid.UUID):
        return value
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str | int | float | bytes):
        return value
    if isinstance(value, dict):
        return to_domain(dict(value), depth)
    if isinstance(value, list | tuple | set | frozenset):
        return [to_domain(item, deeper) for item in value]
    converted = _jsonable(value)
    # Unconvertible: kept, so the domain check refuses it naming its path.
    return value if converted is value else to_domain(converted, depth)


def _key(key: Any) -> str:
    converted = to_domain(key)
    return converted if isinstance(converted, str) else str(converted)


def _jsonable(value: Any) -> Any:
    # pydantic's JSON form: Decimal -> str, timedelta -> "P1D", Url -> str,
    # a model or dataclass found under Any -> a dict. Only reached for types
    # no builtin annotation produces, so pydantic is installed.
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(value)
    except Exception:  # PydanticSerializationError: no JSON form
        return value
