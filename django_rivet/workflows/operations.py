"""Operations on a workflow outside of its runs: what handles and the admin do.

``start`` stores the row and the input; ``status``, ``snapshot`` and
``history`` read through the engine's own read functions. Each operation
that writes history (cancel, recover, replay) takes the workflow's lease
first, so it never races a run, and runs the engine operation on a private
loop in the calling thread -- inside the caller's transaction when there is
one. ``send`` and ``wake`` only touch the row and the inbox.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from .. import clock, observability
from ..engine import (
    CANCEL_REASONS,
    HistoryEntry,
    ReplayRefusedError,
    WorkflowDefinition,
    check_record,
    keys,
    read_history,
    recover_workflow,
    replay_from,
    schema,
)
from ..engine.ops import WorkflowSnapshot, read_workflow
from ..engine.shapes import workflow_shapes
from ..exceptions import (
    InvalidArgs,
    WorkflowNotFound,
)
from ..models import (
    Workflow,
    WorkflowKV,
    WorkflowStatus,
    db,
    sql,
)
from . import attributes as workflow_attributes
from . import cancels, children, debounces, leases, queues, registry
from .children import start_fields
from .driver import DjangoDriver
from .execution import cancel_claimed, release, run_if_idle, run_private
from .leases import Lease
from .placement import Placement, create_placed, placement
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "MAX_ID_LENGTH",
    "cancel",
    "due_time",
    "history",
    "recover",
    "replay",
    "snapshot",
    "start",
    "status",
    "wake",
]

MAX_ID_LENGTH = 255


@functools.cache
def _input_key() -> bytes:
    return keys.workflow_key(keys.WORKFLOW_INPUT)


@functools.cache
def _columns() -> list[str]:
    return [str(f.column) for f in Workflow._meta.concrete_fields]


def _require(workflow_id: str) -> None:
    if not Workflow.objects.filter(pk=workflow_id).exists():
        raise _not_found(workflow_id)


def _not_found(workflow_id: str) -> WorkflowNotFound:
    return WorkflowNotFound(f"No workflow has id {workflow_id!r}")


def _column(workflow_id: str, column: str) -> str:
    """Return one column of the workflow's row, as text."""
    rows = Workflow.objects.filter(pk=workflow_id).values_list(column, flat=True)
    value = rows.first()
    if value is None:
        raise _not_found(workflow_id)
    return str(value)


def start(
    definition: WorkflowDefinition,
    input: Any = None,
    workflow_id: str | None = None,
    *,
    queue: str | None = None,
    priority: int = 0,
    dedup_key: str | None = None,
    timeout: float | None = None,
    run_after: datetime | None = None,
    order: int = 0,
    attributes: Mapping[str, str | int] | None = None,
    partition_key: str | None = None,
    version: str | None = None,
    debounce: float | None = None,
    debounce_max: float | None = None,
) -> tuple[str, str]:
    """Store a new workflow (idempotent per id); return ``(id, name)``.

    The input is validated and stored now; the first run is dispatched when
    the surrounding transaction commits. An existing id returns its own
    name (a different workflow name under that id is
    ``workflow/id_conflict``, a ``ValueError``).
    With ``queue`` the workflow is stored ``queued`` and admission starts
    it (:mod:`.queues`); past the queue's ``max_queued`` the start is refused
    (``workflow/queue_full``). ``timeout`` (seconds; default: the
    definition's) sets its deadline; ``attributes`` are stored for search (a
    new workflow's only: an existing id keeps its own). ``run_after`` delays
    the first run (a queued workflow is admitted only once it is due).
    ``order`` is the priority of a direct start among due workflows (lower
    first; the task backend's). ``version``: the application version it
    runs on (:mod:`.versions`). ``debounce`` (seconds, with ``queue`` and
    ``dedup_key``) makes it a debounced start (:mod:`.debounces`): the id
    returned is the burst's workflow's.
    """
    where = placement(queue, priority, dedup_key, partition_key)
    debounces.check(where, debounce, debounce_max, run_after)
    attribute_rows = workflow_attributes.check(attributes)
    fresh = workflow_id is None
    workflow_id = uuid.uuid4().hex if workflow_id is None else str(workflow_id)
    if not workflow_id or len(workflow_id) > MAX_ID_LENGTH:
        raise ValueError(f"A workflow id is 1-{MAX_ID_LENGTH} characters")
    # An annotated input (docs/types.md) is checked and stored as the wire
    # carries it: request/invalid_args naming its path, nothing stored.
    typed_input = workflow_shapes(definition.fn).dump_input(input, InvalidArgs)
    stored = schema.roundtrip(typed_input, "Workflow input")
    encoded = schema.encode_workflow_field(keys.WORKFLOW_INPUT, stored)
    # The size check every stored value goes through: refused here, before
    # the workflow exists, rather than failing its first run.
    check_record(_input_key(), encoded, "Workflow input")
    now = clock.now_datetime()
    due = now if run_after is None or run_after <= now else run_after
    if where is not None:
        placed = where.fields(None if due is now else due)
    else:
        placed = {"wake_at": due, "priority": order, **wake_fields(due)}
    own_transaction = not db.in_atomic_block()
    fields = {
        **start_fields(
            definition.name,
            definition.timeout if timeout is None else timeout,
            now,
            version,
        ),
        "traceparent": observability.traceparent(),
        **placed,
    }
    if debounce is not None and where is not None:

        def create(debounced: dict[str, Any]) -> str | None:
            row, created = Workflow.objects.get_or_create(
                id=workflow_id, defaults=debounced
            )
            if not created:
                return row.name
            _store_input(workflow_id, encoded, attribute_rows)
            return None

        burst_id = debounces.bounce_or_create(
            workflow_id,
            definition.name,
            where,
            fields,
            encoded,
            debounce,
            debounce_max,
            create,
        )
        return burst_id, definition.name
    if fresh and where is None and not attribute_rows:
        # A random id is new: no lookup, nothing to collide with.
        _insert_new(workflow_id, fields, encoded)
        schedule_wake(workflow_id, due)  # once the caller commits, or now
        return workflow_id, definition.name
    with db.atomic():
        if fresh and where is not None and not where.dedup_key:  # nothing to collide
            Workflow.objects.create(id=workflow_id, **fields)
        else:
            found = _create_or_find(workflow_id, fields, where)
            if found is not None:
                if found != definition.name:
                    raise children.id_conflict(workflow_id, found)
                return workflow_id, found
        _store_input(workflow_id, encoded, attribute_rows)
        if where is None:
            schedule_wake(workflow_id, due)
        elif due is not now:
            queues.admit_when_due(where.queue, due)
        else:
            queues.check_depth(where.queue)
            queues.admit_after_start(where.queue, own_transaction)
    return workflow_id, definition.name


