"""Finding workflows: the queryset behind ``workflows.filter`` and ``count``.

Every filter is optional and they combine with AND; the names follow DBOS's
``list_workflows`` where it has one (``docs/workflows.md``, "Finding
workflows"). The queries use the ``Workflow`` indexes (status and creation
time, name, parent, queue, the finished ones) and the attributes' index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict

from django.db.models import Q

from .. import clock
from ..models import Workflow, WorkflowStatus
from ..models.workflows import WorkflowQuerySet
from . import attributes as workflow_attributes

__all__ = ["ORDERS", "Filters", "matching", "page"]

_STATUSES = frozenset(WorkflowStatus.values)
ORDERS = ("desc", "asc")


class Filters(TypedDict, total=False):
    """The filters of ``workflows.filter`` and ``workflows.count``."""

    name: str | Sequence[str] | None
    status: str | Iterable[str] | None
    ids: Iterable[str] | None
    id_prefix: str | Sequence[str] | None
    waiting_for: str | None
    parent_id: str | None
    has_parent: bool | None
    queue: str | None
    version: str | Sequence[str] | None
    created_after: datetime | float | None
    created_before: datetime | float | None
    completed_after: datetime | float | None
    completed_before: datetime | float | None
    attributes: Mapping[str, str | int] | None


_KNOWN = frozenset(Filters.__annotations__)


def _moment(value: datetime | float | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return clock.to_datetime(float(value))


def _some(value: str | Iterable[str]) -> list[str]:
    return [value] if isinstance(value, str) else [str(item) for item in value]


def _statuses(status: str | Iterable[str]) -> list[str]:
    wanted = _some(status)
    unknown = sorted(set(wanted) - _STATUSES)
    if unknown:
        raise ValueError(
            f"Unknown workflow status {unknown[0]!r}: one of "
            + ", ".join(sorted(_STATUSES))
        )
    return wanted


def _prefixes(prefix: str | Sequence[str]) -> Q:
    condition = Q(pk__in=[])
    for each in _some(prefix):
        condition |= Q(pk__startswith=each)
    return condition


def _times(
    rows: WorkflowQuerySet, field: str, after: Any, before: Any
) -> WorkflowQuerySet:
    after, before = _moment(after), _moment(before)
    if after is not None:
        rows = rows.filter(**{f"{field}__gt": after})
    if before is not None:
        rows = rows.filter(**{f"{field}__lt": before})
    return rows


def matching(**filters: Any) -> WorkflowQuerySet:
    """Return the workflows matching every filter of :class:`Filters` given.

    ``name``, ``status``, ``id_prefix`` and ``version`` take one value or
    several (``version=""``: the workflows started without a version);
    ``ids`` a list of ids; ``waiting_for`` a message name the workflow's
    current wait includes (``"*"`` for any-message waits, ``"child:<id>"``
    for a parent waiting for a child); ``has_parent`` True for children,
    False for top-level workflows; the times are datetimes or epoch seconds,
    exclusive (``completed_*``: when it completed, failed or was cancelled;
    a workflow that has not finished never matches them); ``attributes``
    the attributes it was started with, by equality. An unknown filter is a
    ``TypeError``, an unknown status a ``ValueError``.
    """
    unknown = sorted(set(filters) - _KNOWN)
    if unknown:
        raise TypeError(f"Unknown workflow filter {unknown[0]!r}")
    given = {key: value for key, value in filters.items() if value is not None}
    rows = Workflow.objects.all()
    if "name" in given:
        rows = rows.filter(name__in=_some(given["name"]))
    if "status" in given:
        rows = rows.filter(status__in=_statuses(given["status"]))
    if "ids" in given:
        rows = rows.filter(pk__in=_some(given["ids"]))
    if "id_prefix" in given:
        rows = rows.filter(_prefixes(given["id_prefix"]))
    if "waiting_for" in given:
        rows = rows.waiting_for_name(given["waiting_for"])
    if "parent_id" in given:
        rows = rows.children_of(given["parent_id"])
    if "has_parent" in given:
        rows = (
            rows.exclude(parent_id="")
            if given["has_parent"]
            else rows.filter(parent_id="")
        )
    if "queue" in given:
        rows = rows.filter(queue=given["queue"])
    if "version" in given:
        rows = rows.filter(version__in=_some(given["version"]))
    rows = _times(
        rows, "created_at", given.get("created_after"), given.get("created_before")
    )
    if "completed_after" in given or "completed_before" in given:
        rows = _times(
            rows.finished(),
            "finished_at",
            given.get("completed_after"),
            given.get("completed_before"),
        )
    if "attributes" in given:
        rows = rows.filter(workflow_attributes.matching(given["attributes"]))
    return rows


def page(
    order: str = "desc", offset: int = 0, limit: int | None = 100, **filters: Any
) -> list[tuple[str, str]]:
    """Return ``(id, name)`` of the matching workflows, by creation time.

    ``order`` is ``"desc"`` (newest first) or ``"asc"``; ``offset`` skips
    that many; ``limit`` None returns all.
    """
    if order not in ORDERS:
        raise ValueError(f"A workflow order is 'asc' or 'desc', not {order!r}")
    if int(offset) < 0:
        raise ValueError("A workflow offset cannot be negative")
    by = ("created_at", "id") if order == "asc" else ("-created_at", "-id")
    rows = matching(**filters).order_by(*by).values_list("id", "name")
    end = None if limit is None else int(offset) + max(int(limit), 0)
    return list(rows[int(offset) : end])
