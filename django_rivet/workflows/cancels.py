"""Cancel requests: what a cancel writes at once, and the cascade to children.

A cancel takes effect at once wherever others look: the workflow's status
is ``cancelled`` as soon as ``handle.cancel()`` returns, its queue slot is
free (an admission pass runs after the commit), its dedup key too, a parent
waiting for it is woken, and its non-detached descendants are cancelled the
same way. The row keeps ``cancel_requested`` until the cancel is carried
out -- the rollback handlers of its completed steps run and the engine
records it cancelled: by the operation right away when no worker holds it
(:func:`~.operations.cancel`), else by the worker holding it. That worker
reads the row before each step it starts and is fenced out of every write
(:mod:`.fencing`), so no further step function runs and no child starts
once the cancel committed; the step already running finishes, it is not
interrupted. A run that ends anyway (a write refused, or it finished in
between) leaves the workflow ``cancelled`` and due, and the next run
carries the cancel out (:func:`~.leases.release`).

A child claimed while its parent is cancelled cancels itself
(:func:`parent_cancelled`): the cascade holds even if the process died
between the parent's cancel and the request to its children.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime
from typing import Any

from django.db.models import F

from .. import clock
from ..models import Workflow, WorkflowStatus, db
from . import children, endings, live, queues
from .wakeups import schedule_wake, wake_fields

logger = logging.getLogger("django_rivet.workflows")

__all__ = ["cancel_children", "cancel_fields", "mark", "parent_cancelled"]


def cancel_fields(reason: str, now: datetime) -> dict[str, Any]:
    """Return what a cancel writes to an active workflow's row."""
    return {
        "status": WorkflowStatus.CANCELLED,
        "cancel_requested": True,
        "cancel_reason": reason,
        "finished_at": now,
        "updated_at": now,
        "wake_at": now,
        "wake_signal": F("wake_signal") + 1,
        **wake_fields(now),
    }


def mark(workflow_ids: list[str], reason: str) -> list[str]:
    """Cancel the active ones of ``workflow_ids`` at once (call in a transaction).

    Returns the ids it cancelled. Their queues admit the next workflows and
    their parents are woken once the transaction commits, their
    non-detached descendants are cancelled after it, and each is due now for
    a run to carry its cancel out (the rollbacks).
    """
    now = clock.now_datetime()
    # The write first (it takes the write lock on SQLite), then the read of
    # what it wrote: the rows it stamped with this cancel's time.
    if (
        not Workflow.objects.active()
        .filter(pk__in=workflow_ids)
        .update(**cancel_fields(reason, now))
    ):
        return []
    found = list(
        Workflow.objects.filter(
            pk__in=workflow_ids, cancel_requested=True, updated_at=now
        ).values_list("pk", "queue", "parent_id", "name")
    )
    error = endings.cancel_error(reason)
    for workflow_id, queue, parent_id, name in found:
        endings.finished_on_commit(workflow_id, name, WorkflowStatus.CANCELLED, error)
        if queue:
            queues.admit_on_commit(queue)  # its slot is free
        children.notify_waiters(workflow_id, parent_id)
        schedule_wake(workflow_id, now)
        live.signal_on_commit(workflow_id)  # a live run here stops now
        db.on_commit(functools.partial(cancel_children, workflow_id), robust=True)
    return [row[0] for row in found]


def cancel_children(parent_id: str) -> int:
    """Cancel the active non-detached children of ``parent_id``, and theirs.

    Each is cancelled at once as :func:`mark` does, with the reason
    ``parent_cancelled`` (which cascades down the tree after the commit); a
    worker carries each cancel out (its rollbacks). Returns how many
    children were cancelled.
    """
    rows = Workflow.objects.children_of(parent_id).active().filter(detached=False)
    ids = list(rows.values_list("pk", flat=True))
    if not ids:
        return 0
    with db.atomic():
        cancelled = mark(ids, "parent_cancelled")
    if cancelled:
        logger.info(
            "workflow children cancelled parent=%s count=%s", parent_id, len(cancelled)
        )
    return len(cancelled)


def parent_cancelled(parent_id: str) -> bool:
    """Tell whether ``parent_id`` exists and was cancelled."""
    if not parent_id:
        return False
    return Workflow.objects.filter(
        pk=parent_id, status=WorkflowStatus.CANCELLED
    ).exists()