def _store_input(workflow_id: str, encoded: bytes, attribute_rows: Any) -> None:
    """Store a new workflow's input and attributes (in its transaction)."""
    WorkflowKV.objects.create(
        workflow_id=workflow_id,
        key=keys.workflow_key(keys.WORKFLOW_INPUT),
        value=encoded,
    )
    workflow_attributes.store(workflow_id, attribute_rows)


def _insert_new(workflow_id: str, fields: dict[str, Any], encoded: bytes) -> None:
    """Insert a new workflow and its input with the database's statements.

    (:meth:`~..models.sql.Dialect.start_sql`: written once, not compiled by
    the ORM at each start.) One statement runs as it is, in the caller's
    transaction or its own; two run in a transaction.
    """
    connection = db.connection()
    statements = sql.dialect(connection).start_sql(_columns())
    params = db.insert_params(Workflow, {"id": workflow_id, **fields}, connection)
    key = _input_key()
    if len(statements) == 1:
        with connection.cursor() as cursor:
            cursor.execute(statements[0], [*params, key, encoded])
        return
    # In the caller's transaction no savepoint: a failure between the two
    # leaves that transaction to be rolled back (Django refuses to go on).
    with db.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(statements[0], params)
        cursor.execute(statements[1], [workflow_id, key, encoded])


def _create_or_find(
    workflow_id: str, fields: dict[str, Any], where: Placement | None
) -> str | None:
    """Create the workflow row; return the name of the one holding the id.

    Call in a transaction; None when this call created it.
    """
    if sql.dialect(db.connection()).locks_by_writing_first:
        # A write first takes the database write lock (SQLite), so the
        # lookup and the insert below see one snapshot; a read first fails
        # with "database is locked" if another writer commits in between.
        Workflow.objects.filter(pk=workflow_id).update(updated_at=F("updated_at"))
    row, created = create_placed(
        where,
        lambda: Workflow.objects.get_or_create(id=workflow_id, defaults=fields),
    )
    return None if created else row.name


def due_time(run_after: datetime | float | timedelta | None) -> datetime | None:
    """Return when a start with ``run_after`` is due (None: now).

    An aware datetime, or seconds or a timedelta from now; anything else is
    a ``TypeError``, a naive datetime a ``ValueError``.
    """
    if run_after is None:
        return None
    if isinstance(run_after, datetime):
        if timezone.is_naive(run_after):
            raise ValueError("run_after must be an aware datetime")
        return run_after
    delay = clock.as_seconds(run_after)
    if delay is None:
        raise TypeError("run_after is a datetime, or seconds or a timedelta")
    return clock.to_datetime(clock.now() + delay)


