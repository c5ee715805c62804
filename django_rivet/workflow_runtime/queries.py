"""Finding workflows: the queryset behind ``workflows.filter`` and ``count``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from .. import clock
from ..models import Workflow, WorkflowStatus
from ..models.workflows import WorkflowQuerySet

__all__ = ["matching"]

_STATUSES = frozenset(WorkflowStatus.values)


def _moment(value: datetime | float | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return clock.to_datetime(float(value))


def matching(
    *,
    name: str | None = None,
    status: str | Iterable[str] | None = None,
    waiting_for: str | None = None,
    parent_id: str | None = None,
    created_after: datetime | float | None = None,
    created_before: datetime | float | None = None,
) -> WorkflowQuerySet:
    """Return the workflows matching every filter given, newest first.

    ``status`` is one status or several; ``waiting_for`` a message name the
    workflow's current wait includes (``"*"`` for any-message waits,
    ``"child:<id>"`` for a parent waiting for a child); ``created_after``
    and ``created_before`` are datetimes or epoch seconds (exclusive).
    Unknown statuses are a ``ValueError``.
    """
    rows = Workflow.objects.all()
    if name is not None:
        rows = rows.filter(name=name)
    if status is not None:
        wanted = [status] if isinstance(status, str) else list(status)
        unknown = sorted(set(wanted) - _STATUSES)
        if unknown:
            raise ValueError(
                f"Unknown workflow status {unknown[0]!r}: one of "
                + ", ".join(sorted(_STATUSES))
            )
        rows = rows.filter(status__in=wanted)
    if waiting_for is not None:
        rows = rows.waiting_for_name(waiting_for)
    if parent_id is not None:
        rows = rows.children_of(parent_id)
    after = _moment(created_after)
    if after is not None:
        rows = rows.filter(created_at__gt=after)
    before = _moment(created_before)
    if before is not None:
        rows = rows.filter(created_at__lt=before)
    return rows.order_by("-created_at", "-id")
