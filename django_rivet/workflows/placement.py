"""Where a start puts a workflow: its queue, priority, dedup key, partition.

``workflows.start(..., queue=, priority=, dedup_key=, partition_key=)``
checks its arguments here (:func:`placement`) before anything is stored,
and a start refused by a queue's deduplication index is turned into
``workflow/duplicate`` naming the holder (:func:`duplicate_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import IntegrityError

from ..exceptions import (
    InvalidQueueArguments,
    PartitionKeyRequired,
    UnknownWorkflowQueue,
    WorkflowDeduplicated,
)
from ..models import WORKFLOW_ACTIVE, Workflow, WorkflowStatus
from .queues import DEDUP_KEY_MAX_LENGTH, PRIORITY_RANGE, configured

__all__ = ["Placement", "create_placed", "duplicate_of", "invalid", "placement"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where ``workflows.start(..., queue=...)`` puts a workflow."""

    queue: str
    priority: int = 0
    dedup_key: str = ""
    partition_key: str = ""

    def fields(self, run_after: datetime | None = None) -> dict[str, Any]:
        """Return the row fields of a queued workflow (not admitted before
        ``run_after``)."""
        return {
            "status": WorkflowStatus.QUEUED,
            "wake_at": None,
            "run_after": run_after,
            "queue": self.queue,
            "priority": self.priority,
            "dedup_key": self.dedup_key,
            "partition_key": self.partition_key,
        }


def _key(value: str | None, what: str) -> str:
    if value is not None and (
        not isinstance(value, str)
        or not 0 < len(value) <= DEDUP_KEY_MAX_LENGTH
        or "\x00" in value
    ):
        raise invalid(f"{what} is 1 to {DEDUP_KEY_MAX_LENGTH} characters, no NUL", what)
    return value or ""


def invalid(message: str, argument: str | None = None) -> InvalidQueueArguments:
    metadata = None if argument is None else {"argument": argument}
    return InvalidQueueArguments(message, metadata=metadata)


def placement(
    queue: str | None,
    priority: int = 0,
    dedup_key: str | None = None,
    partition_key: str | None = None,
) -> Placement | None:
    """Check the queue arguments of a start; ``None`` for a direct start.

    Raises ``workflow/unknown_queue`` for a queue that is not configured,
    ``workflow/partition_key_required`` for a partitioned one without a
    ``partition_key``, ``workflow/invalid_queue_args`` (400; also a
    ``ValueError`` and a ``TypeError``) for a bad priority or key, a key on
    a queue that is not partitioned, or any of them without a queue.
    """
    if queue is None:
        if priority != 0 or dedup_key is not None or partition_key is not None:
            raise invalid("priority, dedup_key and partition_key need a queue=")
        return None
    config = configured().get(queue) if isinstance(queue, str) else None
    if config is None:
        raise UnknownWorkflowQueue(
            f"No workflow queue {queue!r} is configured in RIVET['WORKFLOW_QUEUES']",
            metadata={"queue": queue},
        )
    if config.partitioned and partition_key is None:
        raise PartitionKeyRequired(
            f"Workflow queue {queue!r} is partitioned: give a partition_key",
            metadata={"queue": queue},
        )
    if not config.partitioned and partition_key is not None:
        raise invalid(
            f"Workflow queue {queue!r} is not partitioned: it takes no "
            "partition_key (give it partition_concurrency or partition_rate_limit)"
        )
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise invalid("priority is an integer (lower starts first)", "priority")
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise invalid(
            f"priority is from {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]}", "priority"
        )
    return Placement(
        queue,
        priority,
        _key(dedup_key, "dedup_key"),
        _key(partition_key, "partition_key"),
    )


def create_placed(where: Placement | None, create: Callable[[], T]) -> T:
    """Return ``create()``; a deduplication refusal is ``workflow/duplicate``."""
    try:
        return create()
    except IntegrityError as error:
        if where is None:
            raise
        raise duplicate_of(where, error) from error


def duplicate_of(where: Placement, error: IntegrityError) -> WorkflowDeduplicated:
    """Return the error for a start refused by the deduplication index.

    Re-raises ``error`` when no workflow of the queue holds the key (the
    insert failed for another reason).
    """
    holder = (
        Workflow.objects.filter(
            queue=where.queue, dedup_key=where.dedup_key, status__in=WORKFLOW_ACTIVE
        )
        .values_list("pk", flat=True)
        .first()
    )
    if not where.dedup_key or holder is None:
        raise error
    # The holder may be another caller's workflow: its id (and the key,
    # which may be derived from what that caller sent) stays on the server.
    return WorkflowDeduplicated(
        f"A workflow of queue {where.queue!r} that has not finished holds this "
        "deduplication key",
        metadata={"queue": where.queue},
        holder=str(holder),
    )
