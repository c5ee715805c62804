"""Workflow queues (``RIVET["WORKFLOW_QUEUES"]``): admission with flow control.

``workflows.start(..., queue="emails")`` stores the workflow ``queued``
(no ``wake_at``: no worker may run it). *Admission* starts queued workflows
while the queue's limits allow, lowest ``priority`` number first, oldest
first within one priority, by moving them to ``pending`` and due now; from
there they run like any workflow. The database is the source of truth, as in
DBOS:

- ``concurrency``: workflows of the queue started and not finished
  (pending, running, sleeping, rolling back) at most, across all workers. A
  sleeping or waiting workflow keeps its slot until it finishes.
- ``rate_limit = (n, seconds)``: at most ``n`` workflows of the queue started
  (admitted) in any window of that many seconds.

One admission pass per queue runs at a time on every database: it first
writes the queue's :class:`~django_rivet.models.WorkflowQueue` row, which
takes that row's lock on PostgreSQL and the write lock on SQLite, then
counts and admits in the same transaction. Passes run with each start (in
its own transaction, or after the caller's commits), after a workflow of the
queue finishes, when a rate-limit window reopens (a dispatch wake-up), and
on every sweep and worker round, so a lost trigger only delays a start.

A ``dedup_key`` is unique among a queue's workflows that have not finished
(a partial unique index), so starting a second one raises
:class:`~django_rivet.exceptions.WorkflowDeduplicated`; the holder's id is
on the error for server code, never in what a client may be shown (the
holder may be another caller's). ``max_queued`` bounds how many workflows
wait in the queue: a start past it raises
:class:`~django_rivet.exceptions.WorkflowQueueFull` (``workflow/queue_full``,
429) and stores nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q

from .. import clock, dispatch
from ..conf import rivet_settings
from ..exceptions import WorkflowQueueFull
from ..models import (
    WORKFLOW_ADMITTED,
    Workflow,
    WorkflowQueue,
    WorkflowStatus,
    db,
    sql,
)
from . import partitions
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "ADMIT_BATCH",
    "QueueConfig",
    "QueueStats",
    "admit",
    "admit_after_start",
    "admit_due",
    "admit_on_commit",
    "admit_when_due",
    "check_depth",
    "configured",
    "next_admission_at",
    "queue_stats",
]

# Workflows one admission pass starts at most (queues without a limit too).
ADMIT_BATCH = 100
QUEUE_NAME_MAX_LENGTH = 128
DEDUP_KEY_MAX_LENGTH = 255
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
# Unconfigured queues holding workflows that this process warned about.
_warned: set[str] = set()


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """One entry of ``RIVET["WORKFLOW_QUEUES"]``.

    ``partition_concurrency`` and ``partition_rate_limit`` hold per
    partition key (either makes the queue partitioned: every start names a
    ``partition_key``); ``worker_concurrency`` caps the queue's workflows one
    process runs at once.
    """

    name: str
    concurrency: int | None = None
    rate_limit: tuple[int, float] | None = None
    partition_concurrency: int | None = None
    partition_rate_limit: tuple[int, float] | None = None
    worker_concurrency: int | None = None
    # Workflows waiting to start (queued) at most; None: no bound.
    max_queued: int | None = None

    @property
    def partitioned(self) -> bool:
        """Tell whether the queue's workflows each belong to a partition."""
        return (
            self.partition_concurrency is not None
            or self.partition_rate_limit is not None
        )


def _rate(value: Any) -> tuple[int, float] | None:
    return None if value is None else (int(value[0]), float(value[1]))


def configured() -> dict[str, QueueConfig]:
    """Return the configured queues (``rivet.E701`` checks the setting)."""
    queues: dict[str, QueueConfig] = {}
    for name, options in rivet_settings.WORKFLOW_QUEUES.items():
        options = options or {}
        queues[name] = QueueConfig(
            name,
            options.get("concurrency"),
            _rate(options.get("rate_limit")),
            options.get("partition_concurrency"),
            _rate(options.get("partition_rate_limit")),
            options.get("worker_concurrency"),
            options.get("max_queued"),
        )
    return queues


# -- admission -------------------------------------------------------------------------
@contextlib.contextmanager
def _admission_transaction(name: str, now: datetime) -> Iterator[None]:
    """Open an admission pass's transaction and take the queue's lock.

    Its commit need not wait for the disk (on PostgreSQL): an admission lost
    in a crash leaves its workflows queued (and their rate-limit starts
    uncounted), and the next pass admits them again.
    """
    connection = db.connection()
    outermost = not connection.in_atomic_block
    # Inside a start's transaction, no savepoint: a failing pass fails the
    # start, which is rolled back whole.
    with db.atomic(savepoint=False):
        if outermost:
            sql.dialect(connection).defer_commit_flush(connection)
        # The write is the lock: the row's on PostgreSQL, the database's
        # write lock on SQLite (taken before anything is read).
        if not _execute(_sql().lock, [_when(now), name]):
            WorkflowQueue.objects.bulk_create(
                [WorkflowQueue(name=name, created_at=now)], ignore_conflicts=True
            )
            _execute(_sql().lock, [_when(now), name])
        yield


