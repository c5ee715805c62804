"""Partitioned workflow queues: admission partition by partition, in turn.

A queue with ``partition_concurrency`` or ``partition_rate_limit`` holds
each workflow in a partition (``start(..., partition_key="tenant-42")``):
the partition limits hold per key, the queue's own ``concurrency`` and
``rate_limit`` over all keys together. An admission pass (under the queue's
lock, like any pass: :mod:`.queues`) serves the partitions that have queued
workflows in turn, one workflow each per round, starting after the
partition the previous pass served last (the queue row's
``partition_cursor``). So a partition with a long backlog never starves one
with a little work: when the queue-wide limit is the one that binds, every
waiting partition gets a start before any gets a second. Within a
partition, the lowest ``priority`` starts first, then the oldest.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, F, Q, Value, When

from ..models import WORKFLOW_ADMITTED, Workflow, WorkflowQueue, WorkflowStatus
from .wakeups import wake_fields

__all__ = ["reopens_at", "start_queued"]


def _of_queue(name: str) -> Any:
    # The ``queue <> ''`` term: SQLite uses a partial index only when the
    # query states its condition (see queues._of_queue).
    return Workflow.objects.filter(~Q(queue=""), queue=name)


def _per_key(rows: Any) -> dict[str, int]:
    counted = rows.values("partition_key").annotate(n=Count("pk")).order_by()
    return {key: n for key, n in counted.values_list("partition_key", "n")}


def _waiting(name: str) -> dict[str, int]:
    """Return the queue's partitions with queued workflows, and how many each."""
    queued = _of_queue(name).filter(status=WorkflowStatus.QUEUED)
    return _per_key(queued.filter(~Q(partition_key="")))


def _room(config: Any, now: datetime, keys: Iterable[str]) -> dict[str, int]:
    """Return how many more workflows each partition's own limits let start."""
    keys = list(keys)
    room = dict.fromkeys(keys, 2**31)  # no limit of their own
    rows = _of_queue(config.name).filter(partition_key__in=keys)
    if config.partition_concurrency is not None:
        running = _per_key(rows.filter(status__in=WORKFLOW_ADMITTED))
        for key in keys:
            room[key] = config.partition_concurrency - running.get(key, 0)
    if config.partition_rate_limit is not None:
        limit, period = config.partition_rate_limit
        window = now - timedelta(seconds=period)
        started = _per_key(rows.filter(started_at__gt=window))
        for key in keys:
            room[key] = min(room[key], limit - started.get(key, 0))
    return room


def _turns(
    waiting: dict[str, int], room: dict[str, int], cursor: str, free: int
) -> tuple[dict[str, int], str]:
    """Hand out ``free`` starts, one per partition per round; return them and
    the partition served last."""
    keys = sorted(waiting)
    order = [key for key in keys if key > cursor] + [k for k in keys if k <= cursor]
    turns: dict[str, int] = {}
    last = cursor
    while free > 0:
        served = False
        for key in order:
            taken = turns.get(key, 0)
            if free <= 0 or taken >= min(waiting[key], room[key]):
                continue
            turns[key] = taken + 1
            free -= 1
            last, served = key, True
        if not served:
            break
    return turns, last


def start_queued(config: Any, now: datetime, free: int) -> list[str]:
    """Start up to ``free`` queued workflows of a partitioned queue; return them.

    Call inside the queue's admission transaction (it holds the lock).
    """
    waiting = _waiting(config.name)
    if not waiting or free <= 0:
        return []
    queue_row = WorkflowQueue.objects.filter(name=config.name)
    cursor = queue_row.values_list("partition_cursor", flat=True).first() or ""
    turns, last = _turns(waiting, _room(config, now, waiting), cursor, free)
    ids: list[str] = []
    for key, count in turns.items():
        queued = _of_queue(config.name).filter(
            status=WorkflowStatus.QUEUED, partition_key=key
        )
        first = queued.order_by("priority", "created_at", "id")
        ids += [str(pk) for pk in first.values_list("pk", flat=True)[:count]]
    if not ids:
        return []
    Workflow.objects.filter(pk__in=ids, status=WorkflowStatus.QUEUED).update(
        status=WorkflowStatus.PENDING,
        wake_at=now,
        started_at=now,
        # A debounced burst ends as it starts (workflows/debounces.py).
        dedup_key=Case(When(debounced=True, then=Value("")), default=F("dedup_key")),
        updated_at=now,
        **wake_fields(now),
    )
    queue_row.update(partition_cursor=last)
    return ids


def reopens_at(config: Any, now: datetime) -> datetime | None:
    """Return when a partition held by its rate limit may start one again.

    None when no partition with queued workflows waits for its window.
    """
    if config.partition_rate_limit is None:
        return None
    limit, period = config.partition_rate_limit
    waiting = _waiting(config.name)
    room = _room(config, now, waiting)
    window = now - timedelta(seconds=period)
    times = []
    for key in waiting:
        if room[key] > 0:
            continue
        starts = _of_queue(config.name).filter(partition_key=key, started_at__gt=window)
        newest = starts.order_by("-started_at").values_list("started_at", flat=True)
        edge = next(iter(newest[limit - 1 : limit]), None)
        if edge is not None:
            times.append(edge + timedelta(seconds=period))
    return min(times) if times else None
