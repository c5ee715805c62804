"""Searchable attributes of workflows: ``start(..., attributes={"tenant": "42"})``.

A workflow's attributes are set once, when it is started, and stored one
``WorkflowAttribute`` row each, indexed by key and value: what
``workflows.filter(attributes=...)`` looks up by equality. Values are
strings or integers (a ``bool`` is neither here: it is refused rather than
stored as 0 or 1); ``{"tier": 3}`` and ``{"tier": "3"}`` are different
values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Q

from ..models import WorkflowAttribute

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_KEY_LENGTH",
    "MAX_VALUE_LENGTH",
    "Row",
    "check",
    "matching",
    "read",
    "store",
]

MAX_ATTRIBUTES = 32
MAX_KEY_LENGTH = 64
MAX_VALUE_LENGTH = 255
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1

# (key, stored value, is an integer)
Row = tuple[str, str, bool]


def _row(key: Any, value: Any) -> Row:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LENGTH:
        raise ValueError(
            f"A workflow attribute's key is a string of 1-{MAX_KEY_LENGTH} "
            f"characters, not {key!r}"
        )
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(
            f"Workflow attribute {key!r} must be a string or an integer, "
            f"not {type(value).__name__}"
        )
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValueError(f"Workflow attribute {key!r} is out of the 64-bit range")
        return key, str(value), True
    if len(value) > MAX_VALUE_LENGTH:
        raise ValueError(
            f"Workflow attribute {key!r} is longer than {MAX_VALUE_LENGTH} characters"
        )
    return key, value, False


def check(attributes: Mapping[str, str | int] | None) -> list[Row]:
    """Return the rows of ``attributes``; refuse what cannot be stored or searched."""
    if attributes is None:
        return []
    if not isinstance(attributes, Mapping):
        raise TypeError("Workflow attributes are a mapping of names to values")
    if len(attributes) > MAX_ATTRIBUTES:
        raise ValueError(f"A workflow has at most {MAX_ATTRIBUTES} attributes")
    return [_row(key, value) for key, value in attributes.items()]


def store(workflow_id: str, rows: list[Row]) -> None:
    """Write a new workflow's attribute rows (in its start's transaction)."""
    if rows:
        WorkflowAttribute.objects.bulk_create(
            WorkflowAttribute(workflow_id=workflow_id, key=k, value=v, number=n)
            for k, v, n in rows
        )


def read(workflow_id: str) -> dict[str, str | int]:
    """Return the attributes of ``workflow_id`` (``{}`` without any)."""
    found = WorkflowAttribute.objects.filter(workflow_id=workflow_id).order_by("key")
    return {
        key: int(value) if number else value
        for key, value, number in found.values_list("key", "value", "number")
    }


def matching(attributes: Mapping[str, str | int]) -> Q:
    """Return the condition on workflows having every attribute given."""
    condition = Q()
    for key, value, number in check(attributes):
        having = WorkflowAttribute.objects.filter(key=key, value=value, number=number)
        condition &= Q(pk__in=having.values("workflow_id"))
    return condition
