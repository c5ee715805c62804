"""Operations on a workflow outside of its runs: what handles and the admin do.

``start`` stores the row and the input; ``status``, ``snapshot`` and
``history`` read through the engine's own read functions. Each operation
that writes history (cancel, recover, replay) takes the workflow's lease
first, so it never races a run, and runs the engine operation on a private
loop in the calling thread -- inside the caller's transaction when there is
one. ``send`` and ``wake`` only touch the row and the inbox.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from django.db.models import F

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
from ..exceptions import WorkflowNotFound
from ..models import Workflow, WorkflowKV, WorkflowStatus, db, sql
from . import attributes as workflow_attributes
from . import cancels, children, leases, queues, registry
from .children import start_fields
from .driver import DjangoDriver
from .execution import cancel_claimed, release, run_if_idle, run_private
from .leases import Lease
from .placement import create_placed, placement
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = [
    "MAX_ID_LENGTH",
    "cancel",
    "history",
    "recover",
    "replay",
    "snapshot",
    "start",
    "status",
    "wake",
]

MAX_ID_LENGTH = 255


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
    attributes: Mapping[str, str | int] | None = None,
    partition_key: str | None = None,
) -> tuple[str, str]:
    """Store a new workflow (idempotent per id); return ``(id, name)``.

    The input is validated and stored now; the first run is dispatched when
    the surrounding transaction commits. An existing id returns its own
    name (a different workflow name under that id is
    ``workflow/id_conflict``, a ``ValueError``).
    With ``queue`` the workflow is stored ``queued`` and admission starts
    it (:mod:`.queues`). ``timeout`` (seconds; default: the definition's)
    sets its deadline; ``attributes`` are stored for search (a new workflow's
    only: an existing id keeps its own).
    """
    where = placement(queue, priority, dedup_key, partition_key)
    attribute_rows = workflow_attributes.check(attributes)
    workflow_id = uuid.uuid4().hex if workflow_id is None else str(workflow_id)
    if not workflow_id or len(workflow_id) > MAX_ID_LENGTH:
        raise ValueError(f"A workflow id is 1-{MAX_ID_LENGTH} characters")
    stored = schema.roundtrip(input, "Workflow input")
    encoded = schema.encode_workflow_field(keys.WORKFLOW_INPUT, stored)
    # The size check every stored value goes through: refused here, before
    # the workflow exists, rather than failing its first run.
    check_record(keys.workflow_key(keys.WORKFLOW_INPUT), encoded, "Workflow input")
    now = clock.now_datetime()
    placed = where.fields() if where is not None else wake_fields(now)
    own_transaction = not db.in_atomic_block()
    with db.atomic():
        if sql.dialect(db.connection()).locks_by_writing_first:
            # A write first takes the database write lock (SQLite), so the
            # lookup and the insert below see one snapshot; a read first
            # fails with "database is locked" if another writer commits in
            # between.
            Workflow.objects.filter(pk=workflow_id).update(updated_at=F("updated_at"))
        fields = start_fields(
            definition.name, definition.timeout if timeout is None else timeout, now
        )
        row, created = create_placed(
            where,
            lambda: Workflow.objects.get_or_create(
                id=workflow_id,
                defaults={
                    **fields,
                    "traceparent": observability.traceparent(),
                    **placed,
                },
            ),
        )
        if not created:
            if row.name != definition.name:
                raise children.id_conflict(workflow_id, row.name)
            return workflow_id, row.name
        WorkflowKV.objects.create(
            workflow=row, key=keys.workflow_key(keys.WORKFLOW_INPUT), value=encoded
        )
        workflow_attributes.store(workflow_id, attribute_rows)
        if where is None:
            schedule_wake(workflow_id, now)
        else:
            queues.admit_after_start(where.queue, own_transaction)
    return workflow_id, definition.name


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