def _reopens_at(config: QueueConfig, now: datetime) -> datetime | None:
    """Return when the rate window next lets a start through (None: now)."""
    if config.rate_limit is None:
        return None
    limit, period = config.rate_limit
    window = (
        _of_queue(config.name)
        .filter(started_at__gt=now - timedelta(seconds=period))
        .order_by("-started_at")
    )
    # The limit-th newest start leaves the window first among those that
    # keep the queue at its limit.
    found = window.values_list("started_at", flat=True)[limit - 1 : limit]
    edge = next(iter(found), None)
    return None if edge is None else edge + timedelta(seconds=period)


def _of_queue(name: str) -> Any:
    """Return the workflows of queue ``name``, through its partial indexes.

    The ``queue <> ''`` term repeats the indexes' own condition: SQLite
    only uses a partial index when the query states it (PostgreSQL proves
    it from ``queue = name`` too).
    """
    return Workflow.objects.filter(~Q(queue=""), queue=name)


# -- the admission pass's statements ----------------------------------------------
# A pass runs with every queued start, so its statements are written once
# as SQL (:meth:`.sql.Dialect.admission_sql`) rather than compiled by the
# ORM each time (that compilation was most of a queued start's extra cost).


def check_depth(name: str) -> None:
    """Refuse a start into a queue holding ``max_queued`` queued workflows.

    Counted in the start's transaction, after its own row is inserted, with
    a bounded count (at most ``max_queued + 1`` index entries). Not under the
    queue's lock (a start inside an action would hold it through the
    action): concurrent starts on PostgreSQL can each pass at the bound, so
    a queue may exceed it by the starts in flight at that moment.
    """
    config = configured().get(name)
    if config is None or config.max_queued is None:
        return
    bound = config.max_queued
    depth = _of_queue(name).filter(status=WorkflowStatus.QUEUED)[: bound + 1].count()
    if depth > bound:
        raise WorkflowQueueFull(
            f"Workflow queue {name!r} holds {bound} workflows waiting to start",
            metadata={"queue": name, "limit": bound},
        )


def _sql() -> sql.AdmissionSQL:
    return sql.dialect(db.connection()).admission_sql(WORKFLOW_ADMITTED)


def _when(moment: datetime) -> Any:
    """Return a datetime as the database's driver takes it."""
    return db.connection().ops.adapt_datetimefield_value(moment)


def _execute(statement: str, params: list[Any]) -> int:
    with db.connection().cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.rowcount)


def _count(statement: str, params: list[Any]) -> int:
    with db.connection().cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.fetchone()[0])


def _free_slots(config: QueueConfig, now: datetime, limit: int) -> int:
    """Return how many workflows the queue's limits let start now.

    Two index range counts (its running workflows, its starts in the rate
    window), never a scan of its finished workflows.
    """
    free = limit
    if config.concurrency is not None:
        free = min(free, config.concurrency - _count(_sql().running, [config.name]))
    if config.rate_limit is not None and free > 0:
        window = now - timedelta(seconds=config.rate_limit[1])
        started = _count(_sql().started, [config.name, _when(window)])
        free = min(free, config.rate_limit[0] - started)
    return free


def _start_queued(name: str, now: datetime, free: int) -> list[str]:
    """Mark the first ``free`` queued workflows of ``name`` started; return them."""
    extra = wake_fields(now)
    quote = db.connection().ops.quote_name
    columns = "".join(f", {quote(column)} = %s" for column in extra)
    statement = _sql().admit.format(extra=columns)
    moment = _when(now)
    params = [moment, moment, moment, *(_when(v) for v in extra.values())]
    with db.connection().cursor() as cursor:
        cursor.execute(statement, [*params, name, moment, free])
        return [str(row[0]) for row in cursor.fetchall()]


def admit(name: str, limit: int = ADMIT_BATCH) -> int:
    """Start the queued workflows of queue ``name`` its limits allow now.

    Returns how many were started. Safe with any number of concurrent
    callers: one pass per queue at a time.
    """
    config = configured().get(name)
    if config is None:
        if name not in _warned:  # once per process: passes run every round
            _warned.add(name)
            logger.warning(
                "workflows wait in a queue that is not configured queue=%s "
                "(add it to RIVET['WORKFLOW_QUEUES'] or cancel them)",
                name,
            )
        return 0
    now = clock.now_datetime()
    with _admission_transaction(name, now):
        free = _free_slots(config, now, limit)
        if free <= 0:
            _wake_when_the_window_reopens(config, _reopens_at(config, now))
            return 0
        if config.partitioned:
            started = partitions.start_queued(config, now, free)
            if not started:
                _wake_when_the_window_reopens(
                    config, partitions.reopens_at(config, now)
                )
        else:
            started = _start_queued(name, now, free)
        for workflow_id in started:
            schedule_wake(workflow_id, now)
    if started:
        logger.info("workflows admitted queue=%s count=%s", name, len(started))
    return len(started)


