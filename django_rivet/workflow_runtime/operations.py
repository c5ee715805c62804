"""Operations on a workflow outside of its runs: what handles and the admin do.

Each one that writes history (cancel, recover, replay) takes the workflow's
lease first, so it never races a run, and runs the engine operation on a
private loop in the calling thread -- inside the caller's transaction when
there is one. ``send`` and ``wake`` only touch the row and the inbox.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F

from .. import clock
from ..exceptions import WorkflowNotFound
from ..models import WORKFLOW_ACTIVE, Workflow, WorkflowMessage, WorkflowStatus
from ..workflow import (
    HistoryEntry,
    ReplayRefusedError,
    recover_workflow,
    replay_from,
)
from . import leases
from .driver import DjangoDriver, encode_body
from .execution import cancel_claimed, release, run_private
from .leases import Lease
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["cancel", "recover", "replay", "send", "wake"]


def _require(workflow_id: str) -> None:
    if not Workflow.objects.filter(pk=workflow_id).exists():
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")


def wake(workflow_id: str) -> bool:
    """Make an active workflow run now; return False if it has finished."""
    now = clock.now_datetime()
    with transaction.atomic():
        woken = (
            Workflow.objects.active()
            .filter(pk=workflow_id)
            .update(wake_at=now, wake_signal=F("wake_signal") + 1, **wake_fields(now))
        )
        if not woken:
            _require(workflow_id)
            return False
        schedule_wake(workflow_id, now)
    return True


def send(workflow_id: str, name: str, body: Any = None) -> str:
    """Store a message in the workflow's inbox and wake it if it waits for it.

    Returns the message id. Raises ``TypeError`` for a body that cannot be
    stored and ``workflow/not_found`` for an unknown workflow.
    """
    data = encode_body(body)
    now = clock.now_datetime()
    with transaction.atomic():
        # The signal bump comes first: it locks the row, so a run releasing
        # concurrently either sees it (and runs again) or released before
        # (and its waiting_for is what we read next).
        rows = Workflow.objects.filter(pk=workflow_id)
        if not rows.update(wake_signal=F("wake_signal") + 1):
            raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
        status, waiting_for = rows.values_list("status", "waiting_for").get()
        message = WorkflowMessage.objects.create(
            workflow_id=workflow_id, name=name, body=data
        )
        wanted = name in waiting_for or "*" in waiting_for
        if status in WORKFLOW_ACTIVE and wanted:
            rows.update(wake_at=now, **wake_fields(now))
            schedule_wake(workflow_id, now)
    logger.debug("workflow message sent workflow=%s name=%s", workflow_id, name)
    return str(message.pk)


def cancel(workflow_id: str) -> bool:
    """Cancel an active workflow; return False if it had already finished.

    A workflow nobody runs is cancelled right here. One that a worker is
    running is marked: the worker is fenced out at its next write and the
    next claim cancels it.
    """
    now = clock.now_datetime()
    with transaction.atomic():
        requested = (
            Workflow.objects.active()
            .filter(pk=workflow_id)
            .update(
                cancel_requested=True,
                wake_at=now,
                wake_signal=F("wake_signal") + 1,
                **wake_fields(now),
            )
        )
        if not requested:
            _require(workflow_id)
            return False
        lease = leases.claim(workflow_id, run=False)
        if lease is None:
            schedule_wake(workflow_id, now)
            return True
        cancel_claimed(lease)
    return True


def recover(workflow_id: str) -> bool:
    """Let a failed workflow run again from its failed steps.

    Returns False (changing nothing) unless the workflow is failed and no
    worker holds it.
    """
    row = Workflow.objects.filter(pk=workflow_id).values_list("status", flat=True)
    status = row.first()
    if status is None:
        raise WorkflowNotFound(f"No workflow has id {workflow_id!r}")
    if status != WorkflowStatus.FAILED:
        return False
    lease = leases.claim(workflow_id, run=False)
    if lease is None:
        return False
    driver = DjangoDriver(
        workflow_id, lease_token=lease.token, stop_on_cancel=False, private_loop=True
    )
    try:
        recovered = run_private(recover_workflow(workflow_id, driver))
    except BaseException:
        leases.release(lease)
        raise
    if not recovered:
        leases.release(lease)
        return False
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
