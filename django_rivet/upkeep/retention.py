"""Retention: what the runtime deletes so that its own tables stay bounded.

Settings (seconds or a ``timedelta``; ``None`` keeps forever):

- ``WORKFLOW_RETENTION``: a finished workflow (completed, failed, cancelled)
  with its history (``WorkflowKV``), inbox (``WorkflowMessage``), streams
  (``WorkflowStream``, ``WorkflowStreamValue``), attributes
  (``WorkflowAttribute``) and sent idempotency keys, that
  long after it finished. Active workflows (pending, running, sleeping,
  waiting for a message, rolling back) are never deleted whatever their age,
  nor a finished one whose lease an operation holds (recover, replay). Once
  deleted, its id is free: ``workflows.start`` with it starts a new one.
- ``SCHEDULE_RETENTION``: a fired schedule (done or error), that long after
  it fired. A cancelled schedule is deleted when it is cancelled.
- ``QUEUE_RETENTION``: a processed queue message (done or failed) and its
  reply, that long after it was processed.
- ``CRON_HISTORY``: runs kept per cron job that did not pass
  ``max_history``. It is enforced when each run is recorded, in the run's
  transaction, so no sweep has to scan for it; :func:`purge_all` also trims
  every job, for after the setting was lowered.

A destroyed actor needs no purge: every row it owns (KV, events, schedules,
cron jobs and their runs, queue messages, connections) references it with a
foreign key and is deleted in the destroying transaction.

The sweeper calls :func:`purge_pass`: at most one batch per table, each in a
short transaction of its own, oldest first through partial indexes on
``finished_at``. ``manage.py rivet_purge`` calls :func:`purge_all` (batches
until nothing is left) or, with ``--dry-run``, :func:`eligible_counts`,
which the admin shows too.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any, Protocol, Self, TypeVar

from django.db.models import F, QuerySet, Value, Window
from django.db.models.functions import Coalesce, RowNumber

from .. import clock
from ..conf import rivet_settings
from ..models import (
    CronRun,
    QueueMessage,
    Schedule,
    Workflow,
    WorkflowAttribute,
    WorkflowKV,
    WorkflowMessage,
    WorkflowMessageKey,
    WorkflowStream,
    WorkflowStreamValue,
    db,
)
from ..scheduling.claims import skip_locked
from ..scheduling.cron import history_limit

logger = logging.getLogger("django_rivet.retention")

__all__ = [
    "PURGE_BATCH",
    "RETENTION_SETTINGS",
    "TABLES",
    "eligible",
    "eligible_counts",
    "purge_all",
    "purge_at",
    "purge_pass",
    "retention",
]

# Rows one purge transaction deletes (for workflows: workflows, each with its
# history and inbox), so that no purge holds locks for long.
PURGE_BATCH = 500
# The retention settings, by the model whose rows they govern.
RETENTION_SETTINGS = {
    "Workflow": "WORKFLOW_RETENTION",
    "Schedule": "SCHEDULE_RETENTION",
    "QueueMessage": "QUEUE_RETENTION",
}
# Every table the purge deletes from, in the order counts are reported.
TABLES = (
    "Workflow",
    "WorkflowKV",
    "WorkflowMessage",
    "WorkflowStream",
    "WorkflowStreamValue",
    "WorkflowAttribute",
    "WorkflowMessageKey",
    "Schedule",
    "QueueMessage",
    "CronRun",
)
# The lease owner written on workflows a purge is about to delete (SQLite).
_PURGE_OWNER = "rivet-purge"

Counts = dict[str, int]


def retention(setting: str) -> timedelta | None:
    """Return a retention setting as a ``timedelta`` (``None``: keep forever)."""
    value: float | timedelta | None = getattr(rivet_settings, setting)
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


def _cutoff(setting: str) -> datetime | None:
    period = retention(setting)
    return None if period is None else clock.now_datetime() - period


def purge_at(workflow: Workflow) -> datetime | None:
    """Return when retention deletes ``workflow``.

    ``None`` while it is active (it is never deleted then) or when
    ``WORKFLOW_RETENTION`` is ``None``.
    """
    period = retention("WORKFLOW_RETENTION")
    if period is None or not workflow.is_finished or workflow.finished_at is None:
        return None
    return workflow.finished_at + period


# -- what is eligible ------------------------------------------------------------------
class _Retained(Protocol):
    """A queryset of rows retention deletes once finished long enough."""

    def none(self) -> Self: ...

    def finished_before(self, when: datetime) -> Self: ...


R = TypeVar("R", bound=_Retained)


def _finished_before(rows: R, setting: str) -> R:
    """Return the ``rows`` that finished longer ago than ``setting`` keeps them."""
    cutoff = _cutoff(setting)
    return rows.none() if cutoff is None else rows.finished_before(cutoff)


def _workflows() -> QuerySet[Workflow]:
    return _finished_before(Workflow.objects.all(), "WORKFLOW_RETENTION")


def _schedules() -> QuerySet[Schedule]:
    return _finished_before(Schedule.objects.all(), "SCHEDULE_RETENTION")


def _queue_messages() -> QuerySet[QueueMessage]:
    return _finished_before(QueueMessage.objects.all(), "QUEUE_RETENTION")


def _excess_cron_runs() -> QuerySet[CronRun]:
    """Runs beyond their job's limit (a scan: never on the sweeper's path)."""
    setting = history_limit(None)
    keep: Any = F("job__max_history")
    runs = CronRun.objects.all()
    if setting is None:
        runs = runs.filter(job__max_history__isnull=False)
    else:
        keep = Coalesce(F("job__max_history"), Value(setting))
    newest_first = Window(
        RowNumber(), partition_by=[F("job_id")], order_by=F("id").desc()
    )
    return runs.annotate(position=newest_first, keep=keep).filter(
        position__gt=F("keep")
    )


def eligible() -> dict[str, QuerySet[Any]]:
    """Return, per model name (:data:`TABLES`), the rows a purge deletes now."""
    workflows = _workflows().values("pk")
    return {
        "Workflow": _workflows(),
        "WorkflowKV": WorkflowKV.objects.filter(workflow__in=workflows),
        "WorkflowMessage": WorkflowMessage.objects.filter(workflow__in=workflows),
        "WorkflowStream": WorkflowStream.objects.filter(workflow__in=workflows),
        "WorkflowStreamValue": WorkflowStreamValue.objects.filter(
            stream__workflow__in=workflows
        ),
        "WorkflowAttribute": WorkflowAttribute.objects.filter(workflow__in=workflows),
        "WorkflowMessageKey": WorkflowMessageKey.objects.filter(workflow__in=workflows),
        "Schedule": _schedules(),
        "QueueMessage": _queue_messages(),
        "CronRun": _excess_cron_runs(),
    }


def eligible_counts() -> Counts:
    """Return, per model name, how many rows a purge would delete now."""
    return {name: rows.count() for name, rows in eligible().items()}


# -- purging ---------------------------------------------------------------------------
def _purge_workflows(limit: int) -> Counts:
    """Delete up to ``limit`` eligible workflows with their history and inbox."""
    candidates = _workflows().order_by("finished_at").values_list("pk", flat=True)
    with db.atomic():
        if skip_locked():
            # The row locks keep a concurrent recover()/replay() from claiming
            # them, and let concurrent purgers split the backlog.
            ids = list(candidates.select_for_update(skip_locked=True)[:limit])
        else:
            # No row locks (SQLite): the first write takes the database lock
            # and checks eligibility again, so a workflow an operation claimed
            # since the SELECT above is kept.
            token = uuid.uuid4().hex
            _workflows().filter(pk__in=list(candidates[:limit])).update(
                lease_token=token, lease_owner=_PURGE_OWNER
            )
            ids = list(
                Workflow.objects.filter(lease_token=token).values_list("pk", flat=True)
            )
        if not ids:
            return {}
        _, deleted = Workflow.objects.filter(pk__in=ids).delete()
    return {label.rpartition(".")[2]: count for label, count in deleted.items()}


def _purge_rows(rows: QuerySet[Any], limit: int) -> int:
    """Delete the ``limit`` oldest of ``rows`` in one statement."""
    oldest = rows.order_by("finished_at").values("pk")[:limit]
    deleted, _ = rows.model.objects.filter(pk__in=oldest).delete()
    return int(deleted)


def _trim_cron_history(limit: int) -> int:
    ids = list(_excess_cron_runs().values_list("pk", flat=True)[:limit])
    deleted, _ = CronRun.objects.filter(pk__in=ids).delete()
    return int(deleted)


def _add(total: Counts, counts: Counts) -> Counts:
    for name, count in counts.items():
        if count:
            total[name] = total.get(name, 0) + count
    return total


def purge_pass(batch: int = PURGE_BATCH) -> Counts:
    """Delete at most one batch per table of what retention lets go.

    Returns the rows deleted per model name. Cron history is not trimmed
    here (each run trims its own job).
    """
    counts = _purge_workflows(batch)
    _add(counts, {"Schedule": _purge_rows(_schedules(), batch)})
    _add(counts, {"QueueMessage": _purge_rows(_queue_messages(), batch)})
    if counts:
        logger.info(
            "purged %s",
            " ".join(f"{name}={count}" for name, count in sorted(counts.items())),
        )
    return counts


def purge_all(batch: int = PURGE_BATCH) -> Counts:
    """Delete everything retention lets go, batch after batch; return counts.

    Also trims every cron job's history to its limit (a scan of the runs).
    """
    total: Counts = {}
    while counts := purge_pass(batch):
        _add(total, counts)
    while trimmed := _trim_cron_history(batch):
        _add(total, {"CronRun": trimmed})
    return total