def _wake_when_the_window_reopens(
    config: QueueConfig, reopens: datetime | None
) -> None:
    """Send one wake-up for when a rate limit lets the next start through."""
    queued = _queued(clock.now_datetime()).filter(queue=config.name)
    if reopens is None or not queued.exists():
        return
    rows = WorkflowQueue.objects.filter(name=config.name)
    if not rows.exclude(enqueued_for=reopens).update(enqueued_for=reopens):
        return  # a wake-up for that time was sent already
    eta = clock.to_timestamp(reopens)
    db.on_commit(
        lambda: dispatch.wake("admit_workflows", [config.name], eta=eta), robust=True
    )


def admit_after_start(name: str, own_transaction: bool) -> None:
    """Run the admission pass that follows a start into queue ``name``.

    In the start's own transaction when it has one: one commit for both, and
    the queue's lock is held only until that commit. Inside a caller's
    transaction (an actor's invocation, an ``atomic()`` block), once that
    commits instead, so the lock is never held through someone else's work.
    """
    if own_transaction:
        admit(name)
    else:
        admit_on_commit(name)


def admit_when_due(name: str, run_after: datetime) -> None:
    """Run an admission pass for ``name`` at ``run_after`` (a delayed start).

    Sent once the transaction commits, as any wake-up: a Celery ETA task
    within the horizon, the worker's wake-up otherwise; every sweep and
    worker round runs a pass too, which catches what was not sent.
    """
    eta = clock.to_timestamp(run_after)
    if dispatch.backend().eta_tasks and not dispatch.within_eta_horizon(eta):
        return
    dispatch.wake_on_commit("admit_workflows", [name], eta=eta)


def _queued(now: datetime) -> Any:
    """Return the queued workflows that may be admitted now (their
    ``run_after`` passed); the others are not counted anywhere yet."""
    return Workflow.objects.filter(status=WorkflowStatus.QUEUED).filter(
        Q(run_after__isnull=True) | Q(run_after__lte=now)
    )


def admit_on_commit(name: str) -> None:
    """Run an admission pass for ``name`` once the current transaction commits."""
    db.on_commit(lambda: admit(name), robust=True)


def admit_due(limit: int = ADMIT_BATCH) -> int:
    """Run an admission pass for every queue with queued workflows."""
    names = list(
        _queued(clock.now_datetime())
        .order_by()
        .values_list("queue", flat=True)
        .distinct()
    )
    return sum(admit(name, limit) for name in names)


def next_admission_at() -> float | None:
    """Return when a full rate window of a queue with queued workflows
    reopens, or a delayed queued workflow becomes due.

    For the worker loop's sleep. Queues held by their concurrency wait for a
    finish instead, which runs its own pass.
    """
    now = clock.now_datetime()
    waiting = set(_queued(now).order_by().values_list("queue", flat=True).distinct())
    delayed = (
        Workflow.objects.filter(status=WorkflowStatus.QUEUED, run_after__gt=now)
        .order_by()
        .aggregate(at=Min("run_after"))["at"]
    )
    times = [] if delayed is None else [clock.to_timestamp(delayed)]
    for name, config in configured().items():
        if name not in waiting:
            continue
        if (
            config.concurrency is not None
            and _free_slots(QueueConfig(name, config.concurrency), now, 1) <= 0
        ):
            continue
        for reopens in (_reopens_at(config, now), partitions.reopens_at(config, now)):
            if reopens is not None:
                times.append(clock.to_timestamp(reopens))
    return min(times) if times else None


# -- what the admin shows --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueueStats:
    """A queue as the admin shows it."""

    name: str
    config: QueueConfig | None  # None: not (or no longer) configured
    depth: int  # queued workflows
    running: int  # started, not finished
    oldest_queued_at: datetime | None


def queue_stats() -> list[QueueStats]:
    """Return every configured queue, and any other one holding workflows."""
    queued: dict[str, tuple[int, datetime | None]] = {
        name: (depth, oldest)
        for name, depth, oldest in _queued(clock.now_datetime())
        .values("queue")
        .annotate(depth=Count("pk"), oldest=Min("created_at"))
        .order_by()
        .values_list("queue", "depth", "oldest")
    }
    running = dict(
        Workflow.objects.exclude(queue="")
        .filter(status__in=WORKFLOW_ADMITTED)
        .values("queue")
        .annotate(count=Count("pk"))
        .order_by()
        .values_list("queue", "count")
    )
    queues = configured()
    names = sorted(set(queues) | set(queued) | set(running))
    return [
        QueueStats(
            name,
            queues.get(name),
            queued.get(name, (0, None))[0],
            running.get(name, 0),
            queued.get(name, (0, None))[1],
        )
        for name in names
    ]