def definition_of(workflow: str | WorkflowDefinition) -> WorkflowDefinition:
    """Return the registered definition for a name or a definition."""
    if not isinstance(workflow, WorkflowDefinition):
        return registry.get(workflow)
    # Workers look definitions up by name: an unregistered one could never run.
    if registry.all_workflows().get(workflow.name) != workflow:
        raise WorkflowNotFound(f"Workflow {workflow.name!r} is not registered")
    return workflow


def name_of(workflow_id: str) -> str:
    """Return the workflow name of an existing workflow id."""
    return _column(workflow_id, "name")


def version_of(workflow_id: str) -> str | None:
    """Return the application version a workflow runs on (None: none)."""
    return _column(workflow_id, "version") or None


def status(workflow_id: str) -> str:
    """Return the workflow's status (read from its row)."""
    return _column(workflow_id, "status")


def status_and_reason(workflow_id: str) -> tuple[str, str]:
    """Return the workflow's status and why it was cancelled ("" if it was not)."""
    found = (
        Workflow.objects.filter(pk=workflow_id)
        .values_list("status", "cancel_reason")
        .first()
    )
    if found is None:
        raise _not_found(workflow_id)
    return str(found[0]), str(found[1])


def _reader(workflow_id: str) -> DjangoDriver:
    _require(workflow_id)
    return DjangoDriver(workflow_id, private_loop=True)


def snapshot(workflow_id: str) -> WorkflowSnapshot:
    """Return the stored state, output, error and input (the engine's view)."""
    return run_private(read_workflow(_reader(workflow_id)))


def history(workflow_id: str) -> list[HistoryEntry]:
    """Return the decoded history entries, in the order they were created."""
    return run_private(read_history(_reader(workflow_id)))


def wake(workflow_id: str) -> bool:
    """Make an active workflow run now; return False if it has finished."""
    now = clock.now_datetime()
    with db.atomic():
        woken = (
            Workflow.objects.active()
            .exclude(status=WorkflowStatus.QUEUED)  # its queue starts it
            .filter(pk=workflow_id)
            .update(wake_at=now, wake_signal=F("wake_signal") + 1, **wake_fields(now))
        )
        if not woken:
            _require(workflow_id)
            return False
        schedule_wake(workflow_id, now)
    return True


def cancel(workflow_id: str, reason: str = "cancelled") -> bool:
    """Cancel an active workflow; return False if it had already finished.

    It is ``cancelled`` at once, and stops before its next step (see
    :mod:`.cancels`). A workflow nobody runs has its cancel carried out
    right here: the rollback handlers of its completed steps run in this
    process. One that a worker runs has it carried out by that worker once
    its running step (if any) finishes.
    """
    if reason not in CANCEL_REASONS:
        raise ValueError(f"Unknown cancel reason {reason!r}")
    with db.atomic():
        if not cancels.mark([workflow_id], reason):
            _require(workflow_id)
            return False
        lease = leases.claim(workflow_id, run=False)
        if lease is None:
            return True  # its holder carries the cancel out
    # Outside the claim's transaction: rollback handlers do I/O.
    cancel_claimed(lease, reason)
    return True


def recover(workflow_id: str) -> bool:
    """Let a failed workflow run again from its failed steps.

    Returns False (changing nothing) unless the workflow is failed and no
    worker holds it.
    """
    held = run_if_idle(workflow_id, WorkflowStatus.FAILED, recover_workflow)
    if held is None:
        return False
    lease, driver = held
    _release_rewound(lease, driver)
    logger.info("workflow recovered workflow=%s", workflow_id)
    return True


def replay(workflow_id: str, entry_id: str | None = None) -> list[HistoryEntry]:
    """Delete a step and everything recorded after it, and run from there.

    Without ``entry_id`` the whole history goes (the input stays). Returns
    the remaining history. Raises ``ReplayRefusedError`` while a worker runs
    the workflow, and ``EntryNotFoundError`` for an unknown entry.
    """
    _require(workflow_id)
    lease = leases.claim(workflow_id, run=False)
    if lease is None:
        raise ReplayRefusedError("Cannot replay the workflow while it is running")
    driver = DjangoDriver(
        workflow_id, lease_token=lease.token, stop_on_cancel=False, private_loop=True
    )
    try:
        remaining = run_private(replay_from(workflow_id, driver, entry_id))
    except BaseException:
        leases.release(lease)
        raise
    _release_rewound(lease, driver)
    logger.info("workflow replayed workflow=%s entry=%s", workflow_id, entry_id)
    return remaining


def _release_rewound(lease: Lease, driver: DjangoDriver) -> None:
    """Release after recover/replay: the workflow sleeps and is due now."""
    wake = driver.alarm if driver.alarm_set else clock.now()
    release(
        lease,
        status=WorkflowStatus.SLEEPING,
        wake_at=None if wake is None else clock.to_datetime(wake),
        waiting_for=[],
        finished_at=None,
        cancel_requested=False,
        retry_count=0,
        last_error="",
    )
